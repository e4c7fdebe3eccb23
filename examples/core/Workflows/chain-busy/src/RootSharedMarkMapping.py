"""onExecute of the shared `root-shared-mark`: counts `rootSharedMarks`.

It returns only that key (a delta: the runtime deep-merges it into the instance data).
Re-authored from the upstream .csx."""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"rootSharedMarks": get(context.instance.data, "rootSharedMarks", 0) + 1}
