"""Mapping of the workflow's `exit-workflow` transition, re-authored from the upstream .csx.

Keeps `testId` and `initializeCompleted` when present and marks that the exit ran.
"""

from datetime import datetime, UTC

KEPT = ("testId", "initializeCompleted")


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    data = context.instance.data or {}
    result = {name: data[name] for name in KEPT if name in data}
    result["exitExecuted"] = True
    result["exitAt"] = datetime.now(UTC).isoformat()
    return result
