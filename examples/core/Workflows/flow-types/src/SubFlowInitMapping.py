"""Start and onEntry mapping of the type-S flow, re-authored from the upstream .csx: writes
`flowType = "S"`, `subFlowInitialized = true` and `initAt`."""

from datetime import UTC, datetime


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"flowType": "S", "subFlowInitialized": True, "initAt": datetime.now(UTC).isoformat()}
