"""The operators' commands: `instances_suspend`, `instances_resume`, `instances_migrate` (with
`--dry-run`) and `batches` (create, its dry-run count, show, run, cancel), each through the same
service as the API and audited with channel `command`."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from instances.models import Batch, Instance, OperatorAction
from tests.instances.test_repair__suspend_migrate import reminders, started
from tests.instances.workflows import publish


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_suspend_and_resume_by_business_key_are_audited_as_commands(operator_client):
    publish(reminders())
    response = operator_client.post(
        "/api/v1/core/workflows/reminders/instances/start?sync=true",
        {"key": "order-7", "attributes": {}},
        format="json",
    )
    instance_id = response.json()["id"]

    printed = run("instances_suspend", "--workflow", "reminders", "--id", "order-7")

    assert "1 suspended, 0 refused" in printed
    assert Instance.objects.get(pk=instance_id).status == "P"
    with pytest.raises(CommandError) as refused:
        run("instances_suspend", "--workflow", "reminders", "--id", "order-7")
    assert refused.value.returncode == 1
    run("instances_resume", "--workflow", "reminders", "--id", instance_id, "--reason", "ok")
    assert Instance.objects.get(pk=instance_id).status == "A"
    trail = OperatorAction.objects.filter(instance_id=instance_id).order_by("created_at")
    assert [(row.action, row.channel, row.actor) for row in trail] == [
        ("suspend", "command", "instances_suspend"),
        ("resume", "command", "instances_resume"),
    ]


@pytest.mark.django_db
def test_migrate_dry_run_changes_nothing_then_migrates(operator_client):
    publish(reminders())
    instance_id = started(operator_client)
    publish(reminders("1.0.1"))
    args = ("instances_migrate", "--workflow", "reminders", "--id", instance_id, "--to", "1.0.1")

    dry = run(*args, "--dry-run")

    assert '"toVersion": "1.0.1"' in dry
    assert Instance.objects.get(pk=instance_id).workflow_version == "1.0.0"
    assert not OperatorAction.objects.exists()
    printed = run(*args)
    assert "1.0.0 -> 1.0.1" in printed
    assert Instance.objects.get(pk=instance_id).workflow_version == "1.0.1"
    with pytest.raises(CommandError, match="--map"):
        run(*args, "--map", "nonsense")


@pytest.mark.django_db
def test_a_batch_from_the_command_line(operator_client):
    publish(reminders())
    ids = [started(operator_client) for _ in range(3)]
    status_filter = "status=eq:Active"

    counted = run("batches", "create", "--workflow", "reminders", "--operation", "suspend",
                  "--filter", status_filter, "--dry-run")  # fmt: skip
    assert "3 instance(s) match" in counted
    assert not Batch.objects.exists()
    created = run("batches", "create", "--workflow", "reminders", "--operation", "suspend",
                  "--filter", status_filter, "--reason", "freeze")  # fmt: skip
    batch = Batch.objects.get()
    assert f"batch {batch.pk}: 3 instance(s)" in created
    shown = run("batches", "run", str(batch.pk))
    assert "3/3 handled, 3 done, 0 refused, 0 failed" in shown
    assert set(Instance.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"P"}
    with pytest.raises(CommandError) as finished:
        run("batches", "cancel", str(batch.pk))
    assert "Batch:Finished" in str(finished.value)
    assert OperatorAction.objects.filter(action="batch", channel="command").count() == 1
    with pytest.raises(CommandError):
        run("batches", "show", "not-a-batch")
