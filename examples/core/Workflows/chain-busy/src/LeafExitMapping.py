"""onExit of leaf-waiting: counts `leafExits`.

It returns only that key (a delta: the runtime deep-merges it into the instance data).
Re-authored from the upstream .csx."""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"leafExits": get(context.instance.data, "leafExits", 0) + 1}
