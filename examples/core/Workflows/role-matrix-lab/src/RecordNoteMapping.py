"""Mapping of the shared `$self` transition `record-note`, re-authored from the upstream .csx:
counts the notes."""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"noteMarks": (context.instance.data or {}).get("noteMarks", 0) + 1}
