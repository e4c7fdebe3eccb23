"""Subflow mapping of `parent-subflow`, re-authored from the upstream .csx: the child starts with
`{startedByTimeoutLabParent: true}`; when it ends, the parent keeps its own data and adds
`childSettled: true`."""


def input_handler(context):
    return ScriptResponse(data={"startedByTimeoutLabParent": True})


def output_handler(context):
    return {"childSettled": True}
