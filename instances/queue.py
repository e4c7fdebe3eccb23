"""The durable job queue: enqueue in the caller's transaction, dispatch after commit, claim by
compare-and-set with a lease, complete fenced by the lease, sweep what no worker will finish.

This module knows rows, not what a job does: running a claimed job is `instances.job_handlers`.
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
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.db.models import Count, Exists, F, Min, OuterRef, Q, QuerySet, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from instances.engine.records import JobRow
from instances.engine.telemetry import with_request_id
from instances.job_dispatch import jobs_dispatch
from instances.job_table import Job
from instances.lane_lock import LANE_NUMBERING, lane_lock_key
from instances.status import JobKind, JobStatus
from vnext.conf import vnext_setting

logger = logging.getLogger("vnext.jobs")

# --- enqueue -------------------------------------------------------------------------------------


def job_enqueue(
    *,
    kind: JobKind,
    instance_id: uuid.UUID | None,
    payload: dict[str, Any],
    run_at: datetime | None = None,
    state: str = "",
    dedupe_key: str | None = None,
) -> Job:
    """Insert a job in the current transaction; it is dispatched once that transaction commits.
    The payload keeps the id of the request being served (the job's log lines repeat it)."""
    job = Job.objects.create(
        kind=kind,
        instance_id=instance_id,
        payload=with_request_id(payload),
        run_at=run_at or timezone.now(),
        state=state,
        dedupe_key=dedupe_key,
    )
    transaction.on_commit(lambda: jobs_dispatch([(job.pk, job.run_at)]))
    return job


def job_row_seed(job_id: int) -> uuid.UUID:
    """The seed a job's run derives its history row ids from: a re-run after a crash updates
    the same rows (the first hop's row is `uuid5(seed, "0")`)."""
    return uuid.uuid5(uuid.NAMESPACE_OID, f"vnext-job-{job_id}")


# --- the write lane: an instance's updateData, one after another ------------------------------


def lane_ticket(*, instance_id: uuid.UUID, payload: dict[str, Any]) -> int:
    """Accept an async updateData: insert its `update-data` job, the instance's next ticket in
    its write lane (a worker claims a ticket only when none before it is pending, `_due`).
    Returns its id. On PostgreSQL an advisory lock per instance, held by the INSERT's own
    transaction, orders the inserts, so ticket ids follow their commit order."""
    now = timezone.now()
    values: dict[str, Any] = {
        "kind": JobKind.UPDATE_DATA,
        "instance_id": instance_id,
        "payload": with_request_id(payload),
        "run_at": now,
    }
    if connection.vendor == "postgresql":
        job_id = _lane_insert(values, now)
    else:
        job_id = Job.objects.create(**values).pk  # SQLite serialises its writers anyway
    transaction.on_commit(lambda: jobs_dispatch([(job_id, now)]))
    return job_id


def _lane_insert(values: dict[str, Any], now: datetime) -> int:
    # The lock is taken by the row source before the id default is drawn, and held until the
    # statement's transaction commits.
    columns = [*values, "state", "status", "attempts", "lease_owner", "last_error"]
    columns += ["created_at", "updated_at"]
    params = [*values.values(), "", JobStatus.PENDING, 0, "", "", now, now]
    params[columns.index("payload")] = json.dumps(values["payload"], cls=DjangoJSONEncoder)
    placeholders = ", ".join(f"%s::{_job_column_type(name)}" for name in columns)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {Job._meta.db_table} ({', '.join(columns)}) SELECT {placeholders} "
            "FROM (SELECT pg_advisory_xact_lock(%s, %s)) AS lane RETURNING id",
            [*params, LANE_NUMBERING, lane_lock_key(values["instance_id"])],
        )
        inserted = cursor.fetchone()
    assert inserted is not None  # the lock's row source yields exactly one row
    return int(inserted[0])


@functools.cache
def _job_column_type(name: str) -> str:
    # The column's type, so a NULL parameter is typed too (`SELECT %s::timestamptz ...`).
    return str(Job._meta.get_field(name.removesuffix("_id")).db_type(connection))


# The instance's unfinished tickets, oldest first: on every sync updateData's path, so plain SQL
# (the ORM would spend more building it than the database answering it).
_LANE_WAITING = (
    f"SELECT id, run_at, status FROM {Job._meta.db_table} WHERE instance_id = %s "
    f"AND kind = '{JobKind.UPDATE_DATA}' AND status IN ('{JobStatus.PENDING}', "
    f"'{JobStatus.RUNNING}') ORDER BY id"
)


def lane_waiting(instance_id: uuid.UUID) -> list[int]:
    """The instance's unfinished tickets, oldest first (a lane holder runs them before its own
    update: they were accepted first)."""
    with connection.cursor() as cursor:
        cursor.execute(_LANE_WAITING, [instance_id])
        return [row[0] for row in cursor.fetchall()]


def lane_take(job_id: int) -> Job | None:
    """Claim a ticket for the lane holder: pending, or running under a claim whose worker waits
    for the lane the caller holds (or died): nobody else can apply it while the lane is held.
    A fresh claim token; None when it is finished."""
    now = timezone.now()
    taken = Job.objects.filter(pk=job_id, status__in=[JobStatus.PENDING, JobStatus.RUNNING]).update(
        status=JobStatus.RUNNING,
        attempts=F("attempts") + 1,
        lease_until=now + _lease(),
        updated_at=now,
    )
    return _with_claim_token(job_id) if taken else None


def _with_claim_token(job_id: int) -> Job:
    # The claim's token names the attempt it set: only the claim that set this attempt number
    # owns the job now (fencing).
    job = Job.objects.get(pk=job_id)
    token = f"job:{job.pk}:{job.attempts}"
    Job.objects.filter(pk=job.pk, attempts=job.attempts).update(lease_owner=token)
    job.lease_owner = token
    return job


def lane_dispatch_next(instance_id: uuid.UUID) -> None:
    """A ticket of the instance's lane finished: hand the next waiting one to the runner (its
    claim was refused while the finished one was ahead of it)."""
    with connection.cursor() as cursor:
        cursor.execute(_LANE_WAITING, [instance_id])
        following = next(
            (
                (job_id, run_at)
                for job_id, run_at, status in cursor.fetchall()
                if status == "pending"
            ),
            None,
        )
    if following is not None:
        # Inside a lane holder's transaction: handed over once it commits.
        transaction.on_commit(lambda: jobs_dispatch([following]))


def jobs_reschedule(*, instance_id: uuid.UUID, kind: JobKind, run_at: datetime) -> list[int]:
    """Move the instance's pending jobs of `kind` to `run_at`, in the caller's transaction, and
    hand them to the runner again once it commits (a message sent for the old time finds the
    job not due and leaves it). Returns the ids moved.

    Guarded by `status = 'pending'` in the UPDATE itself: a job a worker claimed meanwhile
    (running) keeps its claim and its time, and a claim racing this UPDATE re-reads `run_at`
    after it and finds the job no longer due, so the job runs once, at one of the two times."""
    pending = Job.objects.filter(instance_id=instance_id, kind=kind, status=JobStatus.PENDING)
    ids = list(pending.values_list("pk", flat=True))
    if not ids:
        return []
    Job.objects.filter(pk__in=ids, status=JobStatus.PENDING).update(
        run_at=run_at, updated_at=timezone.now()
    )
    transaction.on_commit(lambda: jobs_dispatch([(job_id, run_at) for job_id in ids]))
    return ids


# --- claim, run, complete ------------------------------------------------------------------------


def _lease() -> timedelta:
    return timedelta(seconds=float(vnext_setting("JOB_LEASE_SECONDS")))


def max_attempts() -> int:
    """`VNEXT_JOB_MAX_ATTEMPTS`: how many claims a job gets before it ends `failed`."""
    return int(vnext_setting("JOB_MAX_ATTEMPTS"))


# --- which jobs are due: one definition, used by the ORM queries and (as SQL) the raw claims ---


def _lease_expired(now: datetime) -> Q:
    return Q(status=JobStatus.RUNNING, lease_until__lt=now)


def _due(now: datetime, max_attempts: int) -> Q:
    """Claimable now: pending and due, or running past its lease with an attempt left; and an
    `update-data` ticket only at the head of its instance's write lane.

    A job whose lease expired on its last attempt is not due: its worker hung or died every
    time, so `jobs_fail_expired_leases` fails it instead of letting it be claimed forever."""
    ready = Q(status=JobStatus.PENDING, run_at__lte=now) | (
        _lease_expired(now) & Q(attempts__lt=max_attempts)
    )
    return ready & _lane_turn()


def _lane_turn() -> Q:
    # Tickets of one instance apply one after another, in id order: one waits while any ticket
    # before it is unfinished (a failed one no longer holds the lane up).
    ahead = Job.objects.filter(
        instance_id=OuterRef("instance_id"),
        kind=JobKind.UPDATE_DATA,
        pk__lt=OuterRef("pk"),
        status__in=[JobStatus.PENDING, JobStatus.RUNNING],
    )
    return ~Q(kind=JobKind.UPDATE_DATA) | ~Q(Exists(ahead))


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
    return job_sql().claim(job_id, timezone.now())


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


def jobs_claim_due(limit: int = 100) -> list[Job]:
    """Claim up to `limit` due jobs, oldest first (one statement on PostgreSQL)."""
    return job_sql().claim_due(timezone.now(), limit)


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
    job: Job,
    status: str,
    *,
    error: str = "",
    retry_at: datetime | None = None,
    give_back_attempt: bool = False,
) -> bool:
    """Record the outcome, only if this claim still holds the lease (False otherwise).
    `give_back_attempt`: this claim's attempt does not count (it waited for another job)."""
    fields: dict[str, Any] = {
        "status": status,
        "last_error": error[:2000],
        "updated_at": timezone.now(),
    }
    if give_back_attempt:
        fields["attempts"] = Greatest(F("attempts") - 1, Value(0))
    if retry_at is not None:
        fields.update(run_at=retry_at, lease_until=None)
    done = Job.objects.filter(
        pk=job.pk, status=JobStatus.RUNNING, lease_owner=job.lease_owner
    ).update(**fields)
    if done and retry_at is not None:
        jobs_dispatch([(job.pk, retry_at)])
    return bool(done)


def backoff(attempts: int) -> timedelta:
    """The wait before the next attempt: doubling from `JOB_RETRY_BASE_SECONDS`, capped at five
    minutes, with jitter."""
    base = float(vnext_setting("JOB_RETRY_BASE_SECONDS"))
    return timedelta(seconds=min(base * 2 ** max(attempts - 1, 0), 300) * random.uniform(0.8, 1.2))


def jobs_complete_succeeded(jobs: list[Job]) -> int:
    """Record many successes, each still fenced by its own claim token (one statement on
    PostgreSQL)."""
    return job_sql().complete_succeeded(jobs, timezone.now()) if jobs else 0


def jobs_due(limit: int = 100) -> list[int]:
    """Ids of jobs that should run now: pending and due, or running with an expired lease and
    an attempt left (see `_due`)."""
    due = _due(timezone.now(), max_attempts())
    return list(Job.objects.filter(due).order_by("run_at").values_list("pk", flat=True)[:limit])


def jobs_dispatch_due(limit: int = 500) -> int:
    """The periodic safety net: fail the jobs whose lease expired on their last attempt, then
    hand the runner again the due jobs whose message may be lost: those running past their
    lease, and those pending for `JOB_REDISPATCH_SECONDS` since they were last handed over.
    A pending job is dispatched when it commits; sending every pending one again on each sweep
    would flood the broker with duplicates whenever a backlog (a batch's thousands of retries)
    takes longer than a sweep to drain. Returns how many were dispatched."""
    jobs_fail_expired_leases()
    now = timezone.now()
    quiet = now - timedelta(seconds=float(vnext_setting("JOB_REDISPATCH_SECONDS")))
    lost = Q(status=JobStatus.RUNNING) | Q(updated_at__lte=quiet)
    due = list(
        Job.objects.filter(_due(now, max_attempts()) & lost)
        .order_by("run_at")
        .values_list("pk", flat=True)[:limit]
    )
    # Handed over now: not again before another quiet period.
    Job.objects.filter(pk__in=due, status=JobStatus.PENDING).update(updated_at=now)
    jobs_dispatch([(job_id, now) for job_id in due])
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
    limit = max_attempts()
    failed = job_sql().fail_exhausted(now, limit)
    for job_id, kind, instance_id, error in failed:
        logger.warning("job %s (%s) for instance %s failed: %s", job_id, kind, instance_id, error)
    return len(failed)


# Jobs that ended with nothing left to look at, and those an operator may still want (replay a
# failed one, read why one faulted its instance): each kind pruned after its own retention.
_DONE_JOBS = (JobStatus.SUCCEEDED, JobStatus.CANCELLED, JobStatus.SKIPPED)
_FAILED_JOBS = (JobStatus.FAILED, JobStatus.INSTANCE_FAULTED)


def jobs_prune_finished(
    *, older_than: timedelta | None = None, failed_older_than: timedelta | None = None
) -> int:
    """Delete succeeded, cancelled and skipped jobs older than `JOB_RETENTION_DAYS`, and failed
    and instance-faulted ones older than `FAILED_JOB_RETENTION_DAYS` (None or 0: those stay).
    Only jobs that ended: a pending or running one is never pruned. Returns how many."""
    now = timezone.now()
    age = older_than or timedelta(days=float(vnext_setting("JOB_RETENTION_DAYS")))
    pruned = Job.objects.filter(status__in=_DONE_JOBS, updated_at__lt=now - age).delete()[0]
    failed_days = vnext_setting("FAILED_JOB_RETENTION_DAYS")
    failed_age = failed_older_than or (timedelta(days=float(failed_days)) if failed_days else None)
    if failed_age is not None:
        failed = Job.objects.filter(status__in=_FAILED_JOBS, updated_at__lt=now - failed_age)
        pruned += failed.delete()[0]
    return pruned


def jobs_reclaim_space() -> bool:
    """`VACUUM (ANALYZE)` the job table on PostgreSQL, after a prune: the deleted rows' space
    goes back to the table for new jobs (not to the file system; a plain VACUUM takes no lock
    that stops writes) and the planner's statistics follow the smaller table. VACUUM cannot
    run inside a transaction: in one (or on another database) nothing is done and it answers
    False."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return False
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM (ANALYZE) {connection.ops.quote_name(Job._meta.db_table)}")
    return True


# --- what the runner, the reaper and operators ask of the job rows ------------------------------
# The reads a handler decides on, and an operator's requeue: job-row SQL stays in this module.

# Jobs that still hold (or will take over) their instance.
_LIVE_JOBS = (JobStatus.PENDING, JobStatus.RUNNING)


def job_status_get(*, job_id: int) -> str | None:
    """The job's status now, or None when it is gone."""
    return Job.objects.filter(pk=job_id).values_list("status", flat=True).first()


def job_claim_holds(*, job_id: int, lease_owner: str) -> bool:
    """The claim `lease_owner` still holds the job (running under that token)."""
    return Job.objects.filter(pk=job_id, status=JobStatus.RUNNING, lease_owner=lease_owner).exists()


def jobs_pending_list(*, instance_id: uuid.UUID, kind: JobKind | None = None) -> list[int]:
    """Ids of the instance's pending jobs (of `kind`, when given), oldest first."""
    pending = Job.objects.filter(instance_id=instance_id, status=JobStatus.PENDING)
    if kind is not None:
        pending = pending.filter(kind=kind)
    return list(pending.order_by("pk").values_list("pk", flat=True))


def jobs_relayed_list(*, origin: str) -> list[tuple[int, uuid.UUID | None]]:
    """The hand-off jobs a run on instance `origin` queued that are still live (pending and
    due, or running), oldest first, each with its instance."""
    live = Job.objects.filter(
        Q(status=JobStatus.PENDING, run_at__lte=timezone.now()) | Q(status=JobStatus.RUNNING),
        payload__origin=origin,
    ).order_by("pk")
    return list(live.values_list("pk", "instance_id"))


def job_holder_settles_at(*, instance_id: uuid.UUID, excluding: int) -> datetime | None:
    """When the instance's other live transition job should have settled (a pending one: when
    it is due; a running one: its lease's end), the latest of them; None when there is none."""
    now = timezone.now()
    live = (
        Job.objects.filter(instance_id=instance_id, kind=JobKind.TRANSITION)
        .exclude(pk=excluding)
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


def job_boundary_retry_get(*, instance_id: uuid.UUID) -> Job | None:
    """The instance's pending error-boundary retry job due first, or None."""
    return (
        Job.objects.filter(
            instance_id=instance_id, kind=JobKind.TRANSITION, status=JobStatus.PENDING
        )
        .filter(payload__has_key="boundaryRetry")
        .order_by("run_at")
        .first()
    )


def job_running_exists(*, instance_id: uuid.UUID) -> bool:
    """Some job of the instance is running."""
    return Job.objects.filter(instance_id=instance_id, status=JobStatus.RUNNING).exists()


def job_owning_exists(*, instance_id: uuid.UUID, owner: str) -> bool:
    """A live job of the instance owns its Busy `owner`: the accept's reservation it carries,
    or its claim's token."""
    return (
        Job.objects.filter(instance_id=instance_id, status__in=_LIVE_JOBS)
        .filter(Q(payload__reservation=owner) | Q(lease_owner=owner))
        .exists()
    )


def job_subflow_resume_exists(*, instance_id: uuid.UUID, child: str) -> bool:
    """A live job resumes the instance after its SubFlow child `child` (its id) ended."""
    return Job.objects.filter(
        instance_id=instance_id,
        kind=JobKind.SUBFLOW_RESUME,
        status__in=_LIVE_JOBS,
        payload__child=child,
    ).exists()


def jobs_next_run_at() -> datetime | None:
    """When the next pending job is due, but write-lane tickets (handed over when the ticket
    before them ends, not when they are due); None when none is pending."""
    return (
        Job.objects.filter(status=JobStatus.PENDING)
        .exclude(kind=JobKind.UPDATE_DATA)
        .order_by("run_at")
        .values_list("run_at", flat=True)
        .first()
    )


def job_requeue(*, job_id: int, expected: str, run_at: datetime, note: str) -> bool:
    """Put a finished job back in the queue, due at `run_at` with `note` as its last error,
    only while its status is still `expected` (False: it changed meanwhile); handed to the
    runner after commit."""
    with transaction.atomic():
        requeued = Job.objects.filter(pk=job_id, status=expected).update(
            status=JobStatus.PENDING,
            run_at=run_at,
            lease_owner="",
            lease_until=None,
            last_error=note,
            updated_at=run_at,
        )
        if requeued:
            transaction.on_commit(lambda: jobs_dispatch([(job_id, run_at)]))
    return bool(requeued)


# --- SQL dialects: one object per database vendor, chosen once ------------------------------------


class PortableJobSql:
    """Job-row statements any database runs, through the ORM."""

    def claim(self, job_id: int, now: datetime) -> Job | None:
        """The claim CAS, then the lease token in a second statement fenced by the attempt."""
        claimed = Job.objects.filter(_due(now, max_attempts()), pk=job_id).update(
            status=JobStatus.RUNNING,
            attempts=F("attempts") + 1,
            lease_until=now + _lease(),
            updated_at=now,
        )
        return _with_claim_token(job_id) if claimed else None

    def claim_due(self, now: datetime, limit: int) -> list[Job]:
        """One claim per due job."""
        claimed = (self.claim(job_id, now) for job_id in jobs_due(limit))
        return [job for job in claimed if job is not None]

    def complete_succeeded(self, jobs: list[Job], now: datetime) -> int:
        """One fenced completion per job."""
        return sum(job_complete(job, JobStatus.SUCCEEDED) for job in jobs)

    def fail_exhausted(self, now: datetime, limit: int) -> list[tuple[int, str, Any, str]]:
        """Fail each job whose lease expired on its last attempt, one fenced update each (the
        ORM cannot UPDATE ... RETURNING); `(id, kind, instance_id, error)` of each."""
        exhausted = _lease_exhausted(now, limit)
        failed = []
        candidates = Job.objects.filter(exhausted).values_list(
            "pk", "kind", "instance_id", "attempts"
        )
        for job_id, kind, instance_id, attempts in candidates:
            error = _LEASE_EXPIRED.format(attempts=attempts, max_attempts=limit)
            if Job.objects.filter(exhausted, pk=job_id).update(
                status=JobStatus.FAILED, last_error=error, updated_at=now
            ):
                failed.append((job_id, kind, instance_id, error))
        return failed


class PostgresJobSql(PortableJobSql):
    """The same statements as single round trips on PostgreSQL."""

    def claim(self, job_id: int, now: datetime) -> Job | None:
        """The claim CAS, the new attempt and its lease token in one statement."""
        due, due_params = _sql(_due, now, max_attempts())
        with connection.cursor() as cursor:
            cursor.execute(
                f"{_CLAIM_SET} WHERE id = %s AND {due} {_CLAIMED}",
                [now + _lease(), now, job_id, *due_params],
            )
            row = cursor.fetchone()
        return _claimed(row, now) if row else None

    def claim_due(self, now: datetime, limit: int) -> list[Job]:
        """One statement. No row locks are taken: two claimers may pick the same ids, and the
        due re-check in the outer WHERE lets exactly one of them have each job."""
        due, due_params = _sql(_due, now, max_attempts())
        with connection.cursor() as cursor:
            cursor.execute(
                f"{_CLAIM_SET} WHERE id IN (SELECT id FROM {Job._meta.db_table} WHERE {due} "
                f"ORDER BY run_at LIMIT %s) AND {due} {_CLAIMED}",
                [now + _lease(), now, *due_params, limit, *due_params],
            )
            rows = cursor.fetchall()
        jobs = [_claimed(row, now) for row in rows]
        return sorted(jobs, key=lambda job: job.run_at)

    def complete_succeeded(self, jobs: list[Job], now: datetime) -> int:
        """One UPDATE for the batch, each row fenced by its own token."""
        rows = ", ".join(["(%s, %s)"] * len(jobs))
        params: list[Any] = [now]
        for job in jobs:
            params += [job.pk, job.lease_owner]
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Job._meta.db_table} AS job SET status = 'succeeded', last_error = '', "
                f"updated_at = %s FROM (VALUES {rows}) AS done(id, token) "
                "WHERE job.id = done.id AND job.status = 'running' "
                "AND job.lease_owner = done.token",
                params,
            )
            return cursor.rowcount

    def fail_exhausted(self, now: datetime, limit: int) -> list[tuple[int, str, Any, str]]:
        """One UPDATE ... RETURNING, fenced by the condition it selects on."""
        where, params = _sql(_lease_exhausted, now, limit)
        before, _, after = _LEASE_EXPIRED.partition("{attempts}")
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Job._meta.db_table} SET status = 'failed', "
                "last_error = concat(%s::text, attempts, %s::text), updated_at = %s "
                f"WHERE {where} RETURNING id, kind, instance_id, last_error",
                [before, after.format(max_attempts=limit), now, *params],
            )
            return list(cursor.fetchall())


@functools.cache
def _job_sql_for(vendor: str) -> PortableJobSql:
    return PostgresJobSql() if vendor == "postgresql" else PortableJobSql()


def job_sql() -> PortableJobSql:
    """The job-row SQL dialect of the default database, chosen once per vendor."""
    return _job_sql_for(connection.vendor)


def long_poll_fallback_cancel(*, instance_id: uuid.UUID, token: str) -> int:
    """Cancel the pending fallback job of the long-poll pause `token` (its acknowledgement came
    first). Guarded by `pending`: a fallback already claimed runs and finds the pause gone.
    Returns how many rows changed."""
    return Job.objects.filter(
        instance_id=instance_id,
        kind=JobKind.LONG_POLL_FALLBACK,
        status=JobStatus.PENDING,
        payload__token=token,
    ).update(status=JobStatus.CANCELLED, updated_at=timezone.now())


# --- the job rows of the store's hop, the events, the archive and the operators' pages ----------
# The import contract lets only this module import the job table; the store's pieces run inside
# the store's own transaction.


def jobs_create(*, instance_id: uuid.UUID, jobs: Sequence[JobRow]) -> None:
    """Insert a hop's jobs (one INSERT); handed to the runner once (if) the caller commits."""
    created = Job.objects.bulk_create(Job(instance_id=instance_id, **vars(job)) for job in jobs)
    due = [(job.pk, job.run_at) for job in created]
    transaction.on_commit(lambda: jobs_dispatch(due))


def jobs_timers_cancel(*, instance_id: uuid.UUID, states: Collection[str] | None = None) -> None:
    """Cancel the instance's pending (or held) timers and timeout, or (`states`) those states'
    timers."""
    timers = Job.objects.filter(
        instance_id=instance_id, status__in=(JobStatus.PENDING, JobStatus.HELD)
    )
    if states is None:
        timers = timers.filter(kind__in=(JobKind.TIMER, JobKind.TIMEOUT))
    else:
        timers = timers.filter(kind=JobKind.TIMER, state__in=states)
    timers.update(status=JobStatus.CANCELLED, updated_at=timezone.now())


# For the store's raw statements on PostgreSQL, which write or read job rows in the same
# statement as the instance row. The insert of an accepted request's transition job, from the
# row a `reserved` CTE returns (its `id`; parameters `kind`, `payload`, `now`):
RESERVED_JOB_INSERT_SQL = f"""
INSERT INTO {Job._meta.db_table} (kind, instance_id, state, payload, run_at, status, attempts,
                                  lease_owner, last_error, created_at, updated_at)
SELECT %(kind)s, id, '', %(payload)s::jsonb, %(now)s, 'pending', 0, '', '', %(now)s, %(now)s
FROM reserved
RETURNING id, run_at
"""
# `jobs_timers_cancel` as a CTE part, for the instance an `updated` CTE returns: its pending
# timers and timeout (`TIMERS_CANCEL_ALL_SQL`), or the timers of the states in `%(timer_states)s`.
_TIMERS_CANCEL = (
    f"UPDATE {Job._meta.db_table} SET status = '{JobStatus.CANCELLED}', updated_at = %(now)s "
    f"WHERE instance_id = (SELECT id FROM updated) "
    f"AND status IN ('{JobStatus.PENDING}', '{JobStatus.HELD}') AND "
)
TIMERS_CANCEL_ALL_SQL = f"{_TIMERS_CANCEL}kind IN ('{JobKind.TIMER}', '{JobKind.TIMEOUT}')"
TIMERS_CANCEL_OF_STATES_SQL = (
    f"{_TIMERS_CANCEL}kind = '{JobKind.TIMER}' AND state = ANY(%(timer_states)s)"
)


def jobs_insert_part(jobs: Sequence[JobRow], params: dict[str, Any]) -> str:
    """`jobs_create` as a CTE part named `jobs`, for the instance an `updated` CTE returns (no
    row: no job), returning `id, run_at`; its parameters go in `params` (`%(now)s` is the
    caller's). The caller hands the returned rows to `jobs_dispatch_after_commit`."""
    selects = []
    for index, job in enumerate(jobs):
        params.update(
            {
                f"j{index}_kind": job.kind,
                f"j{index}_state": job.state,
                f"j{index}_payload": json.dumps(job.payload, cls=DjangoJSONEncoder),
                f"j{index}_run_at": job.run_at,
                f"j{index}_dedupe_key": job.dedupe_key,
            }
        )
        selects.append(
            f"SELECT %(j{index}_kind)s::{_job_column_type('kind')}, id, "
            f"%(j{index}_state)s::{_job_column_type('state')}, %(j{index}_payload)s::jsonb, "
            f"%(j{index}_run_at)s::timestamptz, '{JobStatus.PENDING}', 0, '', '', "
            f"%(j{index}_dedupe_key)s::{_job_column_type('dedupe_key')}, %(now)s, %(now)s "
            "FROM updated"
        )
    return (
        f"jobs AS (INSERT INTO {Job._meta.db_table} (kind, instance_id, state, payload, run_at, "
        "status, attempts, lease_owner, last_error, dedupe_key, created_at, updated_at) "
        f"{' UNION ALL '.join(selects)} RETURNING id, run_at)"
    )


# What a statement with a `jobs` part selects of it: `[[id, run_at], ...]` as JSON.
JOBS_INSERTED_SQL = "(SELECT COALESCE(json_agg(json_build_array(id, run_at)), '[]') FROM jobs)"


def jobs_dispatch_after_commit(inserted: Sequence[Sequence[Any]]) -> None:
    """Hand the jobs a `jobs_insert_part` inserted (`JOBS_INSERTED_SQL`) to the runner once (if)
    the caller commits."""
    due = [(int(job_id), datetime.fromisoformat(run_at)) for job_id, run_at in inserted]
    if due:
        transaction.on_commit(lambda: jobs_dispatch(due))


# The ids of the write lane's unfinished tickets of the instance aliased `i`, oldest first.
LANE_TICKET_IDS_SQL = (
    f"ARRAY(SELECT j.id FROM {Job._meta.db_table} j "
    f"WHERE j.instance_id = i.id AND j.kind = '{JobKind.UPDATE_DATA}' "
    f"AND j.status IN ('{JobStatus.PENDING}', '{JobStatus.RUNNING}') ORDER BY j.id)"
)


def job_event_receipt_create(*, dedupe_key: str, payload: dict[str, Any]) -> None:
    """Insert an event's receipt in a savepoint (`IntegrityError`: its `dedupe_key` is taken)."""
    with transaction.atomic():
        Job.objects.create(
            kind=JobKind.EVENT_RECEIPT,
            instance_id=None,
            status=JobStatus.SUCCEEDED,
            dedupe_key=dedupe_key,
            payload=payload,
        )


def job_claimed_payload_update(*, job: Job, payload: dict[str, Any]) -> bool:
    """Replace the job's payload, only while this claim still holds it (False otherwise)."""
    claimed = Job.objects.filter(pk=job.pk, status=JobStatus.RUNNING, lease_owner=job.lease_owner)
    return bool(claimed.update(payload=payload, updated_at=timezone.now()))


def job_timeout_pending_get(*, instance_id: uuid.UUID) -> Job | None:
    """The instance's pending workflow-timeout job (its due time and payload), or None."""
    return Job.objects.filter(
        instance_id=instance_id, kind=JobKind.TIMEOUT, status=JobStatus.PENDING
    ).first()


def jobs_timers_list(*, instance_id: uuid.UUID) -> list[Job]:
    """The instance's pending timers, soonest first."""
    timers = Job.objects.filter(
        instance_id=instance_id, kind=JobKind.TIMER, status=JobStatus.PENDING
    )
    return list(timers.order_by("run_at"))


def jobs_live_list(*, instance_id: Any) -> QuerySet[Job]:
    """The instance's pending and running jobs (`instance_id` may be an `OuterRef`)."""
    return Job.objects.filter(instance_id=instance_id, status__in=_LIVE_JOBS)


def jobs_of_instance_list(
    *, instance_id: uuid.UUID, statuses: Sequence[str], limit: int
) -> list[Job]:
    """The instance's jobs in `statuses`, soonest due first, at most `limit`."""
    found = Job.objects.filter(instance_id=instance_id, status__in=statuses).order_by("run_at")
    return list(found[:limit])


def jobs_list(
    *,
    ids: Sequence[int] = (),
    instance_id: str | None = None,
    kind: str | None = None,
    status: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[Job]:
    """The jobs of these ids, instance, kind, status, created in [since, until), oldest first."""
    wanted: dict[str, Any] = {"pk__in": ids, "instance_id": instance_id, "kind": kind}
    wanted.update(status=status, created_at__gte=since, created_at__lt=until)
    jobs = Job.objects.all()
    for lookup, value in wanted.items():  # one filter each, in this order (the WHERE's order)
        jobs = jobs.filter(**{lookup: value}) if value else jobs
    return jobs.order_by("created_at", "pk")


def jobs_tally_list(
    *, statuses: Sequence[str], by: Sequence[str], oldest: bool = False
) -> list[tuple[Any, ...]]:
    """Rows `(*by, count[, oldest run_at])`: the jobs in `statuses` counted per `by` columns."""
    figures: dict[str, Any] = {"n": Count("id")}
    if oldest:
        figures["oldest"] = Min("run_at")
    rows = Job.objects.filter(status__in=statuses).values_list(*by).annotate(**figures)
    return list(rows.order_by(*by))


def jobs_count(*, status: str) -> int:
    """How many jobs have `status`."""
    return Job.objects.filter(status=status).count()


# The archive: an archived instance's job rows leave with it and come back on restore.
def jobs_archived_list(*, instance_ids: list[Any]) -> list[dict[str, Any]]:
    """Every job row of the instances, as column values, in id order."""
    found = Job.objects.filter(instance_id__in=instance_ids).order_by("pk").values()
    return [dict(row) for row in found]


def jobs_archived_delete(*, instance_ids: list[Any]) -> None:
    """Delete every job row of the instances in one raw DELETE (nothing refers to a job row)."""
    jobs = Job.objects.filter(instance_id__in=instance_ids)
    jobs._raw_delete(jobs.db)


def jobs_restore(*, jobs: list[Job]) -> None:
    """Insert restored job rows as they were archived (their ids and statuses kept)."""
    Job.objects.bulk_create(jobs)


# --- suspended instances and migrations (instances/repair.py) ------------------------------------

# What waits while its instance is suspended: what would move it on its own. Notifications of
# what already happened still go out, and a subflow-end job still cancels its child (a cancel
# runs on a suspended instance). Jobs that need a Busy instance cannot be pending for a
# suspended one: only an Active instance is suspended.
HELD_KINDS = (JobKind.TIMER, JobKind.TIMEOUT, JobKind.AUTOMATIC)


def jobs_hold(*, instance_id: uuid.UUID) -> int:
    """Hold the instance's pending jobs of `HELD_KINDS` (it is being suspended); how many."""
    return Job.objects.filter(
        instance_id=instance_id, status=JobStatus.PENDING, kind__in=HELD_KINDS
    ).update(status=JobStatus.HELD, updated_at=timezone.now())


def job_hold(job: Job) -> bool:
    """Hold a claimed job whose instance turned out suspended: it keeps its due time and runs
    when the instance resumes (False: this claim no longer holds it)."""
    return bool(
        Job.objects.filter(pk=job.pk, status=JobStatus.RUNNING, lease_owner=job.lease_owner).update(
            status=JobStatus.HELD, lease_until=None, updated_at=timezone.now()
        )
    )


def jobs_release(*, instance_id: uuid.UUID) -> int:
    """The instance resumed: its held jobs are pending again, each at its own due time (one
    whose time passed meanwhile runs now); handed to the runner once the caller commits."""
    held = Job.objects.filter(instance_id=instance_id, status=JobStatus.HELD)
    due = list(held.values_list("pk", "run_at"))
    released = held.update(status=JobStatus.PENDING, updated_at=timezone.now())
    if due:
        transaction.on_commit(lambda: jobs_dispatch(due))
    return released


def jobs_held_count(*, instance_id: uuid.UUID) -> int:
    """How many of the instance's jobs wait for it to resume."""
    return Job.objects.filter(instance_id=instance_id, status=JobStatus.HELD).count()


def jobs_armed_timers(*, instance_id: uuid.UUID) -> list[Job]:
    """The instance's armed timers and workflow timeout, pending or held, soonest first."""
    return list(
        Job.objects.filter(
            instance_id=instance_id,
            kind__in=(JobKind.TIMER, JobKind.TIMEOUT),
            status__in=(JobStatus.PENDING, JobStatus.HELD),
        ).order_by("run_at", "pk")
    )


def jobs_cancel(*, job_ids: Collection[int]) -> int:
    """Cancel these jobs if they are still pending or held."""
    return Job.objects.filter(
        pk__in=list(job_ids), status__in=(JobStatus.PENDING, JobStatus.HELD)
    ).update(status=JobStatus.CANCELLED, updated_at=timezone.now())


def job_timer_retarget(*, job_id: int, state: str, payload: dict[str, Any]) -> int:
    """Point an armed timer at the state (and its payload at the transition) it belongs to in
    a migrated instance's new version; its due time is kept."""
    return Job.objects.filter(pk=job_id, status__in=(JobStatus.PENDING, JobStatus.HELD)).update(
        state=state, payload=payload, updated_at=timezone.now()
    )


# --- batches (instances/batches.py) ---------------------------------------------------------------


def job_batch_enqueue(*, batch_id: uuid.UUID) -> None:
    """The job that works a batch off, chunk by chunk (one per batch: its dedupe key)."""
    job_enqueue(
        kind=JobKind.BATCH,
        instance_id=None,
        payload={"batch": str(batch_id)},
        dedupe_key=f"batch:{batch_id}",
    )
