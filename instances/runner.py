"""The embedded job runner (`make run`): the same job runner as the Celery workers, in-process.

One thread waits for the next due job (woken early when a job is committed), hands due jobs to
a small thread pool, and runs the periodic sweeps itself; no broker is needed.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from django.db import close_old_connections, connections
from django.utils import timezone

from instances.models import Job
from instances.status import JobStatus
from vnext.conf import vnext_setting

logger = logging.getLogger("vnext.runner")

_runner: EmbeddedJobRunner | None = None
SWEEP_EVERY_SECONDS = 30.0
IDLE_POLL_SECONDS = 5.0


class EmbeddedJobRunner(threading.Thread):
    """Runs due jobs on a thread pool until `stop()`."""

    def __init__(self, threads: int | None = None) -> None:
        super().__init__(name="vnext-job-runner", daemon=True)
        self.pool = ThreadPoolExecutor(
            max_workers=threads or int(vnext_setting("EMBEDDED_RUNNER_THREADS")),
            thread_name_prefix="vnext-job",
        )
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.in_flight: set[int] = set()
        self._lock = threading.Lock()
        self._next_sweep = 0.0

    def stop(self) -> None:
        """Finish running jobs, then stop (closing the pool threads' connections)."""
        self.stopping.set()
        self.wake.set()
        self.join(timeout=10)
        for _ in range(self.pool._max_workers):
            self.pool.submit(connections.close_all)
        self.pool.shutdown(wait=True, cancel_futures=True)

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                close_old_connections()
                self._sweep_if_due()
                for job_id in self._due():
                    self._submit(job_id)
                wait = self._seconds_to_next()
            except Exception:  # keep the runner alive; the next round retries
                logger.exception("embedded job runner round failed")
                wait = 1.0
            self.wake.wait(timeout=wait)
            self.wake.clear()
        connections.close_all()

    def _due(self) -> list[int]:
        from instances.jobs import jobs_due

        with self._lock:
            busy = set(self.in_flight)
        return [job_id for job_id in jobs_due(200) if job_id not in busy]

    def _submit(self, job_id: int) -> None:
        with self._lock:
            self.in_flight.add(job_id)
        self.pool.submit(self._run_one, job_id)

    def _run_one(self, job_id: int) -> None:
        from instances.jobs import job_run

        # Pool threads keep their connection between jobs; a broken or expired one is replaced.
        close_old_connections()
        try:
            job_run(job_id)
        except Exception:
            logger.exception("job %s crashed the runner thread", job_id)
        finally:
            with self._lock:
                self.in_flight.discard(job_id)
            self.wake.set()  # the next due job may be waiting for a free thread

    def _seconds_to_next(self) -> float:
        upcoming = (
            Job.objects.filter(status=JobStatus.PENDING)
            .order_by("run_at")
            .values_list("run_at", flat=True)
            .first()
        )
        if upcoming is None:
            return IDLE_POLL_SECONDS
        return max(0.0, min((upcoming - timezone.now()).total_seconds(), IDLE_POLL_SECONDS))

    def _sweep_if_due(self) -> None:
        if time.monotonic() < self._next_sweep:
            return
        self._next_sweep = time.monotonic() + SWEEP_EVERY_SECONDS
        from instances.jobs import instances_reap_stranded_busy, jobs_prune_finished
        from locks.services import locks_sweep_expired

        instances_reap_stranded_busy()
        locks_sweep_expired()
        jobs_prune_finished()


def start_embedded_runner() -> EmbeddedJobRunner:
    """Start the process's runner (once)."""
    global _runner
    if _runner is None or not _runner.is_alive():
        _runner = EmbeddedJobRunner()
        _runner.start()
    return _runner


def stop_embedded_runner() -> None:
    """Stop the process's runner, if any."""
    global _runner
    if _runner is not None:
        _runner.stop()
        _runner = None


def wake_embedded_runner(run_at: datetime | None = None) -> None:
    """A job was committed: let the runner look now (it sleeps until the earliest due job)."""
    if _runner is not None:
        _runner.wake.set()
