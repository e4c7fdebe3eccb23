"""Lock maintenance: release what an instance holds, sweep expired rows (an operator's force
release is an operator action: `instances.operations.lock_force_release`)."""

from __future__ import annotations

import logging

from django.utils import timezone

from locks.models import ResourceLock

logger = logging.getLogger("vnext.locks")


def locks_sweep_expired() -> int:
    """Delete every lock whose TTL has passed. Returns how many rows went."""
    swept = ResourceLock.objects.filter(expires_at__lte=timezone.now()).delete()[0]
    if swept:
        logger.info("swept %s expired resource lock(s)", swept)
    return swept
