"""Transition mapping of `move-to-processing`, re-authored from the upstream .csx: marks that it
ran. Its result is merged into the data instead of the request body.

The runtime deep-merges what it returns into the instance data, so the flags written
earlier stay without being copied (the C# original copied them forward).
"""

from datetime import datetime, UTC


def handler(context):
    return {"transitionMappingExecuted": True, "transitionMappingAt": datetime.now(UTC).isoformat()}
