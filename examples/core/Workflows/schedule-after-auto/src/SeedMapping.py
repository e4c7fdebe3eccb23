"""Start mapping of schedule-after-auto, re-authored from the upstream .csx.

Normalises `mode` (absent or empty means "park"), zeroes both counters and copies `testId` when
the caller sent one.
"""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    data = context.instance.data or {}
    mode = str(data.get("mode") or "").strip().lower() or "park"
    result = {"mode": mode, "autoAdvances": 0, "timeoutFired": 0}
    if data.get("testId") is not None:
        result["testId"] = data.get("testId")
    return result
