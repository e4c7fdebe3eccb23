"""Mapping of `eb-script-fail-task` (a script task): fails on purpose until the instance data
says `shouldFail: false`; an absent flag means fail. Re-authored from the upstream .csx.

A script task's input handler is its work: when it raises, the task fails with
`Task:Script:eb-script-fail-task:500` (status 500), which the error boundaries match.
"""

from datetime import UTC, datetime


def input_handler(task, context):
    if context.instance.data.get("shouldFail") is not False:
        raise RuntimeError("eb-script-fail-task fails while shouldFail is not false")
    return {"scriptRecovered": True, "scriptRecoveredAt": datetime.now(UTC).isoformat()}
