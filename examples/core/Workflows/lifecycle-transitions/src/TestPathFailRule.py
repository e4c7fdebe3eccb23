"""Rule of `auto-fail-transition`, re-authored from the upstream .csx: `testPath` is "fail"."""


def handler(context):
    return get(context.instance.data, "testPath") == "fail"
