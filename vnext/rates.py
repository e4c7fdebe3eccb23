"""Rates as settings write them, DRF's way: `<requests>/<period>`, the period `s`, `m`, `h` or
`d` (or a word starting with one: `100/second`, `6000/min`). Plain Python: settings parse
them at start-up, the throttles on every request."""

from __future__ import annotations

_PERIOD_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """`"100/s"` -> (100, 1): how many requests, per how many seconds. ValueError otherwise."""
    count, _, period = rate.partition("/")
    seconds = _PERIOD_SECONDS.get(period.strip()[:1].lower())
    if not count.strip().isdigit() or int(count) < 1 or seconds is None:
        raise ValueError(f"{rate!r} is not a rate like 100/s, 6000/min, 50/h or 1000/day")
    return int(count), seconds
