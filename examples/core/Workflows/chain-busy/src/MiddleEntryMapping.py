"""onEntry of middle-waiting: counts `middleEntries`.

It returns only that key (a delta: the runtime deep-merges it into the instance data).
Re-authored from the upstream .csx."""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"middleEntries": get(context.instance.data, "middleEntries", 0) + 1}
