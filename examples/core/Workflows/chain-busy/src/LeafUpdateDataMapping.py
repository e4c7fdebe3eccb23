"""onExecute of `update-leaf-data`: counts `leafUpdates`.

It returns only that key (a delta: the runtime deep-merges it into the instance data).
Re-authored from the upstream .csx."""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"leafUpdates": get(context.instance.data, "leafUpdates", 0) + 1}
