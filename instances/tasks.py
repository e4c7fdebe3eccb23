"""Celery tasks: thin shells around the job services. Idempotent: a duplicate delivery of a job
finds it claimed (or finished) and returns."""

from __future__ import annotations

from celery import shared_task

from instances.archive import instances_archive
from instances.counts import instance_counts_fold
from instances.job_dispatch import JOB_RUN_TASK
from instances.job_handlers import job_run
from instances.queue import jobs_dispatch_due, jobs_prune_finished
from instances.reaper import instances_reap_stranded_busy
from locks.services import locks_sweep_expired
from vnext.conf import vnext_setting


@shared_task(name=JOB_RUN_TASK, ignore_result=True, acks_late=True)
def job_run_task(job_id: int) -> str:
    """Run one job (claim by CAS; nothing happens if another delivery already has it)."""
    return job_run(job_id)


@shared_task(name="vnext.jobs_dispatch_due", ignore_result=True)
def jobs_dispatch_due_task() -> int:
    """Safety net: fail jobs whose lease expired on their last attempt, then re-send every due
    job (timers whose message was lost, expired leases with attempts left)."""
    return jobs_dispatch_due()


@shared_task(name="vnext.instances_reap_stranded_busy", ignore_result=True)
def instances_reap_stranded_busy_task() -> int:
    """Fault instances left Busy by an owner that is gone."""
    return instances_reap_stranded_busy()


@shared_task(name="vnext.locks_sweep_expired", ignore_result=True)
def locks_sweep_expired_task() -> int:
    """Delete resource locks whose TTL has passed."""
    return locks_sweep_expired()


@shared_task(name="vnext.jobs_prune_finished", ignore_result=True)
def jobs_prune_finished_task() -> int:
    """Delete old succeeded, cancelled and skipped jobs, and older failed ones."""
    return jobs_prune_finished()


@shared_task(name="vnext.instances_archive", ignore_result=True)
def instances_archive_task() -> int:
    """Archive completed instances past their retention (at most `ARCHIVE_RUN_LIMIT` a run;
    the next run goes on). Nothing happens while no retention is set."""
    return instances_archive(limit=int(vnext_setting("ARCHIVE_RUN_LIMIT"))).archived


@shared_task(name="vnext.instance_counts_fold", ignore_result=True)
def instance_counts_fold_task() -> int:
    """Add the instance-count deltas the triggers appended into the totals."""
    return instance_counts_fold()
