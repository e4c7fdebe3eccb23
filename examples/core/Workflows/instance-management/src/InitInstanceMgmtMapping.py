"""Start mapping of instance-management-test-workflow, re-authored from the upstream .csx.

Normalises the start data: `category` (default "default"), `priority` as an integer (default 1),
and marks the instance as started.
"""

from datetime import datetime, UTC


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    data = context.instance.data or {}
    try:
        priority = int(data.get("priority", 1))
    except (TypeError, ValueError):
        priority = 1
    return {
        "category": data.get("category") or "default",
        "priority": priority,
        "testStarted": True,
        "startedAt": datetime.now(UTC).isoformat(),
    }
