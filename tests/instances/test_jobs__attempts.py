"""A job's attempts are counted at the claim, so a job whose worker hangs or dies on every
attempt ends: once its lease expires on the last attempt (`VNEXT_JOB_MAX_ATTEMPTS`) it is no
longer due, no claim takes it, and the periodic sweep fails it, fenced so that it never fails a
job another worker has just re-claimed. Rows are checked in PostgreSQL."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from instances.job_handlers import jobs_run_due
from instances.job_table import Job
from instances.queue import (
    job_claim,
    job_complete,
    jobs_claim_due,
    jobs_dispatch_due,
    jobs_due,
    jobs_fail_expired_leases,
)
from instances.runner import EmbeddedJobRunner
from tests.instances.workflows import ping_pong, publish
from vnext.conf import vnext_setting

pytestmark = pytest.mark.postgres
BASE = "/api/v1/core/workflows/ping-pong/instances"


def max_attempts() -> int:
    return int(vnext_setting("JOB_MAX_ATTEMPTS"))


def lease_expired_error(attempts: int) -> str:
    return f"lease expired on attempt {attempts} of {max_attempts()}: the worker hung or died"


def expire_lease(job_id: int) -> None:
    """What the clock does to a worker that hung or died: its lease runs out."""
    Job.objects.filter(pk=job_id).update(lease_until=timezone.now() - timedelta(seconds=1))


def hang(job_id: int, times: int) -> Job:
    """Claim the job `times` times, each claim's worker hanging until its lease expires."""
    claim = None
    for _ in range(times):
        claim = job_claim(job_id)
        assert claim is not None
        expire_lease(job_id)
    assert claim is not None
    return claim


def new_job() -> Job:
    return Job.objects.create(kind="timer", payload={"transition": "noop"})


def run_embedded_sweep() -> None:
    runner = EmbeddedJobRunner(threads=1)  # never started: only its periodic sweep runs
    try:
        runner._sweep_if_due()
    finally:
        runner.pool.shutdown()


SWEEPS: dict[str, Callable[[], Any]] = {
    "celery beat (jobs_dispatch_due)": jobs_dispatch_due,
    "embedded runner": run_embedded_sweep,
    "jobs_run command (jobs_run_due)": jobs_run_due,
}


@pytest.mark.django_db
@pytest.mark.parametrize("sweep", SWEEPS.values(), ids=SWEEPS.keys())
def test_a_job_that_hangs_on_every_attempt_is_failed_by_the_sweep_and_never_claimed_again(
    operator_client, sweep, caplog
):
    publish(ping_pong())
    accepted = operator_client.post(f"{BASE}/start", {}, format="json")
    assert accepted.status_code == 202, accepted.json()
    instance_id = accepted.json()["id"]
    job_id = Job.objects.get(instance_id=instance_id).pk
    last_claim = hang(job_id, max_attempts())

    # Exhausted: not due, and neither claim path takes it (attempts stay where they were).
    assert job_id not in jobs_due()
    assert job_claim(job_id) is None
    assert jobs_claim_due() == []
    job = Job.objects.get(pk=job_id)
    assert (job.status, job.attempts) == ("running", max_attempts())

    with caplog.at_level(logging.WARNING, logger="vnext.jobs"):
        sweep()
    job.refresh_from_db()
    assert (job.status, job.attempts, job.last_error) == (
        "failed",
        max_attempts(),
        lease_expired_error(max_attempts()),
    )
    [warning] = [
        record.getMessage()
        for record in caplog.records
        if record.name == "vnext.jobs" and record.levelno == logging.WARNING
    ]
    assert warning == (
        f"job {job_id} (transition) for instance {instance_id} failed: "
        f"{lease_expired_error(max_attempts())}"
    )

    # Failed for good: no claim, no second failure, and the hung worker cannot complete it.
    assert job_claim(job_id) is None
    assert jobs_claim_due() == []
    assert jobs_fail_expired_leases() == 0
    assert job_complete(last_claim, "succeeded") is False
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("failed", max_attempts())


@pytest.mark.django_db
def test_jobs_run_due_counts_the_jobs_its_sweep_failed():
    exhausted, pending = new_job(), new_job()
    hang(exhausted.pk, max_attempts())
    # The exhausted job is failed by the sweep; the pending one (a timer of no instance) runs
    # and is skipped: it has nothing to act on.
    assert jobs_run_due() == {"failed": 1, "skipped": 1}
    assert Job.objects.get(pk=exhausted.pk).status == "failed"
    assert Job.objects.get(pk=pending.pk).status == "skipped"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "claim", [job_claim, lambda job_id: jobs_claim_due()[0]], ids=["job_claim", "jobs_claim_due"]
)
def test_an_expired_lease_with_attempts_left_is_reclaimed_not_failed(claim):
    job = new_job()
    hang(job.pk, max_attempts() - 1)
    assert job.pk in jobs_due()
    assert jobs_fail_expired_leases() == 0

    taken = claim(job.pk)
    assert (taken.pk, taken.attempts) == (job.pk, max_attempts())
    job.refresh_from_db()
    assert (job.status, job.attempts, job.lease_owner) == (
        "running",
        max_attempts(),
        f"job:{job.pk}:{max_attempts()}",
    )
    assert job.lease_until is not None
    assert job.lease_until > timezone.now()
    # The fresh lease of the last attempt is not failed by the sweep either.
    assert jobs_fail_expired_leases() == 0
    assert Job.objects.get(pk=job.pk).status == "running"


@pytest.mark.django_db
def test_a_last_attempt_whose_lease_has_not_expired_is_left_to_its_worker():
    job = new_job()
    hang(job.pk, max_attempts() - 1)
    last = job_claim(job.pk)
    assert last is not None
    assert last.attempts == max_attempts()

    assert jobs_fail_expired_leases() == 0
    assert jobs_dispatch_due() == 0
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.last_error) == ("running", max_attempts(), "")
    assert job_claim(job.pk) is None  # still its worker's
    assert job_complete(last, "succeeded") is True  # and the worker may still finish it
    assert Job.objects.get(pk=job.pk).status == "succeeded"


# --- real concurrency --------------------------------------------------------------------------


def race(actions: list[Callable[[], Any]]) -> list[Any]:
    """Run the actions at once, each on its own thread and database connection."""
    barrier = threading.Barrier(len(actions))
    results: list[Any] = [None] * len(actions)

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[index] = actions[index]()
        except BaseException as exc:  # reported by the assertions below
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(actions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert not [r for r in results if isinstance(r, BaseException)], results
    return results


def claim_each(ids: list[int]) -> Callable[[], list[int]]:
    return lambda: [job.pk for job in map(job_claim, ids) if job is not None]


def claim_batch() -> list[int]:
    return [job.pk for job in jobs_claim_due(limit=1000)]


RACERS = 6  # two sweepers, two single claimers (in opposite orders), two batch claimers
JOBS = 20


def racers(ids: list[int]) -> list[Callable[[], Any]]:
    return [
        jobs_fail_expired_leases,
        jobs_fail_expired_leases,
        claim_each(ids),
        claim_each(ids[::-1]),
        claim_batch,
        claim_batch,
    ]


@pytest.mark.concurrency
@pytest.mark.django_db(transaction=True)
def test_sweepers_and_claimers_racing_on_exhausted_jobs_fail_each_exactly_once():
    ids = [new_job().pk for _ in range(JOBS)]
    for job_id in ids:
        hang(job_id, max_attempts())

    results = race(racers(ids))
    failed_by_sweeps, claims = results[:2], results[2:]
    assert sum(failed_by_sweeps) == JOBS  # each job failed by exactly one sweep
    assert claims == [[]] * (RACERS - 2)  # and claimed by nobody
    rows = Job.objects.filter(pk__in=ids)
    assert {(row.status, row.attempts, row.last_error) for row in rows} == {
        ("failed", max_attempts(), lease_expired_error(max_attempts()))
    }


@pytest.mark.concurrency
@pytest.mark.django_db(transaction=True)
def test_sweepers_racing_claimers_on_a_last_attempt_never_fail_the_claimed_job():
    ids = [new_job().pk for _ in range(JOBS)]
    for job_id in ids:
        hang(job_id, max_attempts() - 1)

    results = race(racers(ids))
    failed_by_sweeps, claims = results[:2], results[2:]
    assert failed_by_sweeps == [0, 0]
    claimed = [job_id for claim in claims for job_id in claim]
    assert sorted(claimed) == sorted(ids)  # each job claimed exactly once, for its last attempt
    now = timezone.now()
    for row in Job.objects.filter(pk__in=ids):
        assert (row.status, row.attempts, row.last_error) == ("running", max_attempts(), "")
        assert row.lease_owner == f"job:{row.pk}:{max_attempts()}"
        assert row.lease_until is not None
        assert row.lease_until > now
