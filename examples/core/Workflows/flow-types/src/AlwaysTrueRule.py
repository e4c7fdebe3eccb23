"""Rule of the automatic transitions, re-authored from the upstream .csx: always true."""


def handler(context):
    return True
