"""onEntry mapping of `processing-state`, re-authored from the upstream .csx.

Carries the flags written so far and marks that the state was entered.
"""

from datetime import datetime, UTC

CARRIED = (
    "testPath",
    "initialized",
    "initializedAt",
    "stepLog",
    "transitionMappingExecuted",
    "transitionMappingAt",
)


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    data = context.instance.data or {}
    result = {name: data[name] for name in CARRIED if name in data}
    result["processEntryExecuted"] = True
    result["processedAt"] = datetime.now(UTC).isoformat()
    return result
