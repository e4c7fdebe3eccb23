"""`manage.py instances_retry`: select Faulted instances, print what would re-run (--dry-run),
retry them through the admin's service, summarise, exit 1 when one faults again. Job replays
(admin and `jobs_replay`) and lock force-releases are audited too."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from instances.job_table import Job
from instances.models import Incident, Instance, OperatorAction
from locks.models import ResourceLock
from tests.instances.operator_fixtures import (
    faulted_instance,
    publish_workflows,
    repair_outside,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _workflows() -> None:
    publish_workflows()


def test_dry_run_prints_what_would_rerun_and_changes_nothing(capsys):
    first, second = faulted_instance(), faulted_instance()
    active = faulted_instance()
    Instance.objects.filter(pk=active.pk).update(status="A")

    call_command("instances_retry", "--workflow", "fixable", "--dry-run")

    out = capsys.readouterr().out
    for instance in (first, second):
        assert (
            f"would retry {instance.pk} (fixable, state ready): re-runs compute from state "
            "ready at step ON_EXECUTE; resolves Task:400008"
        ) in out
    assert str(active.pk) not in out
    assert "2 instance(s) selected; nothing changed (--dry-run)" in out
    assert set(Instance.objects.values_list("status", flat=True)) == {"F", "A"}
    assert not OperatorAction.objects.exists()


def test_a_real_run_retries_and_audits(capsys):
    faulted = faulted_instance()
    repair_outside(faulted)

    call_command(
        "instances_retry", "--error-code", "Task:400008", "--operator", "night-ops", "--no-progress"
    )

    out = capsys.readouterr().out
    assert f"{faulted.pk}: retried (status A)" in out
    assert "1 retried, 0 faulted again, 0 refused, 0 skipped" in out
    assert Instance.objects.get(pk=faulted.pk).status == "A"
    assert Incident.objects.get(instance=faulted).resolution == "retried"
    audit = OperatorAction.objects.get(instance=faulted)
    assert (audit.actor, audit.action) == ("night-ops", "retry")


def test_exit_code_1_when_one_faults_again(capsys):
    broken, fixed = faulted_instance(), faulted_instance()
    repair_outside(fixed)

    with pytest.raises(CommandError) as failed:
        call_command("instances_retry", "--id", str(broken.pk), "--id", str(fixed.pk))

    assert failed.value.returncode == 1
    captured = capsys.readouterr()
    assert f"{broken.pk}: faulted again (Task:400008)" in captured.err
    assert "1 retried, 1 faulted again, 0 refused, 0 skipped" in captured.out
    assert Instance.objects.get(pk=broken.pk).status == "F"
    assert OperatorAction.objects.filter(action="retry").count() == 2


def test_selection_options(capsys):
    faulted = faulted_instance()
    with pytest.raises(CommandError, match="select instances"):
        call_command("instances_retry")
    with pytest.raises(CommandError, match="no instance with id"):
        call_command("instances_retry", "--id", "00000000-0000-0000-0000-000000000000")
    later = (timezone.now() + timedelta(hours=1)).isoformat()
    call_command("instances_retry", "--since", later, "--dry-run")
    call_command("instances_retry", "--state", "working", "--dry-run")
    assert "0 instance(s) selected" in capsys.readouterr().out
    call_command("instances_retry", "--until", later, "--state", "ready", "--dry-run")
    assert f"would retry {faulted.pk}" in capsys.readouterr().out


def test_job_replays_and_lock_releases_are_audited(admin_user, capsys):
    faulted = faulted_instance()
    job = Job.objects.create(kind="transition", instance=faulted, status="failed")
    client = Client()
    client.force_login(admin_user)

    client.post(
        reverse("admin:instances_job_changelist"),
        {"action": "replay", "_selected_action": [str(job.pk)]},
    )
    with pytest.raises(CommandError):
        call_command("jobs_replay", "--id", str(job.pk), "--no-progress", "--operator", "cli")
    lock = ResourceLock.objects.create(
        key="order:1", owner=faulted.pk, expires_at=timezone.now() + timedelta(hours=1)
    )
    client.post(
        reverse("admin:locks_resourcelock_changelist"),
        {"action": "force_release", "_selected_action": [str(lock.pk)]},
    )

    trail = list(OperatorAction.objects.filter(instance=faulted).order_by("created_at"))
    assert [(a.action, a.actor) for a in trail] == [
        ("replay", "admin"),
        ("replay", "cli"),
        ("force-release", "admin"),
    ]
    assert trail[0].target == f"job {job.pk} (transition)"
    assert trail[0].outcome.startswith(f"job {job.pk}: ")
    assert (trail[2].target, trail[2].outcome) == ("lock order:1", "released")
    assert not ResourceLock.objects.exists()
