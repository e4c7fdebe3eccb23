"""Lock maintenance: release what an instance holds, sweep expired rows, operator force-release."""

from __future__ import annotations

import logging
import uuid

from django.db import transaction
from django.utils import timezone

from instances.models import Instance, InstanceTransition
from instances.status import TransitionStatus
from locks.models import ResourceLock

logger = logging.getLogger("vnext.locks")


def locks_release_all(*, owner: uuid.UUID) -> int:
    """Release every lock `owner` holds; idempotent. Returns how many rows went."""
    return ResourceLock.objects.filter(owner=owner).delete()[0]


def locks_sweep_expired() -> int:
    """Delete every lock whose TTL has passed. Returns how many rows went."""
    swept = ResourceLock.objects.filter(expires_at__lte=timezone.now()).delete()[0]
    if swept:
        logger.info("swept %s expired resource lock(s)", swept)
    return swept


def lock_force_release(*, lock: ResourceLock, operator: str) -> None:
    """An operator releases `lock`; the owner's history records who did it and when."""
    with transaction.atomic():
        deleted = ResourceLock.objects.filter(pk=lock.pk, owner=lock.owner).delete()[0]
        instance = Instance.objects.filter(pk=lock.owner).first()
        if deleted and instance is not None:
            now = timezone.now()
            InstanceTransition.objects.create(
                instance=instance,
                transition_key="operator:force-release-lock",
                from_state=instance.current_state,
                to_state=instance.current_state,
                trigger_type=0,
                body={"lockKey": lock.key},
                actor=operator,
                status=TransitionStatus.COMPLETED,
                effective_state=instance.effective_state,
                started_at=now,
                finished_at=now,
            )
            extra = dict(instance.extra)
            extra["resource.locks"] = [k for k in extra.get("resource.locks", []) if k != lock.key]
            Instance.objects.filter(pk=instance.pk).update(extra=extra)
    logger.info("operator %s force-released lock %s of %s", operator, lock.key, lock.owner)
