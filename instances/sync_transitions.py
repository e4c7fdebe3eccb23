"""A sync transition, and a sync answer waiting for its instance to settle. An updateData goes
through its instance's write lane (seed 000's per-instance write funnel, `lane_lock.lane_held`):
it applies the async tickets accepted before it, then itself, inside the lane, and the automatic
chain it makes possible runs after the lane is free; any other transition runs at once."""

from __future__ import annotations

import time
import uuid
from typing import Any

from django.utils import timezone

from instances.engine.errors import VNextError
from instances.engine.outcomes import PipelineFault
from instances.engine.records import InstanceSnapshot
from instances.job_handlers import job_execute, job_run
from instances.lane_lock import LaneTimeout, lane_held
from instances.orm_store import OrmStore
from instances.queue import (
    job_boundary_retry_get,
    job_running_exists,
    jobs_pending_list,
    lane_dispatch_next,
    lane_take,
)
from instances.services import (
    InstanceOutcome,
    RequestInfo,
    instance_snapshot,
    instance_transition,
    instance_transition_accept,
    is_update_data,
)
from instances.status import InstanceStatus, JobKind
from vnext.conf import vnext_setting

_store = OrmStore()


def _lane_drain(waiting: list[int]) -> int:
    """Inside an instance's write lane: apply the tickets `waiting` in it, oldest first (they
    were accepted before the caller's own update). Returns how many were applied here."""
    applied = 0
    for job_id in waiting:
        job = lane_take(job_id)
        if job is not None:
            job_execute(job)
            applied += 1
    return applied


def instance_transition_run(
    *,
    domain: str,
    workflow: str,
    ref: str,
    transition_key: str,
    body: Any,
    info: RequestInfo,
    addressed: InstanceSnapshot | None = None,
) -> InstanceOutcome:
    """A sync transition. An updateData is applied inside its instance's write lane (seed 000's
    per-instance write funnel): it waits its turn — at most `DATA_WRITE_WAIT_SECONDS`, then it
    is accepted as an async ticket instead (`queued`: the API answers 202) — applies the
    tickets accepted before it, then itself, and answers its own result; the automatic chain
    it makes possible runs after the lane. Any other transition runs at once."""
    if addressed is None:
        addressed = instance_snapshot(domain=domain, workflow=workflow, ref=ref)
    if not is_update_data(addressed, transition_key):
        return instance_transition(
            domain=domain,
            workflow=workflow,
            ref=ref,
            transition_key=transition_key,
            body=body,
            info=info,
            addressed=addressed,
        )
    failure: PipelineFault | VNextError | None = None
    drained = 0
    try:
        with lane_held(addressed.id, wait=float(vnext_setting("DATA_WRITE_WAIT_SECONDS"))):
            # The instance as the writes before this one left it, read once the lane is held.
            current, waiting = _store.lane_view(addressed.id)
            drained = _lane_drain(waiting)
            if drained or current is None:
                current = instance_snapshot(domain=domain, workflow=workflow, ref=ref)
            addressed = current
            try:
                outcome = instance_transition(
                    domain=domain,
                    workflow=workflow,
                    ref=ref,
                    transition_key=transition_key,
                    body=body,
                    info=info,
                    addressed=addressed,
                    defer_chain=True,
                )
            except (PipelineFault, VNextError) as refused:
                # A fault is committed with its incident; a refusal wrote nothing.
                failure = refused
    except LaneTimeout:
        accepted = instance_transition_accept(
            domain=domain,
            workflow=workflow,
            ref=ref,
            transition_key=transition_key,
            body=body,
            info=info,
            addressed=addressed,
        )
        return InstanceOutcome(accepted.instance, created=False, queued=True)
    if drained:
        # Tickets accepted while those ran found them ahead and were refused: hand them over.
        lane_dispatch_next(addressed.id)
    if failure is not None:
        raise failure
    return _after_update(outcome)


def _after_update(outcome: InstanceOutcome) -> InstanceOutcome:
    # The automatic chain an update made possible runs now that the lane is free, here, so a
    # sync answer shows where it led (its job stays for a worker should this be refused).
    execution = outcome.execution
    if execution is None or execution.deferred_automatic is None:
        return outcome
    instance_id = execution.instance.id
    for job_id in jobs_pending_list(instance_id=instance_id, kind=JobKind.AUTOMATIC):
        job_run(job_id)
    current = _store.load(instance_id) or execution.instance
    return InstanceOutcome(current, created=False, execution=execution)


def instance_settle(instance_id: uuid.UUID, *, within: float) -> InstanceSnapshot | None:
    """Wait, at most `within` seconds, for an instance whose run stopped on an error-boundary
    retry to reach a rest point, running its due retry jobs here when no worker has taken them
    (a sync request answers with the outcome, as the retries ran inline). Each retry stays a
    durable job: this only claims it like any worker would. Returns the instance as it is."""
    deadline = time.monotonic() + within
    while True:
        instance = _store.load(instance_id)
        if instance is None or instance.status != InstanceStatus.BUSY:
            return instance
        pending = job_boundary_retry_get(instance_id=instance_id)
        if pending is None and not job_running_exists(instance_id=instance_id):
            return instance  # Busy for another reason: nothing of ours to wait for
        wait = 0.02
        if pending is not None:
            wait = max((pending.run_at - timezone.now()).total_seconds(), 0.0)
        if time.monotonic() + wait > deadline:
            return instance
        if wait:
            time.sleep(wait)
        if pending is not None and job_run(pending.pk) == "skipped":
            # Another worker claimed it, or it is not claimable yet: poll, do not spin.
            time.sleep(0.02)
