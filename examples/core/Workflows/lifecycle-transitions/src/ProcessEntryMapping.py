"""onEntry mapping of `processing-state`: marks that the state was entered
Re-authored from the upstream .csx.

The runtime deep-merges what it returns into the instance data, so the flags written
earlier stay without being copied (the C# original copied them forward).
"""

from datetime import datetime, UTC


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"processEntryExecuted": True, "processedAt": datetime.now(UTC).isoformat()}
