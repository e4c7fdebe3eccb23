"""onEntry of leaf-waiting: counts `leafEntries`.

It returns only that key (a delta: the runtime deep-merges it into the instance data).
Re-authored from the upstream .csx."""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"leafEntries": get(context.instance.data, "leafEntries", 0) + 1}
