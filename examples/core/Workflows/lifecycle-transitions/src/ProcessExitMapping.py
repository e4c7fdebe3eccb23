"""onExit mapping of `processing-state`, re-authored from the upstream .csx.

Carries the flags written so far and marks that the state was left.
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
)


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    data = context.instance.data or {}
    result = {name: data[name] for name in CARRIED if name in data}
    result["processExitExecuted"] = True
    result["exitedAt"] = datetime.now(UTC).isoformat()
    return result
