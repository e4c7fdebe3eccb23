"""Start and onEntry mapping of the type-P flow, re-authored from the upstream .csx: writes
`flowType = "P"`, `subProcessInitialized = true` and `initAt`."""

from datetime import UTC, datetime


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"flowType": "P", "subProcessInitialized": True, "initAt": datetime.now(UTC).isoformat()}
