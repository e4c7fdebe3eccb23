"""The write funnel with a real Celery worker (Redis, PostgreSQL) SIGKILLed in the middle: 50
concurrent updateData calls, half sync (run by the API threads in their turn), half async (run
by the worker), every one applied exactly once, in ticket order, whatever the kill interrupted."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from instances.job_table import Job
from instances.models import Instance, InstanceDataVersion, InstanceTransition
from instances.queue import jobs_dispatch_due
from tests.instances.test_write_funnel__concurrency import started, tally
from tests.instances.workflows import publish
from tests.integration.test_celery_worker import Worker, broker, wait_for

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.concurrency,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]
__all__ = ["broker"]  # the fixture, used by name
BASE = "/api/v1/core/workflows/tally/instances"


def test_fifty_updates_with_a_worker_killed_midway_all_apply_once_in_order(
    operator, operator_client, broker, settings, tmp_path: Path
):
    # The worker's lease is 3 s (Worker). Whatever the kill interrupted is rolled back with the
    # lane's transaction, or was committed with its ticket's end: applied once either way.
    settings.VNEXT = {
        **settings.VNEXT,
        "DATA_WRITE_WAIT_SECONDS": 60.0,
        "JOB_LEASE_SECONDS": 3,
        "JOB_REDISPATCH_SECONDS": 2,
    }
    publish(tally())
    instance_id = started(operator_client, "tally")
    url = f"{BASE}/{instance_id}/transitions/update-data"
    first = Worker(tmp_path / "first.log")
    first.start()
    answers: list[Any] = [None] * 50
    barrier = threading.Barrier(50)

    def update(index: int) -> None:
        client = APIClient()
        client.force_authenticate(operator)
        try:
            barrier.wait(timeout=30)
            sync = index % 2 == 0
            body = {"attributes": {"seq": index}}
            answers[index] = client.patch(url + ("?sync=true" if sync else ""), body, "json")
        finally:
            connection.close()

    threads = [threading.Thread(target=update, args=(n,)) for n in range(50)]
    for thread in threads:
        thread.start()
    tickets = Job.objects.filter(instance_id=instance_id, kind="update-data")
    wait_for(lambda: tickets.filter(status="succeeded").count() >= 10, what="ten applied")
    first.kill()
    # The kill came in the middle: tickets were left for the second worker and the requests.
    assert tickets.filter(status__in=["pending", "running"]).exists() or any(
        thread.is_alive() for thread in threads
    )
    second = Worker(tmp_path / "second.log")
    second.start()
    try:
        for thread in threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in threads)

        def all_applied() -> bool:
            jobs_dispatch_due()  # the periodic sweep: messages the killed worker took are lost
            return not tickets.filter(status__in=["pending", "running"]).exists()

        wait_for(all_applied, 120, "every ticket to finish")
    finally:
        second.stop()
    assert [answer.status_code for answer in answers] == [200, 202] * 25
    data = Instance.objects.get(pk=instance_id).data
    assert data["count"] == 50
    assert sorted(data["seen"]) == list(range(50))
    ordered = tickets.order_by("pk")
    assert set(ordered.values_list("status", flat=True)) == {"succeeded"}
    # The async updates (odd seq) applied in ticket order; each sync one read all before it.
    assert [seq for seq in data["seen"] if seq % 2] == [
        job.payload["attributes"]["seq"] for job in ordered
    ]
    for index, answer in enumerate(answers):
        if index % 2 == 0:
            seen = answer.json()["attributes"]["seen"]
            assert data["seen"][: len(seen)] == seen
    versions = InstanceDataVersion.objects.filter(instance_id=instance_id).order_by("created_at")
    assert list(versions.values_list("version", flat=True)) == [f"1.0.{n}" for n in range(1, 51)]
    rows = InstanceTransition.objects.filter(instance_id=instance_id, transition_key="update-data")
    assert rows.filter(status="completed").count() == 50
    assert rows.count() == 50
