"""onExecute mapping of `gate-timeout`, re-authored from the upstream .csx: counts the timeouts."""


def counter(data, name):
    try:
        return int(get(data, name, 0) or 0)
    except (TypeError, ValueError):
        return 0


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"timeoutFired": counter(context.instance.data, "timeoutFired") + 1}
