"""onExecute mapping of `auto-advance`, re-authored from the upstream .csx.

Counts the auto advances. The upstream script first waits ~2.5 s on purpose, to widen the window
in which a client could observe a wrongly armed timer; the sandbox has no sleep, so the wait is
dropped (the ordering it probes - Auto before Schedule - does not depend on it).
"""


def counter(data, name):
    try:
        return int(get(data, name, 0) or 0)
    except (TypeError, ValueError):
        return 0


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"autoAdvances": counter(context.instance.data, "autoAdvances") + 1}
