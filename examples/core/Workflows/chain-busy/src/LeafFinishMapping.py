"""onExecute of `finish-leaf`: counts `leafFinishMarks`.

It returns only that key (a delta: the runtime deep-merges it into the instance data).
Re-authored from the upstream .csx."""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"leafFinishMarks": get(context.instance.data, "leafFinishMarks", 0) + 1}
