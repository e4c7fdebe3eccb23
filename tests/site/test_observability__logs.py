"""Structured logs: one JSON object per line, and every line of one operation carries its
request id and instance id (and transition, job id): a sync transition's lines, and an async
transition's, whose job repeats the id of the request that accepted it."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from instances.job_handlers import jobs_run_due
from instances.job_table import Job
from tests.instances.operator_fixtures import DIVIDE
from tests.instances.test_retry__api import BASE, repairable, started
from tests.instances.workflows import publish
from vnext.observability import JsonFormatter

pytestmark = pytest.mark.django_db


class JsonLines(logging.Handler):
    """Keeps each record as the JSON line the production formatter writes."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.setFormatter(JsonFormatter())
        self.lines: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


@pytest.fixture
def log_lines() -> Iterator[JsonLines]:
    handler = JsonLines()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


def test_every_line_of_a_sync_transition_carries_its_request_and_instance(
    operator_client, log_lines
):
    publish(repairable(on_execute=[DIVIDE]))
    instance_id = started(operator_client)
    log_lines.lines.clear()

    response = operator_client.patch(
        f"{BASE}/{instance_id}/transitions/compute?sync=true",
        {},
        format="json",
        headers={"X-Request-ID": "req-sync-1"},
    )

    assert response["X-Request-ID"] == "req-sync-1"
    assert log_lines.lines, "the fault writes at least one line"
    assert {line["request_id"] for line in log_lines.lines} == {"req-sync-1"}
    ours = [line for line in log_lines.lines if line.get("instance_id") == instance_id]
    assert ours
    assert {line["transition"] for line in ours} == {"compute"}
    assert all({"time", "level", "logger", "message"} <= set(line) for line in log_lines.lines)


def test_an_async_transitions_job_repeats_the_request_id(operator_client, log_lines):
    publish(repairable(on_execute=[DIVIDE]))
    instance_id = started(operator_client)
    accepted = operator_client.patch(
        f"{BASE}/{instance_id}/transitions/compute",
        {},
        format="json",
        headers={"X-Request-ID": "req-async-1"},
    )
    assert accepted.status_code == 202
    job = Job.objects.get(instance_id=instance_id, kind="transition")
    assert job.payload["requestId"] == "req-async-1"
    log_lines.lines.clear()

    jobs_run_due()

    job_lines = [line for line in log_lines.lines if line.get("job_id") == job.pk]
    assert job_lines, "the job's run writes at least one line (the fault)"
    assert all(line["request_id"] == "req-async-1" for line in job_lines)
    assert all(line["instance_id"] == instance_id for line in job_lines)
    assert any(line.get("transition") == "compute" for line in job_lines)
