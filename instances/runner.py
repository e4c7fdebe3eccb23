"""The embedded job runner (`make run`): the same job runner as the Celery workers, in-process.

One thread waits for the next due job (woken early when a job is committed), hands due jobs to
a small thread pool, and runs the periodic sweeps itself; no broker is needed.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from django.db import connections
from django.utils import timezone

from instances.counts import instance_counts_fold
from instances.job_dispatch import register_waker
from instances.job_handlers import job_execute
from instances.queue import (
    jobs_claim_due,
    jobs_complete_succeeded,
    jobs_fail_expired_leases,
    jobs_next_run_at,
    jobs_prune_finished,
)
from instances.reaper import instances_reap_stranded_busy
from locks.services import locks_sweep_expired
from vnext.conf import vnext_setting

if TYPE_CHECKING:
    from instances.job_table import Job

logger = logging.getLogger("vnext.runner")

_runner: EmbeddedJobRunner | None = None
SWEEP_EVERY_SECONDS = 30.0
IDLE_POLL_SECONDS = 5.0


class EmbeddedJobRunner(threading.Thread):
    """Runs due jobs on a thread pool until `stop()`."""

    def __init__(self, threads: int | None = None) -> None:
        super().__init__(name="vnext-job-runner", daemon=True)
        workers = threads or int(vnext_setting("EMBEDDED_RUNNER_THREADS"))
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vnext-job")
        # Claimed jobs queue briefly for a thread; a few per thread keeps every thread fed.
        self.capacity = workers * 8
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.in_flight: set[int] = set()
        self.succeeded: list[Job] = []
        self._lock = threading.Lock()
        self._next_sweep = 0.0

    def stop(self) -> None:
        """Finish running jobs, record their outcomes, then stop."""
        self.stopping.set()
        self.wake.set()
        self.join(timeout=10)
        self.pool.shutdown(wait=True)
        self._record_successes()
        connections.close_all()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self._sweep_if_due()
                self._record_successes()
                self._claim_and_submit()
                wait = self._seconds_to_next()
            except Exception:  # keep the runner alive; the next round retries on a new connection
                logger.exception("embedded job runner round failed")
                connections.close_all()
                wait = 1.0
            self.wake.wait(timeout=wait)
            self.wake.clear()
        connections.close_all()

    def _record_successes(self) -> None:
        with self._lock:
            done, self.succeeded = self.succeeded, []
        # One statement records a batch of successes, each fenced by its claim token.
        jobs_complete_succeeded(done)

    def _claim_and_submit(self) -> None:
        with self._lock:
            free = self.capacity - len(self.in_flight)
        if free <= 0:
            return
        # One statement claims a batch; each claimed job is then run by a pool thread.
        for job in jobs_claim_due(limit=free):
            with self._lock:
                self.in_flight.add(int(job.pk))
            self.pool.submit(self._run_one, job)

    def _run_one(self, job: Job) -> None:
        # Pool threads keep their connection between jobs (close_old_connections would close
        # it every time with CONN_MAX_AGE=0); after an error it is replaced.
        try:
            if job_execute(job, record_success=False) == "succeeded":
                with self._lock:
                    self.succeeded.append(job)
        except Exception:
            logger.exception("job %s crashed the runner thread", job.pk)
            connections.close_all()
        finally:
            with self._lock:
                self.in_flight.discard(int(job.pk))
            self.wake.set()  # a thread is free: the next due jobs may be waiting for it

    def _seconds_to_next(self) -> float:
        # Write-lane tickets are handed over when the ticket before them ends (a due one may
        # be waiting its turn): they are no reason to wake up.
        upcoming = jobs_next_run_at()
        if upcoming is None:
            return IDLE_POLL_SECONDS
        return max(0.0, min((upcoming - timezone.now()).total_seconds(), IDLE_POLL_SECONDS))

    def _sweep_if_due(self) -> None:
        if time.monotonic() < self._next_sweep:
            return
        self._next_sweep = time.monotonic() + SWEEP_EVERY_SECONDS
        # A job whose lease expired on its last attempt is never claimed again: fail it here.
        jobs_fail_expired_leases()
        instances_reap_stranded_busy()
        locks_sweep_expired()
        jobs_prune_finished()
        instance_counts_fold()


def start_embedded_runner() -> EmbeddedJobRunner:
    """Start the process's runner (once)."""
    global _runner
    if _runner is None or not _runner.is_alive():
        _runner = EmbeddedJobRunner()
        _runner.start()
        register_waker(wake_embedded_runner)
    return _runner


def stop_embedded_runner() -> None:
    """Stop the process's runner, if any."""
    global _runner
    if _runner is not None:
        _runner.stop()
        _runner = None


def wake_embedded_runner() -> None:
    """A job was committed: let the runner look now (it sleeps until the earliest due job)."""
    if _runner is not None:
        _runner.wake.set()
