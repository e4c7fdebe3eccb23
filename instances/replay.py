"""Operators' replay of a finished job: back in the queue only when running it again can change
something, never reported as replayed when it would not. The requeue is guarded by the status
the operator saw (`queue.job_requeue`): a job that changed meanwhile is refused."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.utils import timezone

from instances.events import event_job_admitted
from instances.orm_store import OrmStore
from instances.queue import job_requeue
from instances.status import InstanceStatus, JobKind, JobStatus

if TYPE_CHECKING:
    from instances.job_table import Job

logger = logging.getLogger("vnext.jobs")
_store = OrmStore()


@dataclass(frozen=True)
class ReplayResult:
    """What replaying one job did: `replayed` (back in the queue), `refused` (why not), or
    `no effect` (it would run and change nothing, so it was left as it is)."""

    job_id: int
    outcome: str
    reason: str = ""

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.outcome}" + (f" ({self.reason})" if self.reason else "")


REPLAYED, REFUSED, NO_EFFECT = "replayed", "refused", "no effect"


def job_replay(*, job: Job, force: bool = False, operator: str = "") -> ReplayResult:
    """Put a finished job back in the queue when running it again can change something; a
    succeeded timer only with `force`. Never reports a replay that would change nothing."""
    refusal = _replay_refusal(job, force)
    if refusal:
        return ReplayResult(job.pk, REFUSED, refusal)
    pointless = _replay_without_effect(job)
    if pointless:
        return ReplayResult(job.pk, NO_EFFECT, pointless)
    now = timezone.now()
    note = f"replayed by {operator or 'an operator'} at {now:%Y-%m-%d %H:%M:%S}"
    if not job_requeue(job_id=job.pk, expected=job.status, run_at=now, note=note):
        return ReplayResult(job.pk, REFUSED, "it changed meanwhile; look again")
    logger.info("job %s replayed by %s", job.pk, operator or "an operator")
    return ReplayResult(job.pk, REPLAYED)


def _replay_refusal(job: Job, force: bool) -> str:
    if job.status == JobStatus.PENDING:
        return "it is already waiting to run"
    if job.status == JobStatus.RUNNING and job.lease_until and job.lease_until > timezone.now():
        return f"it is running (lease until {job.lease_until:%H:%M:%S})"
    if job.status == JobStatus.INSTANCE_FAULTED:
        return (
            f"its run faulted instance {job.instance_id} ({job.last_error[:200]}); "
            "retry or cancel the instance instead"
        )
    if job.status == JobStatus.SUCCEEDED and not force and job.kind != JobKind.TRANSITION:
        return "it already succeeded; replay it with force to run it again"
    return ""


def _replay_without_effect(job: Job) -> str:
    if job.status == JobStatus.SUCCEEDED and job.kind == JobKind.TRANSITION:
        return "its transition was applied; replaying it would change nothing"
    if job.kind == JobKind.EVENT_TRANSITION and event_job_admitted(job):
        return "its event was admitted as a transition already; replaying it would change nothing"
    instance = _store.load(job.instance_id) if job.instance_id else None
    if instance is None:
        return "its instance no longer exists"
    if instance.status == InstanceStatus.COMPLETED:
        return f"instance {instance.id} is completed"
    if job.kind == JobKind.TIMER and instance.current_state != job.state:
        return f"instance {instance.id} has left state {job.state!r}"
    if job.kind == JobKind.TIMER and instance.status == InstanceStatus.FAULTED:
        return f"instance {instance.id} is faulted; retry or cancel the instance"
    reservation = _reservation_of(job) if job.kind == JobKind.TRANSITION else None
    if reservation is not None:
        owner = instance.busy_owner
        held = instance.status == InstanceStatus.BUSY and (
            owner == reservation or owner.startswith(f"job:{job.pk}:")
        )
        if not held:
            return (
                f"instance {instance.id} is no longer reserved for it (status "
                f"{instance.status}); send the transition again"
            )
    return ""


def _reservation_of(job: Job) -> str | None:
    """The Busy reservation a transition job takes its instance over from; None for a
    lock-free one (it holds nothing)."""
    # Read as stored, not through the payload records: an operator may replay any finished
    # row, also one whose payload no record reads (made by hand, or by an older release).
    payload = job.payload or {}
    if payload.get("lockFree"):
        return None
    return str(payload.get("reservation") or "")
