"""Timer of `scheduled-timer-transition`, re-authored from the upstream .csx.

An absolute time: ten seconds from when the timer is armed.
"""

from datetime import datetime, timedelta, UTC


def handler(context):
    return datetime.now(UTC) + timedelta(seconds=10)
