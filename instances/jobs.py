"""The durable job queue: enqueue in the caller's transaction, dispatch after commit, claim by
compare-and-set with a lease, run the handler of the job's kind, complete fenced by the lease.

A job's Busy reservation travels with it: an accepted async request marks the instance Busy with
the job's reservation token; each claim moves that ownership to a token naming the claim
(`job:<id>:<attempt>`), so a worker that lost its lease can no longer write to the instance.
"""

from __future__ import annotations

import functools
import json
import logging
import random
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from instances.engine.definition import TransitionDef
from instances.engine.errors import Codes, VNextError
from instances.engine.pipeline import PipelineFault, Rejected, TransitionRequest, stage_fault
from instances.engine.profiles import Order, Trigger
from instances.engine.records import Guard, GuardKind, IncidentRow, PendingWrites
from instances.models import Instance, InstanceTransition, Job
from instances.status import InstanceStatus, JobStatus, TransitionStatus
from vnext.conf import vnext_setting

logger = logging.getLogger("vnext.jobs")

TRANSITION = "transition"
TIMER = "timer"
TIMEOUT = "timeout"


class RetryLater(Exception):
    """The job cannot run yet (the instance is Busy): try again after at least `delay` seconds,
    backing off like a failure and within the same attempt limit."""

    def __init__(self, reason: str, delay: float = 1.0) -> None:
        super().__init__(reason)
        self.delay = delay


class JobSkipped(Exception):
    """The job has nothing to do (its instance is faulted, finished or gone, or left the timer's
    state): it ends `skipped` with this reason, never retried."""


class InstanceFaulted(Exception):
    """The job ran and its run faulted the instance: it ends `instance_faulted` with the code.
    The instance is what an operator retries, not the job."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


# --- enqueue and dispatch ------------------------------------------------------------------------


def job_enqueue(
    *,
    kind: str,
    instance_id: uuid.UUID | None,
    payload: dict[str, Any],
    run_at: datetime | None = None,
    state: str = "",
    dedupe_key: str | None = None,
) -> Job:
    """Insert a job in the current transaction; it is dispatched once that transaction commits."""
    job = Job.objects.create(
        kind=kind,
        instance_id=instance_id,
        payload=payload,
        run_at=run_at or timezone.now(),
        state=state,
        dedupe_key=dedupe_key,
    )
    transaction.on_commit(lambda: jobs_dispatch([(job.pk, job.run_at)]))
    return job


def jobs_dispatch(jobs: Iterable[tuple[int, datetime]]) -> None:
    """Hand committed jobs to the runner: Celery messages (with an ETA for future ones) or the
    embedded runner's wake-up. A lost message is harmless: the due-jobs sweep finds the row."""
    jobs = list(jobs)
    if not jobs:
        return
    if dispatch_mode() == "celery":
        from instances.tasks import job_run_task

        now = timezone.now()
        for job_id, run_at in jobs:
            try:
                if run_at > now:
                    job_run_task.apply_async(args=(job_id,), eta=run_at)
                else:
                    job_run_task.apply_async(args=(job_id,))
            except Exception:  # the broker is down: the sweep will dispatch it
                logger.warning("could not send job %s to the broker", job_id, exc_info=True)
    else:
        from instances.runner import wake_embedded_runner

        wake_embedded_runner()


def dispatch_mode() -> str:
    """`celery` with a configured broker, else `embedded` (the in-process runner)."""
    mode = vnext_setting("JOB_DISPATCH")
    if mode:
        return str(mode)
    from django.conf import settings

    return "celery" if settings.CELERY_BROKER_URL != "memory://" else "embedded"


# --- claim, run, complete ------------------------------------------------------------------------


def _lease() -> timedelta:
    return timedelta(seconds=float(vnext_setting("JOB_LEASE_SECONDS")))


def _max_attempts() -> int:
    return int(vnext_setting("JOB_MAX_ATTEMPTS"))


# --- which jobs are due: one definition, used by the ORM queries and (as SQL) the raw claims ---


def _lease_expired(now: datetime) -> Q:
    return Q(status=JobStatus.RUNNING, lease_until__lt=now)


def _due(now: datetime, max_attempts: int) -> Q:
    """Claimable now: pending and due, or running past its lease with an attempt left.

    A job whose lease expired on its last attempt is not due: its worker hung or died every
    time, so `jobs_fail_expired_leases` fails it instead of letting it be claimed forever."""
    return Q(status=JobStatus.PENDING, run_at__lte=now) | (
        _lease_expired(now) & Q(attempts__lt=max_attempts)
    )


def _lease_exhausted(now: datetime, max_attempts: int) -> Q:
    """Running past its lease with no attempt left (the complement of `_due`'s second half)."""
    return _lease_expired(now) & Q(attempts__gte=max_attempts)


# The raw statements below use these conditions compiled to SQL by the ORM, so they cannot
# drift from the querysets. Compiling costs more than a claim's round trip, so each condition is
# compiled once, with these stand-ins for its arguments, which every call then replaces.
_NOW_STANDIN = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_STANDIN = 32767


@functools.cache
def _compiled(condition: Callable[[datetime, int], Q], vendor: str) -> tuple[str, list[Any]]:
    query = Job.objects.filter(condition(_NOW_STANDIN, _MAX_STANDIN)).query
    sql, params = query.where.as_sql(query.get_compiler(connection=connection), connection)
    if _NOW_STANDIN not in params or _MAX_STANDIN not in params:  # the backend adapted them
        raise RuntimeError(f"cannot compile {condition.__name__}: its parameters are {params}")
    return sql, list(params)


def _sql(
    condition: Callable[[datetime, int], Q], now: datetime, max_attempts: int
) -> tuple[str, list[Any]]:
    """`condition(now, max_attempts)` as an SQL WHERE fragment and its parameters."""
    sql, params = _compiled(condition, connection.vendor)
    stand_ins = {_NOW_STANDIN: now, _MAX_STANDIN: max_attempts}
    return sql, [stand_ins.get(param, param) for param in params]


def job_claim(job_id: int) -> Job | None:
    """Claim a due job (see `_due`) by compare-and-set; None when someone else has it, it is not
    due, it is finished, or its lease expired on its last attempt. Each claim gets a fresh lease
    token."""
    now = timezone.now()
    if connection.vendor == "postgresql":
        return _claim_postgres(job_id, now)
    claimed = Job.objects.filter(_due(now, _max_attempts()), pk=job_id).update(
        status=JobStatus.RUNNING,
        attempts=F("attempts") + 1,
        lease_until=now + _lease(),
        updated_at=now,
    )
    if not claimed:
        return None
    job = Job.objects.get(pk=job_id)
    token = f"job:{job.pk}:{job.attempts}"
    # Fencing: only the claim that set this attempt number owns the job now.
    Job.objects.filter(pk=job.pk, attempts=job.attempts).update(lease_owner=token)
    job.lease_owner = token
    return job


# A claim: the compare-and-set, the new attempt and its lease token, in one statement
# (parameters: lease_until, now).
_CLAIM_SET = f"""
UPDATE {Job._meta.db_table} SET
    status = 'running',
    attempts = attempts + 1,
    lease_owner = 'job:' || id || ':' || (attempts + 1),
    lease_until = %s,
    updated_at = %s
"""
_CLAIMED = "RETURNING id, kind, instance_id, state, payload, run_at, attempts, lease_owner"


def _claim_postgres(job_id: int, now: datetime) -> Job | None:
    due, due_params = _sql(_due, now, _max_attempts())
    with connection.cursor() as cursor:
        cursor.execute(
            f"{_CLAIM_SET} WHERE id = %s AND {due} {_CLAIMED}",
            [now + _lease(), now, job_id, *due_params],
        )
        row = cursor.fetchone()
    return _claimed(row, now) if row else None


def jobs_claim_due(limit: int = 100) -> list[Job]:
    """Claim up to `limit` due jobs in one statement (PostgreSQL), oldest first.

    No row locks are taken: two claimers may pick the same ids, and the due re-check in the
    outer WHERE lets exactly one of them have each job."""
    now = timezone.now()
    if connection.vendor != "postgresql":
        claimed = (job_claim(job_id) for job_id in jobs_due(limit))
        return [job for job in claimed if job is not None]
    due, due_params = _sql(_due, now, _max_attempts())
    with connection.cursor() as cursor:
        cursor.execute(
            f"{_CLAIM_SET} WHERE id IN (SELECT id FROM {Job._meta.db_table} WHERE {due} "
            f"ORDER BY run_at LIMIT %s) AND {due} {_CLAIMED}",
            [now + _lease(), now, *due_params, limit, *due_params],
        )
        rows = cursor.fetchall()
    jobs = [_claimed(row, now) for row in rows]
    return sorted(jobs, key=lambda job: job.run_at)


def _claimed(row: Any, now: datetime) -> Job:
    job_id, kind, instance_id, state, payload, run_at, attempts, token = row
    return Job(
        pk=job_id,
        kind=kind,
        instance_id=instance_id,
        state=state,
        payload=json.loads(payload) if isinstance(payload, str) else payload,
        run_at=run_at,
        status=JobStatus.RUNNING,
        attempts=attempts,
        lease_owner=token,
        lease_until=now + _lease(),
    )


def job_complete(
    job: Job, status: str, *, error: str = "", retry_at: datetime | None = None
) -> bool:
    """Record the outcome, only if this claim still holds the lease (False otherwise)."""
    fields: dict[str, Any] = {
        "status": status,
        "last_error": error[:2000],
        "updated_at": timezone.now(),
    }
    if retry_at is not None:
        fields.update(run_at=retry_at, lease_until=None)
    done = Job.objects.filter(
        pk=job.pk, status=JobStatus.RUNNING, lease_owner=job.lease_owner
    ).update(**fields)
    if done and retry_at is not None:
        jobs_dispatch([(job.pk, retry_at)])
    return bool(done)


def _backoff(attempts: int) -> timedelta:
    base = float(vnext_setting("JOB_RETRY_BASE_SECONDS"))
    return timedelta(seconds=min(base * 2 ** max(attempts - 1, 0), 300) * random.uniform(0.8, 1.2))


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
    (`jobs_complete_succeeded`); retries and failures are always recorded here."""
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
        if job.attempts >= _max_attempts():
            error = f"gave up after {job.attempts} attempts: {wait}"
            logger.warning("job %s (%s) %s", job.pk, job.kind, error)
            job_complete(job, JobStatus.FAILED, error=error)
            return "failed"
        delay = max(timedelta(seconds=wait.delay), _backoff(job.attempts))
        job_complete(job, JobStatus.PENDING, error=str(wait), retry_at=timezone.now() + delay)
        return "retry"
    except Exception as exc:  # any failure: retried with backoff, then left for an operator
        logger.warning("job %s (%s) attempt %s failed: %s", job.pk, job.kind, job.attempts, exc)
        if job.attempts >= _max_attempts():
            job_complete(job, JobStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
            return "failed"
        retry_at = timezone.now() + _backoff(job.attempts)
        job_complete(
            job, JobStatus.PENDING, error=f"{type(exc).__name__}: {exc}", retry_at=retry_at
        )
        return "retry"
    if not record_success:
        return "succeeded"
    return "succeeded" if job_complete(job, JobStatus.SUCCEEDED) else "lost-lease"


def jobs_complete_succeeded(jobs: list[Job]) -> int:
    """Record many successes in one statement, each still fenced by its own claim token."""
    if not jobs:
        return 0
    if connection.vendor != "postgresql":
        return sum(job_complete(job, JobStatus.SUCCEEDED) for job in jobs)
    rows = ", ".join(["(%s, %s)"] * len(jobs))
    params: list[Any] = [timezone.now()]
    for job in jobs:
        params += [job.pk, job.lease_owner]
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Job._meta.db_table} AS job SET status = 'succeeded', last_error = '', "
            f"updated_at = %s FROM (VALUES {rows}) AS done(id, token) "
            "WHERE job.id = done.id AND job.status = 'running' AND job.lease_owner = done.token",
            params,
        )
        return cursor.rowcount


def jobs_due(limit: int = 100) -> list[int]:
    """Ids of jobs that should run now: pending and due, or running with an expired lease and
    an attempt left (see `_due`)."""
    due = _due(timezone.now(), _max_attempts())
    return list(Job.objects.filter(due).order_by("run_at").values_list("pk", flat=True)[:limit])


def jobs_run_due(limit: int = 100) -> dict[str, int]:
    """Run due jobs here and now, one after the other (tests, `jobs_run` command); jobs whose
    lease expired on their last attempt are failed first (counted as `failed`)."""
    counts: dict[str, int] = {}
    if expired := jobs_fail_expired_leases():
        counts["failed"] = expired
    for job_id in jobs_due(limit):
        outcome = job_run(job_id)
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts


def jobs_dispatch_due(limit: int = 500) -> int:
    """The periodic safety net: fail the jobs whose lease expired on their last attempt, then
    hand every due job to the runner again. Returns how many were dispatched."""
    jobs_fail_expired_leases()
    due = jobs_due(limit)
    jobs_dispatch([(job_id, timezone.now()) for job_id in due])
    return len(due)


# The `last_error` of a job failed because its lease expired on its last attempt.
_LEASE_EXPIRED = "lease expired on attempt {attempts} of {max_attempts}: the worker hung or died"


def jobs_fail_expired_leases() -> int:
    """Fail every job whose lease expired on its last attempt (its worker hung or died each
    time): such a job is no longer due, so nothing else would ever finish it.

    One UPDATE, fenced by the condition it selects on: a job re-claimed meanwhile has a fresh
    lease and is left alone, and of two sweeps at once only one fails a job. Returns how many
    jobs were failed."""
    now = timezone.now()
    max_attempts = _max_attempts()
    exhausted = _lease_exhausted(now, max_attempts)
    failed: list[tuple[int, str, Any, str]] = []
    if connection.vendor == "postgresql":
        where, params = _sql(_lease_exhausted, now, max_attempts)
        before, _, after = _LEASE_EXPIRED.partition("{attempts}")
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Job._meta.db_table} SET status = 'failed', "
                "last_error = concat(%s, attempts, %s), updated_at = %s "
                f"WHERE {where} RETURNING id, kind, instance_id, last_error",
                [before, after.format(max_attempts=max_attempts), now, *params],
            )
            failed = list(cursor.fetchall())
    else:  # the ORM cannot UPDATE ... RETURNING: one update per job, each fenced the same way
        candidates = Job.objects.filter(exhausted).values_list(
            "pk", "kind", "instance_id", "attempts"
        )
        for job_id, kind, instance_id, attempts in candidates:
            error = _LEASE_EXPIRED.format(attempts=attempts, max_attempts=max_attempts)
            if Job.objects.filter(exhausted, pk=job_id).update(
                status=JobStatus.FAILED, last_error=error, updated_at=now
            ):
                failed.append((job_id, kind, instance_id, error))
    for job_id, kind, instance_id, error in failed:
        logger.warning("job %s (%s) for instance %s failed: %s", job_id, kind, instance_id, error)
    return len(failed)


def jobs_prune_finished(*, older_than: timedelta | None = None) -> int:
    """Delete succeeded and cancelled jobs older than the retention (failed ones stay)."""
    age = older_than or timedelta(days=float(vnext_setting("JOB_RETENTION_DAYS")))
    finished = [JobStatus.SUCCEEDED, JobStatus.CANCELLED, JobStatus.SKIPPED]
    cutoff = timezone.now() - age
    return Job.objects.filter(status__in=finished, updated_at__lt=cutoff).delete()[0]


# --- the stranded-Busy reaper --------------------------------------------------------------------


def instances_reap_stranded_busy() -> int:
    """Fault every instance Busy past its lease whose owner is gone (no live job holds it).

    A reservation owned by a live (pending or running) job is left to the job (an expired lease
    is re-claimed); anything else Busy for longer than `BUSY_LEASE_SECONDS`, including a
    reservation of a job failed on its last expired lease, is faulted with an incident, never
    left Busy."""
    cutoff = timezone.now() - timedelta(seconds=float(vnext_setting("BUSY_LEASE_SECONDS")))
    reaped = 0
    stale = Instance.objects.filter(status=InstanceStatus.BUSY, busy_since__lt=cutoff)
    for instance_id, owner in stale.values_list("pk", "busy_owner"):
        live_job = Job.objects.filter(
            instance_id=instance_id, status__in=[JobStatus.PENDING, JobStatus.RUNNING]
        ).filter(Q(payload__reservation=owner) | Q(lease_owner=owner))
        if live_job.exists():
            continue
        if not _fault_stranded(instance_id, owner, cutoff):
            continue
        reaped += 1
        logger.warning("reaped stranded Busy instance %s (owner %s)", instance_id, owner)
    return reaped


def _fault_stranded(instance_id: uuid.UUID, owner: str, cutoff: datetime) -> bool:
    # The same fault as a failed run (status, incident, timers, locks), guarded by the stale
    # owner: a run that finishes meanwhile wins and nothing is written.
    from instances.orm_store import OrmStore

    store = OrmStore()
    snapshot = store.load(instance_id)
    if snapshot is None:
        return False
    writes = PendingWrites()
    message = (
        f"Busy since before {cutoff:%Y-%m-%d %H:%M:%S} UTC with no live owner "
        f"({owner or 'unknown'}); faulted by the reaper, retry or cancel it"
    )
    incident = IncidentRow(
        transition_id=None,
        state=snapshot.current_state,
        transition_key="",
        error_code=STRANDED_BUSY,
        message=message,
    )
    stage_fault(writes, state=snapshot.current_state, incident=incident)
    with transaction.atomic():
        if store.flush(snapshot, writes, Guard(GuardKind.OWNER, owner=owner)) is None:
            return False
        InstanceTransition.objects.filter(
            instance_id=instance_id, status=TransitionStatus.RUNNING
        ).update(
            status=TransitionStatus.FAULTED,
            error_code=STRANDED_BUSY,
            error_message="the pipeline holding Busy stopped without finishing",
            finished_at=timezone.now(),
        )
    return True


STRANDED_BUSY = "Instance:StrandedBusy"


# --- handlers ------------------------------------------------------------------------------------


@dataclass
class _Loaded:
    instance: Any
    definition: Any


def _load(job: Job) -> _Loaded:
    from instances.orm_store import OrmStore
    from instances.services import engine

    if job.instance_id is None:
        raise JobSkipped("the job names no instance")
    instance = OrmStore().load(job.instance_id)
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


def _take_reservation(job: Job) -> bool:
    """Move the instance's Busy ownership from the accept's reservation (or an earlier claim of
    this job) to this claim's token."""
    if job.instance_id is None:
        return False
    reservation = str(job.payload.get("reservation") or "")
    owners = Q(busy_owner=reservation) | Q(busy_owner__startswith=f"job:{job.pk}:")
    return bool(
        Instance.objects.filter(owners, id=job.instance_id, status=InstanceStatus.BUSY).update(
            busy_owner=job.lease_owner, busy_since=timezone.now()
        )
    )


def _handle_transition(job: Job) -> None:
    """An accepted async start/transition: run the pipeline and its whole automatic chain."""
    from instances.services import engine

    loaded = _load(job)
    instance, definition = loaded.instance, loaded.definition
    payload = job.payload
    lock_free = bool(payload.get("lockFree"))
    if not lock_free and not _take_reservation(job):
        raise JobSkipped(
            f"instance {job.instance_id} is no longer reserved for this job "
            f"(status {instance.status})"
        )
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
    row_seed = uuid.uuid5(uuid.NAMESPACE_OID, f"vnext-job-{job.pk}")
    request = TransitionRequest(
        transition=transition,
        trigger=Trigger.MANUAL,
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
    try:
        engine().execute(
            definition,
            instance,
            request,
            owner=None if lock_free else job.lease_owner,
            reserved=not lock_free,
        )
    except PipelineFault as fault:
        raise InstanceFaulted(fault.code, fault.message) from fault
    except Rejected as refused:
        raise JobSkipped(f"{refused.code}: {refused.detail}") from refused


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
    from instances.services import engine

    loaded = _load(job)
    instance, definition = loaded.instance, loaded.definition
    if instance.status == InstanceStatus.COMPLETED:
        raise JobSkipped(f"instance {instance.id} is completed")
    if instance.status == InstanceStatus.FAULTED and not timeout:
        # The workflow timeout may still end a faulted instance; a state's timer may not.
        raise JobSkipped(f"instance {instance.id} is faulted; its timers wait for a retry")
    if timeout:
        transition = definition.timeout
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
        row_seed=uuid.uuid5(uuid.NAMESPACE_OID, f"vnext-job-{job.pk}"),
        attempt=job.attempts,
    )
    try:
        engine().execute(definition, instance, request, owner=job.lease_owner)
    except PipelineFault as fault:
        raise InstanceFaulted(fault.code, fault.message) from fault
    except Rejected as refused:
        if refused.error == Codes.INSTANCE_BUSY:
            raise RetryLater(refused.detail, delay=0.5) from refused
        raise JobSkipped(f"{refused.code}: {refused.detail}") from refused


HANDLERS: dict[str, Callable[[Job], None]] = {
    TRANSITION: _handle_transition,
    TIMER: _handle_timer,
    TIMEOUT: lambda job: _handle_timer(job, timeout=True),
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
    if job.status == JobStatus.SUCCEEDED and not force and job.kind != TRANSITION:
        return "it already succeeded; replay it with force to run it again"
    return ""


def _replay_without_effect(job: Job) -> str:
    if job.status == JobStatus.SUCCEEDED and job.kind == TRANSITION:
        return "its transition was applied; replaying it would change nothing"
    instance = Instance.objects.filter(pk=job.instance_id).first() if job.instance_id else None
    if instance is None:
        return "its instance no longer exists"
    if instance.status == InstanceStatus.COMPLETED:
        return f"instance {instance.pk} is completed"
    if job.kind == TIMER and instance.current_state != job.state:
        return f"instance {instance.pk} has left state {job.state!r}"
    if job.kind == TIMER and instance.status == InstanceStatus.FAULTED:
        return f"instance {instance.pk} is faulted; retry or cancel the instance"
    if job.kind == TRANSITION and not job.payload.get("lockFree"):
        reservation = str(job.payload.get("reservation") or "")
        owner = instance.busy_owner
        held = instance.status == InstanceStatus.BUSY and (
            owner == reservation or owner.startswith(f"job:{job.pk}:")
        )
        if not held:
            return (
                f"instance {instance.pk} is no longer reserved for it (status "
                f"{instance.status}); send the transition again"
            )
    return ""
