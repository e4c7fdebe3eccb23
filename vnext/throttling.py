"""Rate limits of the API and the cap on parked long-polls, counted in Django's `default` cache
(shared by every process when `CACHE_URL` names Redis; each process's own otherwise).

The throttles are DRF throttles on fixed windows: one counter per caller (or workflow) and
window, moved with the cache's atomic `incr` (a request is counted exactly once even when
workers race; DRF's own throttles keep a list of timestamps per caller, read and written back
whole, which races across workers and grows with the rate). A window allows at most its rate;
two windows back to back may let twice that through around their boundary. Rates are `VNEXT`
settings read on every request (`None`: no limit); a refused request is 429 `App:900008` with
`Retry-After`, the seconds until its window ends.

The caller is the user (`user:<pk>`): every token, session and JWT of one user share its
budget, so minting tokens does not multiply it.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

from django.core.cache import cache
from rest_framework.throttling import BaseThrottle

from vnext.conf import vnext_setting
from vnext.rates import parse_rate

# The environ keys a long-poll's first read carries (set by `instances.api.longpoll`, never from
# a request header): this read may park, so it counts against the long-poll rate; and where
# the throttle leaves the caller's name for the parking cap.
LONG_POLL_MARK = "vnext.long_poll"
LONG_POLL_CALLER = "vnext.long_poll_caller"


def caller_ident(request: Any) -> str:
    """The caller a throttle counts: the user, else (never past the API's permission check)
    the client address."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return f"user:{user.pk}"
    return f"address:{request.META.get('REMOTE_ADDR', '')}"


def _count(key: str, timeout: float) -> int:
    """Add one to the counter `key` (created with `timeout` when absent); its new value."""
    cache.add(key, 0, timeout=timeout)
    try:
        return int(cache.incr(key))
    except ValueError:
        # Expired between the add and the incr: this request starts the counter again.
        cache.set(key, 1, timeout=timeout)
        return 1


class WindowRateThrottle(BaseThrottle):
    """A DRF throttle allowing `VNEXT[rate_setting]` requests per window for each ident."""

    scope = ""
    rate_setting = ""

    def __init__(self) -> None:
        self.retry_after: float | None = None

    def ident(self, request: Any, view: Any) -> str | None:
        """What is counted; None: this request is not."""
        return caller_ident(request)

    def allow_request(self, request: Any, view: Any) -> bool:
        """Count the request in its window; False past the rate."""
        rate = vnext_setting(self.rate_setting)
        ident = self.ident(request, view)
        if not rate or ident is None:
            return True
        limit, seconds = parse_rate(str(rate))
        now = time.time()
        window = int(now // seconds)
        if _count(f"vnext:throttle:{self.scope}:{ident}:{window}", seconds + 1) <= limit:
            return True
        self.retry_after = (window + 1) * seconds - now
        return False

    def wait(self) -> float | None:
        """Seconds until the refusing window ends (`Retry-After`, rounded up)."""
        return math.ceil(self.retry_after) if self.retry_after is not None else None


class StartPerCallerThrottle(WindowRateThrottle):
    """Starts by one caller (`VNEXT_RATE_START_PER_CALLER`)."""

    scope = "start-caller"
    rate_setting = "RATE_START_PER_CALLER"


class StartPerWorkflowThrottle(WindowRateThrottle):
    """Starts of one workflow by every caller together (`VNEXT_RATE_START_PER_WORKFLOW`)."""

    scope = "start-workflow"
    rate_setting = "RATE_START_PER_WORKFLOW"

    def ident(self, request: Any, view: Any) -> str | None:
        """The workflow of the URL."""
        kwargs = getattr(view, "kwargs", {}) or {}
        return f"{kwargs.get('domain', '')}/{kwargs.get('workflow', '')}"


class PublishPerCallerThrottle(WindowRateThrottle):
    """Publish requests by one caller (`VNEXT_RATE_PUBLISH_PER_CALLER`)."""

    scope = "publish-caller"
    rate_setting = "RATE_PUBLISH_PER_CALLER"


class LongPollPerCallerThrottle(WindowRateThrottle):
    """Long-polls (`?wait=` more than 0) by one caller (`VNEXT_RATE_LONG_POLL_PER_CALLER`),
    counted at their first read only: the re-reads of a parked request are not requests. It
    also names the caller for the parking cap (`parking_slot_take`)."""

    scope = "long-poll-caller"
    rate_setting = "RATE_LONG_POLL_PER_CALLER"

    def ident(self, request: Any, view: Any) -> str | None:
        """The caller, for a long-poll's first read only."""
        if not request.META.get(LONG_POLL_MARK):
            return None
        ident = caller_ident(request)
        request.META[LONG_POLL_CALLER] = ident
        return ident


class ParkingRefused(Exception):
    """The caller already has `MAX_PARKED_POLLS_PER_CALLER` long-polls parked."""

    def __init__(self, cap: int) -> None:
        super().__init__(f"at most {cap} long-polls may wait at once per caller")
        self.cap = cap


def _parked_key(caller: str) -> str:
    return f"vnext:parked:{caller}"


def parking_slot_take(caller: str) -> str | None:
    """Count one more parked long-poll of `caller`: the key to give `parking_slot_release`
    when it ends, None when nothing is counted (no cap, no caller). Raises `ParkingRefused`
    past the cap (counting nothing)."""
    cap = vnext_setting("MAX_PARKED_POLLS_PER_CALLER")
    if not cap or not caller:
        return None
    key = _parked_key(caller)
    # Outlives the longest wait, so a worker killed mid-wait leaks its counts for that long.
    timeout = float(vnext_setting("LONG_POLL_MAX_SECONDS")) + 60
    parked = _count(key, timeout)
    cache.touch(key, timeout)
    if parked > int(cap):
        parking_slot_release(key)
        raise ParkingRefused(int(cap))
    return key


def parking_slot_release(key: str) -> None:
    """One parked long-poll of the counter `key` ended."""
    with contextlib.suppress(ValueError):  # expired meanwhile: nothing left to release
        cache.decr(key)
