"""Lock maintenance: sweep expired rows, operator force-release."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from instances.orm_store import OrmStore
from locks.models import ResourceLock

logger = logging.getLogger("vnext.locks")


def locks_sweep_expired() -> int:
    """Delete every lock whose TTL has passed. Returns how many rows went."""
    swept = ResourceLock.objects.filter(expires_at__lte=timezone.now()).delete()[0]
    if swept:
        logger.info("swept %s expired resource lock(s)", swept)
    return swept


def lock_force_release(*, lock: ResourceLock, operator: str) -> None:
    """An operator releases `lock`; the owner's history records who did it and when, and the key
    leaves the owner's `resource.locks`."""
    with transaction.atomic():
        deleted = ResourceLock.objects.filter(pk=lock.pk, owner=lock.owner).delete()[0]
        if deleted:

            def without_key(extra: dict[str, Any]) -> dict[str, Any]:
                held = [key for key in extra.get("resource.locks", []) if key != lock.key]
                return {**extra, "resource.locks": held}

            OrmStore().record_operator_action(
                lock.owner,
                action="operator:force-release-lock",
                body={"lockKey": lock.key},
                actor=operator,
                change_extra=without_key,
            )
    logger.info("operator %s force-released lock %s of %s", operator, lock.key, lock.owner)
