"""Start event mapping of event-driven-lab, re-authored from the upstream .csx: the order id of
the event is the new instance's key; its data records how it started."""


def handler(context):
    payload = context.event_payload or {}
    return ScriptResponse(
        key=str(payload.get("orderId")),
        data={
            "orderId": payload.get("orderId"),
            "amount": payload.get("amount"),
            "startedBy": "event",
            "approvals": 0,
        },
    )
