"""Handing committed jobs to the runner: a Celery message per job, or a wake-up of the embedded
runner when no broker is used. Rows are not read here: a lost message is harmless, the due-jobs
sweep (`instances.queue.jobs_dispatch_due`) finds the row."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from vnext.celery import app as celery_app
from vnext.conf import vnext_setting

logger = logging.getLogger("vnext.jobs")

# The Celery task that runs one job (`instances.tasks.job_run_task`), sent by name.
JOB_RUN_TASK = "vnext.job_run"
# Called after commit when jobs are due and no broker is used (the embedded runner registers).
_wakers: list[Callable[[], None]] = []


def register_waker(wake: Callable[[], None]) -> None:
    """Have `wake()` called whenever jobs are dispatched without a broker."""
    if wake not in _wakers:
        _wakers.append(wake)


def jobs_dispatch(jobs: Iterable[tuple[int, datetime]]) -> None:
    """Hand committed jobs to the runner: Celery messages (with an ETA for future ones) or the
    embedded runner's wake-up. A lost message is harmless: the due-jobs sweep finds the row."""
    jobs = list(jobs)
    if not jobs:
        return
    if dispatch_mode() == "celery":
        now = timezone.now()
        for job_id, run_at in jobs:
            try:
                eta = run_at if run_at > now else None
                celery_app.send_task(JOB_RUN_TASK, args=(job_id,), eta=eta)
            except Exception:  # the broker is down: the sweep will dispatch it
                logger.warning("could not send job %s to the broker", job_id, exc_info=True)
    else:
        for wake in _wakers:
            wake()


def dispatch_mode() -> str:
    """`celery` with a configured broker, else `embedded` (the in-process runner)."""
    mode = vnext_setting("JOB_DISPATCH")
    if mode:
        return str(mode)
    return "celery" if settings.CELERY_BROKER_URL != "memory://" else "embedded"
