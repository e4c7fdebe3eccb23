"""onEntry mapping of `intake`, re-authored from the upstream .csx: counts the entries."""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"intakeEntries": (context.instance.data or {}).get("intakeEntries", 0) + 1}
