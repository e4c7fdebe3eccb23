"""Timer of `leaf-expire`, re-authored from the upstream .csx: 30 minutes after it is armed (never
reached in the tests; its `executeAtUtc` shows whether it was re-armed)."""

from datetime import timedelta


def handler(context):
    return timedelta(minutes=30)
