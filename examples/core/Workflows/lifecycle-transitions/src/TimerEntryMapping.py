"""onEntry mapping of `timer-triggered-state`, re-authored from the upstream .csx.

Carries the flags written so far and marks that the scheduled transition fired.
"""

from datetime import datetime, UTC

CARRIED = (
    "testPath",
    "initialized",
    "initializedAt",
    "stepLog",
    "transitionMappingExecuted",
    "transitionMappingAt",
    "processEntryExecuted",
    "processedAt",
    "processExitExecuted",
    "exitedAt",
)


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    data = context.instance.data or {}
    result = {name: data[name] for name in CARRIED if name in data}
    result["timerTriggered"] = True
    result["timerTriggeredAt"] = datetime.now(UTC).isoformat()
    return result
