"""Rule of `auto-pass-transition`, re-authored from the upstream .csx: `testPath` is "pass"."""


def handler(context):
    return get(context.instance.data, "testPath") == "pass"
