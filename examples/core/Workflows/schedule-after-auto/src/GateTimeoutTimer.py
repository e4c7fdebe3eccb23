"""Timer of `gate-timeout` (type "L", a script-computed duration), re-authored from the upstream
.csx: fires eight seconds after it is armed."""

from datetime import timedelta


def handler(context):
    return timedelta(seconds=8)
