"""onEntry of root-waiting: counts `rootEntries`.

It returns only that key (a delta: the runtime deep-merges it into the instance data).
Re-authored from the upstream .csx."""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"rootEntries": get(context.instance.data, "rootEntries", 0) + 1}
