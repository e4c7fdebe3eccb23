"""The stranded-Busy reaper: fault an instance left Busy past its lease by an owner that is gone
(no live job holds it, no SubFlow child it waits for is alive), with an incident, so nothing
stays Busy for ever. The fault is guarded by the owner it saw: a job taking the instance over
meanwhile wins."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

from django.utils import timezone

from instances.engine.errors import Codes
from instances.engine.records import SUBFLOW_OWNER_PREFIX, IncidentRow
from instances.orm_store import OrmStore, correlation_active_exists
from instances.queue import job_owning_exists, job_subflow_resume_exists
from vnext.conf import vnext_setting

logger = logging.getLogger("vnext.jobs")
_store = OrmStore()


def instances_reap_stranded_busy() -> int:
    """Fault every instance Busy past its lease whose owner is gone (no live job holds it).

    A reservation owned by a live (pending or running) job is left to the job (an expired lease
    is re-claimed); anything else Busy for longer than `BUSY_LEASE_SECONDS`, including a
    reservation of a job failed on its last expired lease, is faulted with an incident, never
    left Busy."""
    cutoff = timezone.now() - timedelta(seconds=float(vnext_setting("BUSY_LEASE_SECONDS")))
    reaped = 0
    for instance_id, owner in _store.busy_since_before(cutoff):
        if job_owning_exists(instance_id=instance_id, owner=owner) or _waits_for_live_child(
            instance_id, owner
        ):
            continue
        message = (
            f"Busy since before {cutoff:%Y-%m-%d %H:%M:%S} UTC with no live owner "
            f"({owner or 'unknown'}); faulted by the reaper, retry or cancel it"
        )
        incident = IncidentRow(
            transition_id=None,
            state="",
            transition_key="",
            error_code=Codes.STRANDED_BUSY.code,
            message=message,
        )
        if not _store.fault_owned(instance_id, owner, incident):
            continue
        reaped += 1
        logger.warning("reaped stranded Busy instance %s (owner %s)", instance_id, owner)
    return reaped


def _waits_for_live_child(instance_id: uuid.UUID, owner: str) -> bool:
    # A parent waits Busy for its SubFlow child's whole life, however long: it is stranded only
    # when its correlation closed and no resume job is left to take it over.
    if not owner.startswith(SUBFLOW_OWNER_PREFIX):
        return False
    child = owner.removeprefix(SUBFLOW_OWNER_PREFIX)
    try:
        child_id = uuid.UUID(child)
    except ValueError:
        return False
    return correlation_active_exists(
        parent_id=instance_id, child_id=child_id
    ) or job_subflow_resume_exists(instance_id=instance_id, child=child)
