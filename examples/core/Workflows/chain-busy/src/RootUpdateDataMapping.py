"""onExecute of `update-root-data`: counts `rootUpdates`.

It returns only that key (a delta: the runtime deep-merges it into the instance data).
Re-authored from the upstream .csx."""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"rootUpdates": get(context.instance.data, "rootUpdates", 0) + 1}
