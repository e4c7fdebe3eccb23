"""Running jobs: claim one, run the handler of its kind (the engine, for transitions and timers),
record the outcome. (The stranded-Busy reaper is `instances.reaper`; operators' replay is
`instances.replay`.)

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
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from instances.builtin_functions import state_function, with_state_etag
from instances.engine.definition import TransitionDef, TransitionKind
from instances.engine.errors import Codes, VNextError
from instances.engine.execution import TransitionRequest
from instances.engine.outcomes import ForwardToSubflow, PipelineFault, PipelineSuperseded, Rejected
from instances.engine.profiles import Order
from instances.engine.records import LONG_POLL_OWNER_PREFIX, InstanceSnapshot, subflow_owner
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
from instances.events import event_transition_admit
from instances.field_encryption import open_request
from instances.job_payloads import (
    BoundaryRetryJob,
    LongPollFallbackJob,
    NotificationJob,
    RetryJob,
    SubflowEndJob,
    SubflowResumeJob,
    TaskNotificationJob,
    TimerJob,
    TransitionJob,
    transition_job_of,
)
from instances.lane_lock import LaneTimeout, lane_held
from instances.notifications import Notification
from instances.notifications import channel as notification_channel
from instances.orm_store import OrmStore, transition_row_get
from instances.queue import (
    HELD_KINDS,
    backoff,
    job_claim,
    job_claim_holds,
    job_complete,
    job_hold,
    job_holder_settles_at,
    job_row_seed,
    job_status_get,
    jobs_due,
    jobs_fail_expired_leases,
    jobs_relayed_list,
    lane_dispatch_next,
    max_attempts,
)
from instances.run_requests import (
    boundary_retry_request,
    long_poll_continue_request,
    retry_request,
    transition_request,
)
from instances.status import (
    InstanceStatus,
    JobKind,
    JobStatus,
    TransitionStatus,
    Trigger,
)
from instances.wiring import engine
from vnext.conf import vnext_setting

if TYPE_CHECKING:
    from instances.job_table import Job

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


class JobHeld(Exception):
    """The job's instance is suspended: the job is held, keeping its due time, and runs when
    an operator resumes the instance (`instances/repair.py`)."""


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
    except JobHeld as held:
        logger.info("job %s (%s) held: %s", job.pk, job.kind, held)
        job_hold(job)
        return "held"
    except VNextError as refused:
        if refused.error != Codes.INSTANCE_PASSIVE or job.kind not in HELD_KINDS:
            return _job_failed(job, refused)
        # Suspended between the handler's read and its run: the pipeline refused it.
        job_hold(job)
        return "held"
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
        return _job_failed(job, exc)
    if not record_success and job.kind != JobKind.UPDATE_DATA:
        return "succeeded"
    return "succeeded" if job_complete(job, JobStatus.SUCCEEDED) else "lost-lease"


def _job_failed(job: Job, exc: Exception) -> str:
    """Any failure: retried with backoff, then left for an operator."""
    logger.warning("job %s (%s) attempt %s failed: %s", job.pk, job.kind, job.attempts, exc)
    if job.attempts >= max_attempts():
        job_complete(job, JobStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
        return "failed"
    retry_at = timezone.now() + backoff(job.attempts)
    job_complete(job, JobStatus.PENDING, error=f"{type(exc).__name__}: {exc}", retry_at=retry_at)
    return "retry"


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
    return job_holder_settles_at(instance_id=job.instance_id, excluding=job.pk)


def _take_reservation(job: Job) -> bool:
    """Move the instance's Busy ownership from the accept's reservation (or an earlier claim of
    this job) to this claim's token."""
    if job.instance_id is None:
        return False
    reservation = transition_job_of(job.payload).reservation or ""
    return _store.take_reservation(job.instance_id, reservation, job.pk, job.lease_owner)


def _applied_by_earlier_claim(job: Job) -> bool:
    """This job's transition ran to completion under an earlier claim (its first history row,
    keyed by the job, is completed)."""
    row = transition_row_get(row_id=uuid.uuid5(job_row_seed(job.pk), "0"))
    return row is not None and row.status == TransitionStatus.COMPLETED


def _handle_transition(job: Job) -> None:
    """An accepted async start/transition: run the pipeline and its whole automatic chain."""
    loaded = _load(job)
    instance, definition = loaded.instance, loaded.definition
    # A workflow that encrypts fields at rest keeps the request sealed in the job row.
    payload = transition_job_of(open_request(job.payload, instance_id=job.instance_id))
    call = payload if isinstance(payload, TransitionJob) else None
    lock_free = call is not None and call.lock_free
    # A waiting parent's own transition takes the correlation's Busy over when it runs.
    waiting_parent = call is not None and call.waiting_parent
    if not lock_free and not waiting_parent and not _take_reservation(job):
        if _applied_by_earlier_claim(job):
            # A worker died between the run's last commit and recording the job: it is done.
            return
        raise JobSkipped(
            f"instance {job.instance_id} is no longer reserved for this job "
            f"(status {instance.status})"
        )
    if isinstance(payload, RetryJob):
        _run_retry(job, loaded)
        return
    if isinstance(payload, BoundaryRetryJob):
        _run_boundary_retry(job, loaded)
        return
    assert call is not None
    transition: TransitionDef | None
    if call.start:
        transition = definition.start
    else:
        transition = definition.transition_for(call.from_state or "", call.transition)
    if transition is None:
        raise VNextError(
            Codes.TRANSITION_NOT_FOUND,
            f"transition {call.transition!r} vanished from the definition",
        )
    row_seed = job_row_seed(job.pk)
    request = transition_request(transition, call, row_seed=row_seed, attempt=job.attempts)
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
            for job_id, instance_id in jobs_relayed_list(origin=origin_id):
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
    if not job_claim_holds(job_id=job.pk, lease_owner=job.lease_owner):
        raise JobSkipped("the lane's holder applied this update while this claim waited")
    loaded = _load(job)
    instance, definition = loaded.instance, loaded.definition
    if _applied_by_earlier_claim(job):
        return  # an earlier claim's commit applied it (its outcome was not recorded)
    if instance.status == InstanceStatus.COMPLETED:
        raise JobSkipped(f"instance {instance.id} completed before the update was applied")
    call = TransitionJob.from_json(open_request(job.payload, instance_id=job.instance_id))
    transition = definition.transition_for(instance.current_state, call.transition)
    if transition is None or not transition.is_update_data:
        raise JobSkipped(f"{call.transition!r} is no longer an updateData of the definition")
    # A lane ticket may carry the event trigger of the request it queued behind: an update
    # always ran as a manual one.
    request = transition_request(
        transition,
        replace(call, trigger=None),
        row_seed=job_row_seed(job.pk),
        attempt=job.attempts,
    )
    _execute(job, loaded, request, reserved=False, defer_chain=True)


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
        status = job_status_get(job_id=job_id)
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
    payload = RetryJob.from_json(job.payload)
    request = retry_request(
        loaded.definition,
        payload.fault,
        actor=payload.actor,
        headers=payload.headers,
        query=payload.query,
        instance_id=loaded.instance.id,
    )
    request.row_seed = job_row_seed(job.pk)
    request.attempt = job.attempts
    _resume_if_partially_committed(request, loaded.instance, request.row_seed)
    _execute(job, loaded, request, reserved=True)


def _run_boundary_retry(job: Job, loaded: _Loaded) -> None:
    # An error boundary's retry of a failed task: the hop continues at that task, Busy all along.
    request = boundary_retry_request(loaded.definition, BoundaryRetryJob.from_json(job.payload))
    request.attempt = job.attempts
    _execute(job, loaded, request, reserved=True)


def _resume_if_partially_committed(
    request: TransitionRequest, instance: Any, row_seed: uuid.UUID
) -> None:
    # An earlier claim of this job may have committed ChangeState before it died: resume with
    # the steps after it instead of running the transition again.
    # The attempt row is committed at step 20 with no target yet; ChangeState (step 50) commits
    # the target with the new state, so a target equal to the current state means it happened.
    row = transition_row_get(row_id=uuid.uuid5(row_seed, "0"))
    if (
        row is not None
        and row.status == TransitionStatus.RUNNING
        and row.to_state
        and row.to_state == instance.current_state
    ):
        request.resume_at = Order.ON_ENTRY
        request.resume_from_state = row.from_state or None


def _job_request(
    job: Job, transition: TransitionDef, trigger: Trigger, *, actor: str
) -> TransitionRequest:
    # A run on the job's behalf: its history rows keyed by the job, so a re-claim updates them.
    return TransitionRequest(
        transition=transition,
        trigger=trigger,
        actor=actor,
        row_seed=job_row_seed(job.pk),
        attempt=job.attempts,
    )


def _handle_timer(job: Job, *, timeout: bool = False) -> None:
    """A scheduled transition (or the workflow timeout) is due."""
    loaded = _load(job)
    instance, definition = loaded.instance, loaded.definition
    if instance.status == InstanceStatus.COMPLETED:
        raise JobSkipped(f"instance {instance.id} is completed")
    if instance.status == InstanceStatus.FAULTED and not timeout:
        # The workflow timeout may still end a faulted instance; a state's timer may not.
        raise JobSkipped(f"instance {instance.id} is faulted; its timers wait for a retry")
    if instance.status == InstanceStatus.PASSIVE:
        raise JobHeld(f"instance {instance.id} is suspended")
    if timeout:
        transition = definition.timeout_for(instance.extra)
    else:
        if instance.current_state != job.state:
            raise JobSkipped(f"the instance left state {job.state!r}; its timers are void")
        transition = definition.transition_for(
            job.state, TimerJob.from_json(job.payload).transition
        )
    if transition is None:
        raise JobSkipped("the transition is no longer in the definition")
    request = _job_request(job, transition, Trigger.SCHEDULED, actor="scheduler")
    # A cron timer's next occurrence is armed from this payload by the hop it fires.
    request.fired_timer = TimerJob.from_json(job.payload)
    _execute(job, loaded, request, reserved=False, busy_waits=True)


def _handle_subflow_resume(job: Job) -> None:
    """A SubFlow child ended: its parent takes its Busy over from the correlation, merges the
    child's data through the mapping's output handler and goes on (step 79, then Auto)."""
    loaded = _load(job)
    parent, definition = loaded.instance, loaded.definition
    child_id = uuid.UUID(SubflowResumeJob.from_json(job.payload).child)
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
    wanted = SubflowEndJob.from_json(job.payload).transition_kind
    transition = definition.exit if wanted == TransitionKind.EXIT else None
    transition = transition or definition.cancel
    if transition is None:
        raise JobSkipped(
            f"instance {child.id} ({definition.key}) defines no cancel: bypassed, left running"
        )
    request = _job_request(job, transition, Trigger.MANUAL, actor="subflow")
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
    if instance.status == InstanceStatus.PASSIVE:
        raise JobHeld(f"instance {instance.id} is suspended")
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
    request = _job_request(job, picked, Trigger.AUTOMATIC, actor="automatic")
    _execute(job, loaded, request, reserved=False, busy_waits=True)


def _handle_long_poll_fallback(job: Job) -> None:
    """No acknowledgement came within `fallbackTimeoutSeconds`: the paused run goes on."""
    loaded = _load(job)
    instance = loaded.instance
    paused_by = f"{LONG_POLL_OWNER_PREFIX}{LongPollFallbackJob.from_json(job.payload).token}"
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
    payload = NotificationJob.from_json(job.payload)
    state = definition.states.get(payload.state)
    entries = state.raw.get("notifications") if state is not None else None
    index = payload.index
    if not isinstance(entries, list) or not isinstance(index, int) or index >= len(entries):
        raise JobSkipped("the notification is no longer in the definition")
    entry = entries[index] if isinstance(entries[index], dict) else {}
    scripts = engine().scripts
    transition = payload.transition
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
        _notification(
            job,
            instance,
            state=payload.state,
            transition=transition,
            entered_at=payload.entered_at,
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
    payload = TaskNotificationJob.from_json(job.payload)
    channel = payload.channel
    if not channel:
        raise JobSkipped("the notification names no channel")
    content = payload.content
    if channel == STATE_CHANNEL:
        base = f"/api/v1/{instance.domain}/workflows/{instance.workflow_key}/instances"
        content = with_state_etag(state_function(definition, instance, f"{base}/{instance.id}"))
    # Shaped by a script when the task ran: only a mapping of names to values is sent.
    headers = payload.headers if isinstance(payload.headers, dict) else {}
    notification_channel().send(
        _notification(
            job,
            instance,
            state=payload.state,
            transition=payload.transition,
            entered_at=payload.at,
            content=content,
            headers={str(name): str(value) for name, value in headers.items()},
            channel=channel,
            task=payload.task,
        )
    )


def _notification(
    job: Job,
    instance: InstanceSnapshot,
    *,
    state: str,
    transition: str,
    entered_at: str,
    content: Any,
    headers: dict[str, str],
    channel: str = "state",
    task: str = "",
) -> Notification:
    # What either notification job delivers: the job's id and its instance, then the message.
    return Notification(
        id=str(job.pk),
        domain=instance.domain,
        workflow=instance.workflow_key,
        instance_id=str(instance.id),
        instance_key=instance.key,
        state=state,
        transition=transition,
        entered_at=entered_at,
        content=content,
        headers=headers,
        channel=channel,
        task=task,
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
