"""Subflow mapping, re-authored from the upstream .csx: the child starts with the parent's
`testId` (when it has one); when the child ends, the parent keeps its data, overlays the child's
and sets `leafCompleted`."""


def input_handler(context):
    test_id = get(context.instance.data, "testId")
    return ScriptResponse(data={"testId": test_id} if test_id is not None else {})


def output_handler(context):
    return {**(context.body or {}), "leafCompleted": True}
