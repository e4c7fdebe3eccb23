"""Transition mapping of `move-to-processing`, re-authored from the upstream .csx.

Its result replaces the request body as the data written by the transition: the flags set at
start are carried over, and the mapping marks that it ran.
"""

from datetime import datetime, UTC

CARRIED = ("testPath", "initialized", "initializedAt", "stepLog")


def handler(context):
    data = context.instance.data or {}
    result = {name: data[name] for name in CARRIED if name in data}
    result["transitionMappingExecuted"] = True
    result["transitionMappingAt"] = datetime.now(UTC).isoformat()
    return result
