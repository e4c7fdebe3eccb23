"""onExecute of the shared `leaf-only-mark`: counts `leafOnlyMarks`.

It returns only that key (a delta: the runtime deep-merges it into the instance data).
Re-authored from the upstream .csx."""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"leafOnlyMarks": get(context.instance.data, "leafOnlyMarks", 0) + 1}
