"""A final hop and a due timer racing on the same instance: the final hop cancels the timer in
its own statement, so exactly one of them ends the instance, once, and the loser writes nothing
(the timer is cancelled, or finds the instance completed and ends; the hop is refused)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from instances.job_handlers import job_run
from instances.job_table import Job
from instances.models import Incident, Instance, InstanceTransition
from tests.engine.builders import script, state, transition, workflow
from tests.instances.workflows import publish

pytestmark = pytest.mark.django_db(transaction=True)

RACES = 20
BASE = "/api/v1/core/workflows/racing/instances"


def racing_workflow() -> dict[str, Any]:
    """`waiting` ends by the manual `approve` or by the `expire` timer, due at once."""
    due_now = script("def handler(context):\n    return 'PT0S'\n")
    return workflow(
        [
            state(
                "waiting",
                1,
                [
                    transition("approve", "approved"),
                    transition("expire", "expired", 2, timer=due_now),
                ],
            ),
            state("approved", 3, subType=1),
            state("expired", 3, subType=8),
        ],
        key="racing",
    )


def _race(operator: Any, instance_id: str, timer_id: int) -> tuple[Any, Any]:
    barrier = threading.Barrier(2)
    results: list[Any] = [None, None]

    def approve() -> None:
        client = APIClient()
        client.force_authenticate(operator)
        try:
            barrier.wait(timeout=30)
            results[0] = client.patch(
                f"{BASE}/{instance_id}/transitions/approve?sync=true", {}, format="json"
            ).status_code
        finally:
            connection.close()

    def fire() -> None:
        try:
            barrier.wait(timeout=30)
            results[1] = job_run(timer_id)
        finally:
            connection.close()

    threads = [threading.Thread(target=approve), threading.Thread(target=fire)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    return results[0], results[1]


def test_a_final_hop_racing_its_timer_ends_the_instance_exactly_once(operator, operator_client):
    publish(racing_workflow())
    for _ in range(RACES):
        created = operator_client.post(f"{BASE}/start?sync=true", {}, format="json")
        assert created.status_code == 200, created.json()
        instance_id = created.json()["id"]
        timer = Job.objects.get(instance_id=instance_id, kind="timer")

        approved, fired = _race(operator, instance_id, timer.pk)

        row = Instance.objects.get(pk=instance_id)
        finals = list(
            InstanceTransition.objects.filter(
                instance_id=instance_id, to_state__in=["approved", "expired"], status="completed"
            ).values_list("to_state", flat=True)
        )
        assert row.status == "C"
        assert finals == [row.current_state], (finals, approved, fired)
        if row.current_state == "approved":
            assert approved == 200
        else:  # busy with the timer (409), or already completed by it (400)
            assert approved in (400, 409), approved
        timer.refresh_from_db()
        if timer.status == "pending":
            # It was claimed before the hop cancelled it, and lost: its next run finds the
            # instance completed and ends, writing nothing.
            assert (row.current_state, fired) == ("approved", "retry")
            Job.objects.filter(pk=timer.pk).update(run_at=timezone.now())
            assert job_run(timer.pk) == "skipped"
            timer.refresh_from_db()
        if row.current_state == "approved":
            assert timer.status in ("cancelled", "skipped"), timer.status
        else:
            assert timer.status == "succeeded", timer.status
        assert Instance.objects.get(pk=instance_id).etag == row.etag
        assert not Incident.objects.filter(instance_id=instance_id).exists()
