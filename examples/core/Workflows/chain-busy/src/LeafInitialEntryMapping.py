"""onEntry of leaf-initial: counts `leafInitialEntries`.

It returns only that key (a delta: the runtime deep-merges it into the instance data).
Re-authored from the upstream .csx."""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"leafInitialEntries": get(context.instance.data, "leafInitialEntries", 0) + 1}
