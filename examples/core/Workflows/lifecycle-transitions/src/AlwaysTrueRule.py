"""Rule of `default-auto-transition`, `auto-to-pre-complete` and `fallback-to-complete`,
re-authored from the upstream .csx: always true."""


def handler(context):
    return True
