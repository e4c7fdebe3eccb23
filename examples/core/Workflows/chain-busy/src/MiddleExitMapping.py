"""onExit of middle-waiting: counts `middleExits`.

It returns only that key (a delta: the runtime deep-merges it into the instance data).
Re-authored from the upstream .csx."""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"middleExits": get(context.instance.data, "middleExits", 0) + 1}
