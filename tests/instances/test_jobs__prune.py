"""Pruning ended jobs: succeeded, cancelled and skipped ones after VNEXT_JOB_RETENTION_DAYS,
failed and instance-faulted ones after their own VNEXT_FAILED_JOB_RETENTION_DAYS, never a
pending or running one; `jobs_prune` then vacuums the job table (outside a transaction)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from instances.job_table import Job
from instances.queue import jobs_prune_finished

pytestmark = pytest.mark.postgres

AGES = [
    ("succeeded", 8),
    ("succeeded", 1),
    ("cancelled", 8),
    ("skipped", 8),
    ("failed", 30),
    ("failed", 100),
    ("instance_faulted", 100),
    ("instance_faulted", 30),
    ("pending", 400),
    ("running", 400),
]


def make_jobs() -> None:
    for status, days in AGES:
        job = Job.objects.create(kind="timer", status=status, payload={"days": days})
        Job.objects.filter(pk=job.pk).update(updated_at=timezone.now() - timedelta(days=days))


def remaining() -> list[tuple[str, int]]:
    return sorted((job.status, job.payload["days"]) for job in Job.objects.all())


@pytest.mark.django_db
def test_each_kind_of_ended_job_is_pruned_after_its_own_retention():
    make_jobs()
    assert jobs_prune_finished() == 5
    assert remaining() == [
        ("failed", 30),
        ("instance_faulted", 30),
        ("pending", 400),
        ("running", 400),
        ("succeeded", 1),
    ]


@pytest.mark.django_db
def test_failed_jobs_stay_forever_when_their_retention_is_zero(settings):
    settings.VNEXT = {**getattr(settings, "VNEXT", {}), "FAILED_JOB_RETENTION_DAYS": 0}
    make_jobs()
    assert jobs_prune_finished() == 3
    assert ("failed", 100) in remaining()
    assert ("instance_faulted", 100) in remaining()


@pytest.mark.django_db(transaction=True)
def test_the_command_prunes_then_vacuums_the_job_table(capsys):
    make_jobs()
    call_command("jobs_prune")
    out = capsys.readouterr().out
    assert "5 job(s) pruned" in out
    assert "job table vacuumed and analyzed" in out
    assert Job.objects.count() == 5
