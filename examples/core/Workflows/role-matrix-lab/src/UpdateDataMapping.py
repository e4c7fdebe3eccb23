"""Mapping of the workflow's `updateData` transition, re-authored from the upstream .csx: counts
the updates."""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"updateDataMarks": (context.instance.data or {}).get("updateDataMarks", 0) + 1}
