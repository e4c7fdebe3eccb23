"""onEntry mapping of `review`, re-authored from the upstream .csx: counts the entries."""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"reviewEntries": (context.instance.data or {}).get("reviewEntries", 0) + 1}
