"""onExit of root-waiting: counts `rootExits`.

It returns only that key (a delta: the runtime deep-merges it into the instance data).
Re-authored from the upstream .csx."""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"rootExits": get(context.instance.data, "rootExits", 0) + 1}
