"""Event mapping of `approve-by-event`, re-authored from the upstream .csx: the event goes to
the live instance whose key is its order id; the transition body is the decision."""


def handler(context):
    payload = context.event_payload or {}
    return ScriptResponse(
        key=str(payload.get("orderId")),
        data={"decision": payload.get("decision"), "approvedBy": payload.get("approvedBy")},
    )
