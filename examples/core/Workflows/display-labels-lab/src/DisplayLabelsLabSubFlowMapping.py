"""Subflow mapping of `dl-sub`, re-authored from the upstream .csx: the child starts with
`{startedByDisplayLabelsLab: true}`; when it ends, the parent keeps its own data and adds
`childSettled: true`."""


def input_handler(context):
    return ScriptResponse(data={"startedByDisplayLabelsLab": True})


def output_handler(context):
    return {"childSettled": True}
