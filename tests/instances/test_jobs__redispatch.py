"""The dispatch sweep re-sends a pending job's message only once it has waited a quiet period
since it was last handed over, and a job running past its lease at every sweep: a backlog of
thousands of due jobs (a batch's retries) is not sent again on every sweep."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from instances import queue
from instances.job_table import Job
from instances.status import JobKind


@pytest.mark.django_db
def test_a_pending_job_is_sent_again_only_after_its_quiet_period(monkeypatch, settings):
    settings.VNEXT = {**settings.VNEXT, "JOB_REDISPATCH_SECONDS": 30}
    sent: list[int] = []
    monkeypatch.setattr(queue, "jobs_dispatch", lambda due: sent.extend(i for i, _ in due))
    now = timezone.now()
    fresh = Job.objects.create(kind=JobKind.TIMER, run_at=now, updated_at=now)
    quiet = Job.objects.create(
        kind=JobKind.TIMER, run_at=now, updated_at=now - timedelta(seconds=31)
    )
    lost_lease = Job.objects.create(
        kind=JobKind.TIMER,
        status="running",
        attempts=1,
        lease_owner="gone",
        lease_until=now - timedelta(seconds=1),
        updated_at=now,
    )

    assert queue.jobs_dispatch_due() == 2
    assert sorted(sent) == sorted([quiet.pk, lost_lease.pk])
    sent.clear()
    assert queue.jobs_dispatch_due() == 1  # the quiet one was handed over just now
    assert sent == [lost_lease.pk]
    assert fresh.pk not in sent
