"""Instances the archive tests archive: a workflow with a retention, instances driven to
completion through the API (history, data versions, a task row) with an incident, a finished
job and an audit row beside, and every row of an instance read table by table."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from instances.instance_rows import TABLES
from instances.job_table import Job
from instances.models import Incident, Instance, OperatorAction
from tests.instances.workflows import ping_pong, publish

FLOW = "kept-30"
BASE = f"/api/v1/core/workflows/{FLOW}/instances"


def publish_retained(key: str = FLOW, days: int | None = 30) -> None:
    """ping-pong (with a script task on to-pong) keeping completed instances `days` days."""
    document = ping_pong(key, with_task=True)
    if days is not None:
        document["attributes"]["retentionDays"] = days
    publish(document)


def completed(client: Any, *, days_ago: float, key: str | None = None, flow: str = FLOW) -> Any:
    """An instance driven start -> to-pong -> finish, completed `days_ago` days ago, with an
    incident, a succeeded job and an operator's audit row."""
    base = f"/api/v1/core/workflows/{flow}/instances"
    body = {"key": key, "attributes": {"amount": 7}} if key else {"attributes": {"amount": 7}}
    created = client.post(f"{base}/start?sync=true", body, format="json").json()
    for name in ("to-pong", "finish"):
        answer = client.patch(f"{base}/{created['id']}/transitions/{name}?sync=true", {}, "json")
        assert answer.status_code == 200, answer.content
    instance = Instance.objects.get(pk=created["id"])
    assert instance.status == "C"
    Incident.objects.create(instance=instance, error_code="Task:1", message="m", resolved=True)
    Job.objects.create(kind="timer", instance=instance, status="succeeded")
    OperatorAction.objects.create(actor="ops", action="retry", instance=instance, target="t")
    Instance.objects.filter(pk=instance.pk).update(
        completed_at=timezone.now() - timedelta(days=days_ago)
    )
    return instance


def rows_of(instance_id: Any) -> dict[str, list[dict[str, Any]]]:
    """Every row of every table that holds the instance's rows."""
    return {
        name: list(model._default_manager.filter(**{column: instance_id}).order_by("pk").values())
        for name, model, column in TABLES
    }
