"""onEntry of root-initial: counts `rootInitialEntries`.

It returns only that key (a delta: the runtime deep-merges it into the instance data).
Re-authored from the upstream .csx."""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"rootInitialEntries": get(context.instance.data, "rootInitialEntries", 0) + 1}
