"""Mapping of the instance function `role-matrix-summary` (its script task
`role-matrix-summary-task`), re-authored from the upstream .csx: a summary of the case for
whoever calls it, with what the function saw of its caller (the `role` and `position` request
headers). Nothing is written to the instance: a function only answers."""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    data = context.instance.data or {}
    return ScriptResponse(
        data={
            "caseRef": data.get("caseRef"),
            "decision": data.get("decision"),
            "noteMarks": data.get("noteMarks") or 0,
            "observedRole": context.headers.get("role"),
            "observedPosition": context.headers.get("position"),
            "executed": True,
        }
    )
