"""onExecute of the shared `middle-shared-mark`: counts `middleSharedMarks`.

It returns only that key (a delta: the runtime deep-merges it into the instance data).
Re-authored from the upstream .csx."""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"middleSharedMarks": get(context.instance.data, "middleSharedMarks", 0) + 1}
