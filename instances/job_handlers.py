"""Running jobs: claim one, run the handler of its kind (the engine, for transitions and timers),
record the outcome; the stranded-Busy reaper; operators' replay.

A handler ends a job one of four ways: it returns (`succeeded`), raises `JobSkipped` (nothing to
do, with the reason), `InstanceFaulted` (its run faulted the instance) or `RetryLater` (the
instance is Busy: back off within the attempt limit); anything else is a failure, retried with
backoff up to `VNEXT_JOB_MAX_ATTEMPTS`.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from instances.engine.definition import TransitionDef, TransitionKind
from instances.engine.errors import Codes, VNextError
from instances.engine.execution import TransitionRequest
from instances.engine.outcomes import (
    ForwardToSubflow,
    PipelineFault,
    PipelineSuperseded,
    Rejected,
)
from instances.engine.ports import CallOptions, InstanceAnswer, SubprocessParent
from instances.engine.profiles import Order
from instances.engine.records import (
    LONG_POLL_OWNER_PREFIX,
    SUBFLOW_OWNER_PREFIX,
    IncidentRow,
    InstanceSnapshot,
    subflow_owner,
)
from instances.engine.script_runner import response_data, script_context
from instances.engine.scripts import ScriptResponse
from instances.engine.task_types.notification import STATE_CHANNEL
from instances.engine.telemetry import (
    JOB_SECONDS,
    JOBS,
    REQUEST_ID_KEY,
    TIMER_LATENESS,
    bound,
    span,
)
from instances.events import REFUSED as EVENT_REFUSED
from instances.events import WAITING as EVENT_WAITING
from instances.events import event_job_admitted, event_transition_admit
from instances.field_encryption import open_request
from instances.models import Correlation, InstanceTransition, Job
from instances.notifications import Notification
from instances.notifications import channel as notification_channel
from instances.orm_store import FaultToRetry, OrmStore, stored_data
from instances.queue import (
    LaneTimeout,
    backoff,
    job_claim,
    job_complete,
    job_row_seed,
    jobs_dispatch,
    jobs_due,
    jobs_fail_expired_leases,
    lane_dispatch_next,
    lane_held,
    lane_take,
    max_attempts,
)
from instances.selectors import state_function, with_state_etag
from instances.services import (
    InstanceOutcome,
    RequestInfo,
    boundary_retry_request,
    instance_snapshot,
    instance_start,
    instance_start_accept,
    instance_subprocess_start,
    instance_transition,
    instance_transition_accept,
    is_update_data,
    long_poll_continue_request,
    retry_request,
)
from instances.status import (
    CorrelationStatus,
    InstanceStatus,
    JobKind,
    JobStatus,
    TransitionStatus,
    Trigger,
)
from instances.wiring import engine
from vnext.conf import vnext_setting

logger = logging.getLogger("vnext.jobs")
_store = OrmStore()


class RetryLater(Exception):
    """The job cannot run yet (the instance is Busy): try again after at least `delay` seconds,
    backing off like a failure and within the same attempt limit, unless `free`: the instance is
    held by another live job, which settles it (or its lease expires and the sweep re-runs it),
    so waiting for it is not a failure and gives the attempt back."""

    def __init__(self, reason: str, delay: float = 1.0, *, free: bool = False) -> None:
        super().__init__(reason)
        self.delay = delay
        self.free = free


class JobSkipped(Exception):
    """The job has nothing to do (its instance is faulted, finished or gone, or left the timer's
    state): it ends `skipped` with this reason, never retried."""


class InstanceFaulted(Exception):
    """The job ran and its run faulted the instance: it ends `instance_faulted` with the code.
    The instance is what an operator retries, not the job."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


# --- running a job -------------------------------------------------------------------------------


def job_run(job_id: int) -> str:
    """Claim and run one job; returns what happened (`skipped`, `succeeded`, `retry`, `failed`).

    Safe to call for the same job any number of times, from any process: one claim wins."""
    job = job_claim(job_id)
    if job is None:
        return "skipped"
    return job_execute(job)


def job_execute(job: Job, *, record_success: bool = True) -> str:
    """Run a job this process has claimed, then record the outcome (fenced by its token).

    `record_success=False` leaves a success for the caller to record in a batch
    (`jobs_complete_succeeded`); retries and failures are always recorded here. Every log line
    of the run carries the job's id and instance (and the request that accepted it); the
    attempt is counted by outcome (`vnext_jobs`) and timed."""
    started = time.perf_counter()
    _in_job.depth = getattr(_in_job, "depth", 0) + 1
    if job.kind in TIMED_KINDS and job.attempts <= 1:
        late = (timezone.now() - job.run_at).total_seconds()
        TIMER_LATENESS.labels(job.kind).observe(max(late, 0.0))
    outcome = "failed"
    try:
        with (
            bound(
                job_id=job.pk,
                job_kind=job.kind,
                instance_id=str(job.instance_id) if job.instance_id else None,
                request_id=(job.payload or {}).get(REQUEST_ID_KEY),
            ),
            span(f"job {job.kind}", job_id=job.pk, kind=job.kind, attempt=job.attempts),
        ):
            outcome = _job_execute(job, record_success=record_success)
        return outcome
    finally:
        _in_job.depth -= 1
        JOBS.labels(job.kind, outcome.replace("-", "_")).inc()
        JOB_SECONDS.labels(job.kind).observe(time.perf_counter() - started)


# How many jobs this thread is running, one inside another (a job runs its hand-offs).
_in_job = threading.local()


# Jobs due at a moment (their lateness is measured on their first attempt).
TIMED_KINDS = frozenset({JobKind.TIMER, JobKind.TIMEOUT})


def _job_execute(job: Job, *, record_success: bool) -> str:
    if job.kind != JobKind.UPDATE_DATA or job.instance_id is None:
        return _job_outcome(job, record_success=record_success)
    # A write-lane ticket applies its update, and records how it ended, inside the lane: one
    # transaction with the update, so the update and the ticket's end commit together.
    try:
        with lane_held(job.instance_id, wait=float(vnext_setting("JOB_LEASE_SECONDS")) / 2):
            outcome = _job_outcome(job, record_success=True)
    except LaneTimeout as taken:
        retry_at = timezone.now() + timedelta(seconds=1)
        job_complete(
            job, JobStatus.PENDING, error=str(taken), retry_at=retry_at, give_back_attempt=True
        )
        return "retry"
    lane_dispatch_next(job.instance_id)
    return outcome


def _job_outcome(job: Job, *, record_success: bool) -> str:
    handler = HANDLERS.get(job.kind)
    try:
        if handler is None:
            raise VNextError(Codes.APP_INTERNAL, f"no handler for job kind {job.kind!r}")
        handler(job)
    except JobSkipped as skipped:
        logger.info("job %s (%s) skipped: %s", job.pk, job.kind, skipped)
        job_complete(job, JobStatus.SKIPPED, error=str(skipped))
        return "skipped"
    except InstanceFaulted as faulted:
        job_complete(job, JobStatus.INSTANCE_FAULTED, error=str(faulted))
        return "instance_faulted"
    except RetryLater as wait:
        if wait.free:
            retry_at = timezone.now() + timedelta(seconds=wait.delay)
            job_complete(
                job, JobStatus.PENDING, error=str(wait), retry_at=retry_at, give_back_attempt=True
            )
            return "retry"
        if job.attempts >= max_attempts():
            error = f"gave up after {job.attempts} attempts: {wait}"
            logger.warning("job %s (%s) %s", job.pk, job.kind, error)
            job_complete(job, JobStatus.FAILED, error=error)
            return "failed"
        delay = max(timedelta(seconds=wait.delay), backoff(job.attempts))
        job_complete(job, JobStatus.PENDING, error=str(wait), retry_at=timezone.now() + delay)
        return "retry"
    except Exception as exc:  # any failure: retried with backoff, then left for an operator
        logger.warning("job %s (%s) attempt %s failed: %s", job.pk, job.kind, job.attempts, exc)
        if job.attempts >= max_attempts():
            job_complete(job, JobStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
            return "failed"
        retry_at = timezone.now() + backoff(job.attempts)
        job_complete(
            job, JobStatus.PENDING, error=f"{type(exc).__name__}: {exc}", retry_at=retry_at
        )
        return "retry"
    if not record_success and job.kind != JobKind.UPDATE_DATA:
        return "succeeded"
    return "succeeded" if job_complete(job, JobStatus.SUCCEEDED) else "lost-lease"


def jobs_run_due(limit: int = 100) -> dict[str, int]:
    """Run due jobs here and now, one after the other (tests, `jobs_run` command); jobs whose
    lease expired on their last attempt are failed first (counted as `failed`)."""
    counts: dict[str, int] = {}
    if expired := jobs_fail_expired_leases():
        counts["failed"] = expired
    ran: set[int] = set()
    while len(ran) < limit:
        # A write-lane ticket becomes due only when the one before it ends: look again.
        due = [job_id for job_id in jobs_due(limit) if job_id not in ran]
        if not due:
            break
        for job_id in due[: limit - len(ran)]:
            ran.add(job_id)
            outcome = job_run(job_id)
            counts[outcome] = counts.get(outcome, 0) + 1
    return counts


# --- the stranded-Busy reaper --------------------------------------------------------------------


def instances_reap_stranded_busy() -> int:
    """Fault every instance Busy past its lease whose owner is gone (no live job holds it).

    A reservation owned by a live (pending or running) job is left to the job (an expired lease
    is re-claimed); anything else Busy for longer than `BUSY_LEASE_SECONDS`, including a
    reservation of a job failed on its last expired lease, is faulted with an incident, never
    left Busy."""
    cutoff = timezone.now() - timedelta(seconds=float(vnext_setting("BUSY_LEASE_SECONDS")))
    reaped = 0
    for instance_id, owner in _store.busy_since_before(cutoff):
        live_job = Job.objects.filter(
            instance_id=instance_id, status__in=[JobStatus.PENDING, JobStatus.RUNNING]
        ).filter(Q(payload__reservation=owner) | Q(lease_owner=owner))
        if live_job.exists() or _waits_for_live_child(instance_id, owner):
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
    open_correlation = Correlation.objects.filter(
        parent_id=instance_id, child_id=child_id, status=CorrelationStatus.ACTIVE
    )
    resume = Job.objects.filter(
        instance_id=instance_id,
        kind=JobKind.SUBFLOW_RESUME,
        status__in=[JobStatus.PENDING, JobStatus.RUNNING],
        payload__child=child,
    )
    return open_correlation.exists() or resume.exists()


# --- handlers ------------------------------------------------------------------------------------


@dataclass
class _Loaded:
    instance: Any
    definition: Any


def _load(job: Job) -> _Loaded:
    if job.instance_id is None:
        raise JobSkipped("the job names no instance")
    instance = _store.load(job.instance_id)
    if instance is None:
        raise JobSkipped(f"instance {job.instance_id} no longer exists")
    definition = engine().components.workflow(
        instance.domain, instance.workflow_key, instance.workflow_version
    )
    if definition is None:
        raise JobSkipped(
            f"workflow {instance.workflow_key} {instance.workflow_version} is not published"
        )
    return _Loaded(instance, definition)


# The due-jobs sweep's period (django-celery-beat, migration instances.0003): a job whose worker
# died is re-dispatched within this much of its lease's end.
SWEEP_SECONDS = 5.0


def _held_by_live_job(job: Job) -> datetime | None:
    """When another job of `job`'s instance that still holds it should have settled (a pending
    one: when it is due; a running one: its lease's end), or None when no live job holds it (a
    sync request, a waiting parent: the wait then counts against the attempts)."""
    if job.instance_id is None:
        return None
    now = timezone.now()
    live = (
        Job.objects.filter(instance_id=job.instance_id, kind=JobKind.TRANSITION)
        .exclude(pk=job.pk)
        .filter(Q(status=JobStatus.PENDING) | Q(status=JobStatus.RUNNING, lease_until__gt=now))
        .values_list("status", "run_at", "lease_until")
    )
    ends: list[datetime] = []
    for status, run_at, lease in live:
        if status == JobStatus.RUNNING and lease is not None:
            ends.append(lease)
        else:
            ends.append(max(run_at, now))
    return max(ends) if ends else None


def _take_reservation(job: Job) -> bool:
    """Move the instance's Busy ownership from the accept's reservation (or an earlier claim of
    this job) to this claim's token."""
    if job.instance_id is None:
        return False
    reservation = str(job.payload.get("reservation") or "")
    return _store.take_reservation(job.instance_id, reservation, job.pk, job.lease_owner)


def _applied_by_earlier_claim(job: Job) -> bool:
    """This job's transition ran to completion under an earlier claim (its first history row,
    keyed by the job, is completed)."""
    seed = job_row_seed(job.pk)
    return InstanceTransition.objects.filter(
        id=uuid.uuid5(seed, "0"), status=TransitionStatus.COMPLETED
    ).exists()


def _handle_transition(job: Job) -> None:
    """An accepted async start/transition: run the pipeline and its whole automatic chain."""
    loaded = _load(job)
    instance, definition = loaded.instance, loaded.definition
    # A workflow that encrypts fields at rest keeps the request sealed in the job row.
    payload = open_request(job.payload, instance_id=job.instance_id)
    lock_free = bool(payload.get("lockFree"))
    # A waiting parent's own transition takes the correlation's Busy over when it runs.
    waiting_parent = bool(payload.get("waitingParent"))
    if not lock_free and not waiting_parent and not _take_reservation(job):
        if _applied_by_earlier_claim(job):
            # A worker died between the run's last commit and recording the job: it is done.
            return
        raise JobSkipped(
            f"instance {job.instance_id} is no longer reserved for this job "
            f"(status {instance.status})"
        )
    if isinstance(payload.get("retry"), dict):
        _run_retry(job, loaded)
        return
    if isinstance(payload.get("boundaryRetry"), dict):
        _run_boundary_retry(job, loaded)
        return
    key = payload["transition"]
    is_start = bool(payload.get("start"))
    transition: TransitionDef | None
    if is_start:
        transition = definition.start
    else:
        transition = definition.transition_for(payload.get("fromState") or "", key)
    if transition is None:
        raise VNextError(
            Codes.TRANSITION_NOT_FOUND, f"transition {key!r} vanished from the definition"
        )
    row_seed = job_row_seed(job.pk)
    request = TransitionRequest(
        transition=transition,
        trigger=Trigger.EVENT if payload.get("trigger") == Trigger.EVENT else Trigger.MANUAL,
        attributes=payload.get("attributes"),
        body=payload.get("body"),
        headers=payload.get("headers") or {},
        query=payload.get("query") or {},
        actor=payload.get("actor") or "",
        stage=payload.get("stage") or "",
        row_seed=row_seed,
        attempt=job.attempts,
    )
    _resume_if_partially_committed(request, instance, row_seed)
    if waiting_parent:
        if _applied_by_earlier_claim(job):
            return
        _execute(job, loaded, request, reserved=False, busy_waits=True)
        return
    _execute(job, loaded, request, reserved=not lock_free)


def _execute(
    job: Job,
    loaded: _Loaded,
    request: TransitionRequest,
    *,
    reserved: bool,
    busy_waits: bool = False,
    defer_chain: bool = False,
) -> None:
    """Run `request` for `job` as its claim's owner, under the reservation it took when
    `reserved`: a run that faults the instance ends the job `instance_faulted`, one refused ends
    it `skipped` (or, with `busy_waits`, retries later when the instance is Busy). The hand-off
    jobs the run queued (subflow starts, resumes, ends) run next, here."""
    try:
        execution = engine().execute(
            loaded.definition,
            loaded.instance,
            request,
            owner=job.lease_owner,
            reserved=reserved,
            defer_chain=defer_chain,
        )
    except PipelineFault as fault:
        raise InstanceFaulted(fault.code, fault.message) from fault
    except PipelineSuperseded as superseded:
        raise JobSkipped(superseded.message) from superseded
    except Rejected as refused:
        if busy_waits and refused.error == Codes.INSTANCE_BUSY:
            held_until = _held_by_live_job(job)
            if held_until is not None:
                # A crashed holder is re-run by the sweep once its lease ends: wait past that.
                delay = max((held_until - timezone.now()).total_seconds(), 0.0) + SWEEP_SECONDS
                raise RetryLater(
                    f"{refused.detail}; waiting for the job holding it", delay, free=True
                ) from refused
            raise RetryLater(refused.detail, delay=0.5) from refused
        raise JobSkipped(f"{refused.code}: {refused.detail}") from refused
    except ForwardToSubflow as forwarded:
        raise JobSkipped(
            f"instance {loaded.instance.id} now waits for its subflow {forwarded.child_id}; "
            "send the transition again"
        ) from forwarded
    if execution.relays:
        relays_run(loaded.instance.id)


_relaying = threading.local()


def relays_run(origin: uuid.UUID, *, budget: int = 500) -> int:
    """Run here and now the hand-off jobs a run on `origin` queued (its SubFlow child's start,
    its parent's resume, its children's ends), then those they queue in turn, until the chain
    rests: a runtime-issued child start or resume waits for the child's pipeline to reach a
    rest point (seed 000). Each stays a durable job that any worker may claim first; this only
    claims it like a worker would. Returns how many it ran."""
    if getattr(_relaying, "active", False):
        return 0  # the outer call's loop follows this run's hand-offs
    _relaying.active = True
    ran = 0
    try:
        frontier = [str(origin)]
        while frontier and ran < budget:
            origin_id = frontier.pop(0)
            live = Job.objects.filter(
                Q(status=JobStatus.PENDING, run_at__lte=timezone.now())
                | Q(status=JobStatus.RUNNING),
                payload__origin=origin_id,
            ).order_by("pk")
            for job_id, instance_id in list(live.values_list("pk", "instance_id")):
                ran += 1
                outcome = job_run(job_id)
                if outcome == "skipped" and _settled_elsewhere(job_id):
                    # Another worker claimed it first: the chain rests only when it is done.
                    outcome = "elsewhere"
                if outcome != "skipped" and instance_id is not None:
                    frontier.append(str(instance_id))
    finally:
        _relaying.active = False
    return ran


def _handle_update_data(job: Job) -> None:
    """An accepted async updateData, applied inside its instance's write lane (`_job_execute`
    holds it): what the tickets before it left is what its mapping reads."""
    still_mine = Job.objects.filter(
        pk=job.pk, status=JobStatus.RUNNING, lease_owner=job.lease_owner
    )
    if not still_mine.exists():
        raise JobSkipped("the lane's holder applied this update while this claim waited")
    loaded = _load(job)
    instance, definition = loaded.instance, loaded.definition
    if _applied_by_earlier_claim(job):
        return  # an earlier claim's commit applied it (its outcome was not recorded)
    if instance.status == InstanceStatus.COMPLETED:
        raise JobSkipped(f"instance {instance.id} completed before the update was applied")
    payload = open_request(job.payload, instance_id=job.instance_id)
    key = str(payload.get("transition"))
    transition = definition.transition_for(instance.current_state, key)
    if transition is None or not transition.is_update_data:
        raise JobSkipped(f"{key!r} is no longer an updateData of the definition")
    request = TransitionRequest(
        transition=transition,
        trigger=Trigger.MANUAL,
        attributes=payload.get("attributes"),
        body=payload.get("body"),
        headers=payload.get("headers") or {},
        query=payload.get("query") or {},
        actor=payload.get("actor") or "",
        stage=payload.get("stage") or "",
        row_seed=job_row_seed(job.pk),
        attempt=job.attempts,
    )
    _execute(job, loaded, request, reserved=False, defer_chain=True)


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
    pending = Job.objects.filter(
        instance_id=instance_id, kind=JobKind.AUTOMATIC, status=JobStatus.PENDING
    ).order_by("pk")
    for job_id in list(pending.values_list("pk", flat=True)):
        job_run(job_id)
    current = _store.load(instance_id) or execution.instance
    return InstanceOutcome(current, created=False, execution=execution)


def _settled_elsewhere(job_id: int) -> bool:
    """A hand-off job another worker holds: wait (up to a job lease) until it ends; True when
    it ran there (succeeded or faulted its instance), so its own hand-offs follow.

    Only a request waits (its answer must follow the chain); a job never does: the job it
    would wait for may be the one running it, or be waiting for it in turn."""
    if getattr(_in_job, "depth", 0):
        return False
    deadline = time.monotonic() + float(vnext_setting("JOB_LEASE_SECONDS"))
    pause = 0.005
    while True:
        status = Job.objects.filter(pk=job_id).values_list("status", flat=True).first()
        if status == JobStatus.PENDING:
            return False  # not due yet (it backs off): the runner takes it when it is
        if status != JobStatus.RUNNING:
            return status in (JobStatus.SUCCEEDED, JobStatus.INSTANCE_FAULTED)
        if time.monotonic() > deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _run_retry(job: Job, loaded: _Loaded) -> None:
    # An operator's async retry: the same request as a sync one, resumable like any job.
    payload = job.payload
    request = retry_request(
        loaded.definition,
        FaultToRetry(**payload["retry"]),
        actor=payload.get("actor") or "",
        headers=payload.get("headers") or {},
        query=payload.get("query") or {},
        instance_id=loaded.instance.id,
    )
    request.row_seed = job_row_seed(job.pk)
    request.attempt = job.attempts
    _resume_if_partially_committed(request, loaded.instance, request.row_seed)
    _execute(job, loaded, request, reserved=True)


def _run_boundary_retry(job: Job, loaded: _Loaded) -> None:
    # An error boundary's retry of a failed task: the hop continues at that task, Busy all along.
    request = boundary_retry_request(loaded.definition, job.payload)
    request.attempt = job.attempts
    _execute(job, loaded, request, reserved=True)


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
        pending = (
            Job.objects.filter(
                instance_id=instance_id, kind=JobKind.TRANSITION, status=JobStatus.PENDING
            )
            .filter(payload__has_key="boundaryRetry")
            .order_by("run_at")
            .first()
        )
        if (
            pending is None
            and not Job.objects.filter(instance_id=instance_id, status=JobStatus.RUNNING).exists()
        ):
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


def _resume_if_partially_committed(
    request: TransitionRequest, instance: Any, row_seed: uuid.UUID
) -> None:
    # An earlier claim of this job may have committed ChangeState before it died: resume with
    # the steps after it instead of running the transition again.
    # The attempt row is committed at step 20 with no target yet; ChangeState (step 50) commits
    # the target with the new state, so a target equal to the current state means it happened.
    row = InstanceTransition.objects.filter(id=uuid.uuid5(row_seed, "0")).first()
    if (
        row is not None
        and row.status == TransitionStatus.RUNNING
        and row.to_state
        and row.to_state == instance.current_state
    ):
        request.resume_at = Order.ON_ENTRY
        request.resume_from_state = row.from_state or None


def _handle_timer(job: Job, *, timeout: bool = False) -> None:
    """A scheduled transition (or the workflow timeout) is due."""
    loaded = _load(job)
    instance, definition = loaded.instance, loaded.definition
    if instance.status == InstanceStatus.COMPLETED:
        raise JobSkipped(f"instance {instance.id} is completed")
    if instance.status == InstanceStatus.FAULTED and not timeout:
        # The workflow timeout may still end a faulted instance; a state's timer may not.
        raise JobSkipped(f"instance {instance.id} is faulted; its timers wait for a retry")
    if timeout:
        transition = definition.timeout_for(instance.extra)
    else:
        if instance.current_state != job.state:
            raise JobSkipped(f"the instance left state {job.state!r}; its timers are void")
        transition = definition.transition_for(job.state, job.payload["transition"])
    if transition is None:
        raise JobSkipped("the transition is no longer in the definition")
    request = TransitionRequest(
        transition=transition,
        trigger=Trigger.SCHEDULED,
        actor="scheduler",
        row_seed=job_row_seed(job.pk),
        attempt=job.attempts,
    )
    _execute(job, loaded, request, reserved=False, busy_waits=True)


def _handle_subflow_resume(job: Job) -> None:
    """A SubFlow child ended: its parent takes its Busy over from the correlation, merges the
    child's data through the mapping's output handler and goes on (step 79, then Auto)."""
    loaded = _load(job)
    parent, definition = loaded.instance, loaded.definition
    child_id = uuid.UUID(str(job.payload["child"]))
    if not _store.take_reservation(parent.id, subflow_owner(child_id), job.pk, job.lease_owner):
        raise JobSkipped(
            f"instance {parent.id} no longer waits for its child {child_id} "
            f"(status {parent.status})"
        )
    child = _store.load(child_id)
    state = parent.current_state
    request = TransitionRequest(
        transition=definition.subflow_resume(state),
        trigger=Trigger.AUTOMATIC,
        actor="subflow",
        row_seed=job_row_seed(job.pk),
        attempt=job.attempts,
        resume_at=Order.CLEAR_BUSY_ON_RESUME,
        resume_from_state=state,
        subflow_result=dict(child.data) if child is not None else {},
    )
    _execute(job, loaded, request, reserved=True)


def _handle_subflow_end(job: Job) -> None:
    """The parent ended (cancel, exit, timeout): the child runs its own cancel (or exit), which
    ends its children in turn. A child whose workflow defines none is left as it is."""
    loaded = _load(job)
    child, definition = loaded.instance, loaded.definition
    if child.status == InstanceStatus.COMPLETED:
        raise JobSkipped(f"instance {child.id} is completed already")
    wanted = job.payload.get("transitionKind")
    transition = definition.exit if wanted == TransitionKind.EXIT else None
    transition = transition or definition.cancel
    if transition is None:
        raise JobSkipped(
            f"instance {child.id} ({definition.key}) defines no cancel: bypassed, left running"
        )
    request = TransitionRequest(
        transition=transition,
        trigger=Trigger.MANUAL,
        actor="subflow",
        row_seed=job_row_seed(job.pk),
        attempt=job.attempts,
    )
    _execute(job, loaded, request, reserved=False)


def _handle_automatic(job: Job) -> None:
    """An updateData made an automatic transition of `job.state` possible while another run held
    the instance: once it is free (and still in that state), the state's automatic transitions
    are evaluated again and the one that fires runs, with its chain."""
    loaded = _load(job)
    instance, definition = loaded.instance, loaded.definition
    if instance.status == InstanceStatus.COMPLETED:
        raise JobSkipped(f"instance {instance.id} is completed")
    if instance.current_state != job.state:
        raise JobSkipped(f"the instance left state {job.state!r}; its own run evaluated it")
    if instance.status == InstanceStatus.BUSY:
        held_until = _held_by_live_job(job)
        if held_until is not None:
            delay = max((held_until - timezone.now()).total_seconds(), 0.0) + SWEEP_SECONDS
            raise RetryLater(
                "the instance is busy: waiting for the job holding it", delay, free=True
            )
        raise RetryLater("the instance is busy", delay=0.5)
    if instance.status != InstanceStatus.ACTIVE:
        raise JobSkipped(f"instance {instance.id} is not active (status {instance.status})")
    picked = engine().automatic_transition(definition, instance)
    if picked is None:
        return  # no rule holds any more: nothing to run
    request = TransitionRequest(
        transition=picked,
        trigger=Trigger.AUTOMATIC,
        actor="automatic",
        row_seed=job_row_seed(job.pk),
        attempt=job.attempts,
    )
    _execute(job, loaded, request, reserved=False, busy_waits=True)


def _handle_long_poll_fallback(job: Job) -> None:
    """No acknowledgement came within `fallbackTimeoutSeconds`: the paused run goes on."""
    loaded = _load(job)
    instance = loaded.instance
    paused_by = f"{LONG_POLL_OWNER_PREFIX}{job.payload.get('token')}"
    if not _store.take_reservation(instance.id, paused_by, job.pk, job.lease_owner):
        raise JobSkipped(
            f"instance {instance.id} is no longer paused for this acknowledgement "
            f"(status {instance.status})"
        )
    request = long_poll_continue_request(
        loaded.definition, instance.current_state, actor="long-poll fallback"
    )
    request.row_seed = job_row_seed(job.pk)
    request.attempt = job.attempts
    _execute(job, loaded, request, reserved=True)


def _handle_notification(job: Job) -> None:
    """A state's notification (seed 001): its rule (false: skipped, not sent), its mapping's
    content, then the channel; a failed delivery raises and the job is retried with backoff."""
    loaded = _load(job)
    instance, definition = loaded.instance, loaded.definition
    payload = job.payload or {}
    state = definition.states.get(str(payload.get("state", "")))
    entries = state.raw.get("notifications") if state is not None else None
    index = payload.get("index")
    if not isinstance(entries, list) or not isinstance(index, int) or index >= len(entries):
        raise JobSkipped("the notification is no longer in the definition")
    entry = entries[index] if isinstance(entries[index], dict) else {}
    scripts = engine().scripts
    transition = str(payload.get("transition", ""))
    context = script_context(
        instance,
        transition_key=transition,
        configuration=engine().config.script_configuration,
    )
    rule = entry.get("rule")
    if (
        isinstance(rule, dict)
        and rule.get("code")
        and not scripts.call(rule, definition, "handler", context)
    ):
        raise JobSkipped("its rule is false: not sent")
    content: Any = None
    headers: dict[str, str] = {}
    mapping = entry.get("mapping")
    if isinstance(mapping, dict) and mapping.get("code"):
        handle = scripts.load(mapping, definition)
        name = "output_handler" if handle.has("output_handler") else "handler"
        returned = handle.call(name, context)
        content = response_data(returned)
        if isinstance(returned, ScriptResponse) and returned.headers:
            headers = {str(k): str(v) for k, v in returned.headers.items()}
    notification_channel().send(
        Notification(
            id=str(job.pk),
            domain=instance.domain,
            workflow=instance.workflow_key,
            instance_id=str(instance.id),
            instance_key=instance.key,
            state=str(payload.get("state")),
            transition=transition,
            entered_at=str(payload.get("enteredAt", "")),
            content=content,
            headers=headers,
        )
    )


def _handle_task_notification(job: Job) -> None:
    """A notification task's message on one channel (task type 10), shaped when the task ran;
    the `state` channel's content is the instance's state function now. A failed delivery
    raises and the job is retried with backoff."""
    loaded = _load(job)
    instance, definition = loaded.instance, loaded.definition
    payload = job.payload or {}
    channel = str(payload.get("channel") or "")
    if not channel:
        raise JobSkipped("the notification names no channel")
    content = payload.get("content")
    if channel == STATE_CHANNEL:
        base = f"/api/v1/{instance.domain}/workflows/{instance.workflow_key}/instances"
        content = with_state_etag(state_function(definition, instance, f"{base}/{instance.id}"))
    headers = payload.get("headers")
    headers = headers if isinstance(headers, dict) else {}
    notification_channel().send(
        Notification(
            id=str(job.pk),
            domain=instance.domain,
            workflow=instance.workflow_key,
            instance_id=str(instance.id),
            instance_key=instance.key,
            state=str(payload.get("state", "")),
            transition=str(payload.get("transition", "")),
            entered_at=str(payload.get("at", "")),
            content=content,
            headers={str(name): str(value) for name, value in headers.items()},
            channel=channel,
            task=str(payload.get("task", "")),
        )
    )


def _handle_event_transition(job: Job) -> None:
    """An event whose instance was Busy when it came (`instances.events`): its transition is
    admitted once the instance is free (the wait spends no attempt), or the job ends `skipped`
    when the instance no longer takes it (another state, faulted, suspended, finished)."""
    admission = event_transition_admit(job)
    if admission.outcome == EVENT_WAITING:
        raise RetryLater(admission.reason, admission.delay, free=True)
    if admission.outcome == EVENT_REFUSED:
        raise JobSkipped(admission.reason)


HANDLERS: dict[str, Callable[[Job], None]] = {
    JobKind.TRANSITION: _handle_transition,
    JobKind.UPDATE_DATA: _handle_update_data,
    JobKind.TIMER: _handle_timer,
    JobKind.TIMEOUT: lambda job: _handle_timer(job, timeout=True),
    JobKind.SUBFLOW_RESUME: _handle_subflow_resume,
    JobKind.SUBFLOW_END: _handle_subflow_end,
    JobKind.LONG_POLL_FALLBACK: _handle_long_poll_fallback,
    JobKind.NOTIFICATION: _handle_notification,
    JobKind.TASK_NOTIFICATION: _handle_task_notification,
    JobKind.AUTOMATIC: _handle_automatic,
    JobKind.EVENT_TRANSITION: _handle_event_transition,
}


# --- operators -----------------------------------------------------------------------------------


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
    with transaction.atomic():
        replayed = Job.objects.filter(pk=job.pk, status=job.status).update(
            status=JobStatus.PENDING,
            run_at=now,
            lease_owner="",
            lease_until=None,
            last_error=f"replayed by {operator or 'an operator'} at {now:%Y-%m-%d %H:%M:%S}",
            updated_at=now,
        )
        if not replayed:
            return ReplayResult(job.pk, REFUSED, "it changed meanwhile; look again")
        transaction.on_commit(lambda: jobs_dispatch([(job.pk, now)]))
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
    if job.kind == JobKind.TRANSITION and not job.payload.get("lockFree"):
        reservation = str(job.payload.get("reservation") or "")
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


# --- the trigger task types' writer ----------------------------------------------------------


class ServiceInstanceWriter:
    """`InstanceWriter` on the instance services, in-process: what the trigger task types
    (11 start, 12 direct trigger, 14 subprocess) answer is what the public API would."""

    def start(
        self,
        *,
        domain: str,
        flow: str,
        version: str | None,
        key: str | None,
        tags: list[str],
        body: dict[str, Any],
        sync: bool,
        headers: dict[str, str],
        parent: SubprocessParent | None = None,
        options: CallOptions | None = None,
    ) -> InstanceAnswer:
        """Start an instance (a SubProcess child when `parent` is given); 409 when a live
        instance already has `key`. In-process: `options` (remote call settings) do not apply."""
        request: dict[str, Any] = {"attributes": body, "tags": tags}
        if key:
            request["key"] = key
        info = RequestInfo(actor="task", headers=headers)

        def run() -> InstanceOutcome:
            if parent is not None:
                return instance_subprocess_start(
                    domain=domain,
                    workflow=flow,
                    body=request,
                    info=info,
                    version=version,
                    parent_id=parent.instance_id,
                    parent_state=parent.state,
                )
            start = instance_start if sync else instance_start_accept
            return start(domain=domain, workflow=flow, body=request, info=info, version=version)

        answer = _answer_of(run)
        if isinstance(answer, InstanceAnswer):
            return answer
        if not answer.created:
            return InstanceAnswer(
                409,
                {
                    "errorCode": Codes.INSTANCE_KEY_EXISTS.code,
                    "detail": f"instance {answer.instance.id} of {flow} already has key {key!r}",
                    "id": str(answer.instance.id),
                },
            )
        if parent is not None and sync:
            # The subprocess' start job runs here, to its first rest point.
            for job_id in Job.objects.filter(
                instance_id=answer.instance.id, status=JobStatus.PENDING
            ).values_list("pk", flat=True):
                job_run(job_id)
            return _instance_answer(_store.load(answer.instance.id) or answer.instance, 200)
        return _settled(answer, sync)

    def trigger(
        self,
        *,
        domain: str,
        flow: str,
        ref: str,
        transition: str,
        body: dict[str, Any],
        sync: bool,
        headers: dict[str, str],
        options: CallOptions | None = None,
    ) -> InstanceAnswer:
        """Run `transition` on instance `ref` of `flow`, as `PATCH .../transitions/...`."""
        run = instance_transition_run if sync else instance_transition_accept
        info = RequestInfo(actor="task", headers=headers)
        answer = _answer_of(
            lambda: run(
                domain=domain,
                workflow=flow,
                ref=ref,
                transition_key=transition,
                body={"attributes": body},
                info=info,
            )
        )
        if isinstance(answer, InstanceAnswer):
            return answer
        return _settled(answer, sync)


def _answer_of(run: Callable[[], InstanceOutcome]) -> InstanceOutcome | InstanceAnswer:
    try:
        return run()
    except PipelineSuperseded as superseded:
        now = _store.load(superseded.instance_id)
        body = {"id": str(superseded.instance_id)}
        if now is not None:
            body = _instance_answer(now, 200).body
        error = {"errorCode": superseded.code, "detail": superseded.message}
        return InstanceAnswer(200, {**body, "error": error})
    except PipelineFault as fault:
        faulted = _store.load(fault.instance_id)
        body = {"id": str(fault.instance_id), "status": InstanceStatus.FAULTED}
        if faulted is not None:
            body = _instance_answer(faulted, 200).body
        return InstanceAnswer(200, {**body, "error": {"errorCode": fault.code}})
    except VNextError as error:
        return InstanceAnswer(
            error.error.http_status, {"errorCode": error.code, "detail": error.detail}
        )


def _settled(outcome: InstanceOutcome, sync: bool) -> InstanceAnswer:
    if not sync or outcome.queued:
        return InstanceAnswer(
            202, {"id": str(outcome.instance.id), "status": outcome.instance.status}
        )
    instance = outcome.instance
    if outcome.execution is not None and outcome.execution.relays:
        relays_run(outcome.execution.instance.id)
        instance = _store.load(instance.id) or instance
    if outcome.addressed is not None:
        instance = _store.load(outcome.addressed) or instance
    return _instance_answer(instance, 200)


def _instance_answer(instance: InstanceSnapshot, status: int) -> InstanceAnswer:
    # Another instance's answer: its fields encrypted at rest stay sealed (their tokens).
    return InstanceAnswer(
        status,
        {
            "id": str(instance.id),
            "key": instance.key,
            "status": str(instance.status),
            "state": instance.current_state,
            "attributes": stored_data(instance),
        },
    )
