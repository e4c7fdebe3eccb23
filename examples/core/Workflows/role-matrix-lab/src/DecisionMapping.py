"""Mapping of `approve` and `reject`, re-authored from the upstream .csx: keeps `decision` from
the transition body (default `unknown`). The body's attributes are merged into the data before
the task runs, so the decision is read from there."""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"decision": (context.instance.data or {}).get("decision") or "unknown"}
