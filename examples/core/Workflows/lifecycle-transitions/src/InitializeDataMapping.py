"""Start mapping of lifecycle-transitions-test-workflow, re-authored from the upstream .csx.

Seeds the data: `testPath` from the start data (default "pass"), the `initialized` flag with its
time, and a `stepLog` that starts with the initial state's entry.
"""

from datetime import datetime, UTC


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    data = context.instance.data or {}
    return {
        "testPath": data.get("testPath") or "pass",
        "initialized": True,
        "initializedAt": datetime.now(UTC).isoformat(),
        "stepLog": ["initialize-state:onEntry"],
    }
