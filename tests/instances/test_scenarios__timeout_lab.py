"""SCENARIOS.md section 2, timeout-lab-root, driven through the HTTP API: a workflow-level
`timeout` (`PT20S`, an absolute budget from the start) is armed at start as a `timeout` job, the
state function carries its `timeout` block while it is pending, the due job pulls the instance
onto `root-timedout` (reporting the `timeout` sub-type), and the block is gone once the instance
is terminal. Finishing or cancelling before the deadline cancels the timeout job.

The deadline is made due with an `update(run_at=...)` and run with `jobs_run_due()` instead of
waiting 20 s. Parent/child (item 2) needs subflows, which this build does not have.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from instances.jobs import job_run, jobs_run_due
from instances.models import Instance, Job
from instances.status import JobStatus
from tests.conftest import EXAMPLES_DIR

pytestmark = pytest.mark.django_db

BASE = "/api/v1/core/workflows/timeout-lab-root/instances"
TIMEOUT = "root-abandoned"


@pytest.fixture(autouse=True)
def examples(db: None) -> None:
    call_command("import_components", str(EXAMPLES_DIR), "--no-progress")


def start(client: APIClient, body: Any) -> Any:
    return client.post(f"{BASE}/start?sync=true", body, format="json")


def started(client: APIClient, body: Any = None) -> str:
    response = start(client, {} if body is None else body)
    assert response.status_code == 200, response.json()
    return str(response.json()["id"])


def fire(client: APIClient, ref: str, transition: str, *, sync: bool = True) -> Any:
    url = f"{BASE}/{ref}/transitions/{transition}" + ("?sync=true" if sync else "")
    return client.patch(url, {}, format="json")


def detail(client: APIClient, ref: str) -> dict[str, Any]:
    response = client.get(f"{BASE}/{ref}")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def state_function(client: APIClient, ref: str) -> dict[str, Any]:
    response = client.get(f"{BASE}/{ref}/functions/state")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def history(client: APIClient, ref: str) -> list[tuple[str, str, str, str, int, str]]:
    items = client.get(f"{BASE}/{ref}/transitions").json()["items"]
    return [
        (
            r["transitionKey"],
            r["fromState"],
            r["toState"],
            r["status"],
            r["triggerType"],
            r["actor"],
        )
        for r in items
    ]


def deadline_jobs(instance_id: str) -> list[Job]:
    return list(Job.objects.filter(instance_id=instance_id, kind="timeout").order_by("pk"))


def make_due(job: Job, *, ago: timedelta = timedelta(0)) -> None:
    Job.objects.filter(pk=job.pk).update(run_at=timezone.now() - ago)


def at(text: str) -> datetime:
    assert text.endswith("Z"), text
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


START_ROW = ("start-timeout-lab-root", "", "root-waiting", "completed", 0, "operator")


# --- 1. root: armed at start, listed by the state function ----------------------------------------


def test_start_parks_in_root_waiting_and_arms_the_workflow_timeout(operator_client):
    before = timezone.now()

    instance_id = started(operator_client, {"attributes": {"testId": "t-root"}})

    after = timezone.now()
    instance = detail(operator_client, instance_id)
    assert instance["metadata"]["currentState"] == "root-waiting"
    assert instance["metadata"]["status"] == "A"
    assert instance["metadata"]["completedAt"] is None
    assert instance["attributes"] == {"testId": "t-root"}
    (job,) = deadline_jobs(instance_id)
    assert job.status == JobStatus.PENDING
    assert job.payload["transition"] == TIMEOUT
    # An absolute budget of 20 s from the start.
    assert before + timedelta(seconds=20) <= job.run_at <= after + timedelta(seconds=20)
    # The root has no scheduled transitions: the deadline is the only job.
    assert list(Job.objects.filter(instance_id=instance_id).exclude(kind="timeout")) == []
    assert history(operator_client, instance_id) == [START_ROW]


def test_state_function_carries_the_pending_timeout(operator_client):
    instance_id = started(operator_client)

    state = state_function(operator_client, instance_id)

    assert state["state"] == "root-waiting"
    assert state["status"] == "A"
    (job,) = deadline_jobs(instance_id)
    timeout = state["timeout"]
    assert timeout["key"] == TIMEOUT
    # This build reports the target as the state key (newer runtimes send an object).
    assert timeout["target"] == "root-timedout"
    executes_at = at(timeout["executeAtUtc"])
    assert executes_at == job.run_at
    assert timedelta(seconds=15) < executes_at - timezone.now() <= timedelta(seconds=20)
    # The workflow timeout is not a scheduled transition of the state.
    assert [t.get("kind") for t in state["transitions"]] == [None, "cancel"]
    assert [t["name"] for t in state["transitions"]] == ["root-finish", "cancel-timeout-lab-root"]


def test_idempotent_start_arms_one_timeout(operator_client):
    first = started(operator_client, {"key": "tl-1"})
    second = started(operator_client, {"key": "tl-1"})

    assert first == second
    assert [job.status for job in deadline_jobs(first)] == [JobStatus.PENDING]


# --- 1. root: the deadline fires ------------------------------------------------------------------


def test_the_due_timeout_lands_on_root_timedout(operator_client):
    instance_id = started(operator_client, {"attributes": {"testId": "t-fire"}})
    (job,) = deadline_jobs(instance_id)
    pending = operator_client.get(f"{BASE}/{instance_id}/functions/state")
    assert "timeout" in pending.json()
    etag = pending.headers["ETag"]

    make_due(job)
    outcome = jobs_run_due()

    assert outcome == {"succeeded": 1}
    instance = detail(operator_client, instance_id)
    metadata = instance["metadata"]
    assert metadata["currentState"] == "root-timedout"
    assert metadata["status"] == "C"
    assert metadata["effectiveStateType"] == "final"
    assert metadata["effectiveStateSubType"] == "timeout"
    assert metadata["completedAt"] is not None
    assert instance["attributes"] == {"testId": "t-fire"}
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.SUCCEEDED, 1)
    assert history(operator_client, instance_id) == [
        START_ROW,
        (TIMEOUT, "root-waiting", "root-timedout", "completed", 2, "scheduler"),
    ]
    # Once terminal the `timeout` block is gone at once, and nothing is offered.
    changed = operator_client.get(f"{BASE}/{instance_id}/functions/state", HTTP_IF_NONE_MATCH=etag)
    assert changed.status_code == 200
    assert changed.headers["ETag"] != etag
    state = changed.json()
    assert state["state"] == "root-timedout"
    assert state["status"] == "C"
    assert state["stateSubType"] == "timeout"
    assert "timeout" not in state
    assert state["transitions"] == []
    # Delivered again, the job changes nothing.
    assert job_run(job.pk) == "skipped"
    assert jobs_run_due() == {}
    assert len(history(operator_client, instance_id)) == 2


def test_a_timeout_not_yet_due_does_not_run(operator_client):
    instance_id = started(operator_client)

    assert jobs_run_due() == {}

    assert detail(operator_client, instance_id)["metadata"]["currentState"] == "root-waiting"
    assert [job.status for job in deadline_jobs(instance_id)] == [JobStatus.PENDING]


def test_a_client_cannot_fire_the_timeout_transition(operator_client):
    instance_id = started(operator_client)

    response = fire(operator_client, instance_id, TIMEOUT)

    # The workflow timeout is not a transition a client can name.
    assert response.status_code == 404, response.json()
    assert response.json()["errorCode"] == "Transition:100004"
    metadata = detail(operator_client, instance_id)["metadata"]
    assert (metadata["currentState"], metadata["status"]) == ("root-waiting", "A")
    assert [job.status for job in deadline_jobs(instance_id)] == [JobStatus.PENDING]


def test_the_timeout_takes_over_an_instance_busy_with_an_accepted_transition(operator_client):
    instance_id = started(operator_client)
    accepted = fire(operator_client, instance_id, "root-finish", sync=False)
    assert (accepted.status_code, accepted.json()["status"]) == (202, "B")
    (job,) = deadline_jobs(instance_id)
    # Due before the accepted transition's job, so it runs first and finds the instance Busy.
    make_due(job, ago=timedelta(minutes=1))

    outcome = jobs_run_due()

    # The timeout took Busy over; the accepted transition then found its reservation gone.
    assert outcome == {"succeeded": 2}
    row = Instance.objects.get(pk=instance_id)
    assert (row.status, row.current_state, row.busy_owner) == ("C", "root-timedout", "")
    metadata = detail(operator_client, instance_id)["metadata"]
    assert metadata["effectiveStateSubType"] == "timeout"
    assert history(operator_client, instance_id) == [
        START_ROW,
        (TIMEOUT, "root-waiting", "root-timedout", "completed", 2, "scheduler"),
    ]


# --- 1. root: finished or cancelled before the deadline -------------------------------------------


def test_root_finish_before_the_deadline_cancels_the_timeout(operator_client):
    instance_id = started(operator_client)

    response = fire(operator_client, instance_id, "root-finish")

    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "C"
    metadata = detail(operator_client, instance_id)["metadata"]
    assert metadata["currentState"] == "root-completed"
    assert metadata["status"] == "C"
    assert metadata["effectiveStateSubType"] == "success"
    (job,) = deadline_jobs(instance_id)
    assert job.status == JobStatus.CANCELLED
    assert "timeout" not in state_function(operator_client, instance_id)
    assert history(operator_client, instance_id) == [
        START_ROW,
        ("root-finish", "root-waiting", "root-completed", "completed", 0, "operator"),
    ]
    # Past the deadline, the cancelled job never fires.
    make_due(job, ago=timedelta(seconds=1))
    assert jobs_run_due() == {}
    assert job_run(job.pk) == "skipped"
    assert detail(operator_client, instance_id)["metadata"]["currentState"] == "root-completed"
    assert Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED


def test_cancel_before_the_deadline_cancels_the_timeout(operator_client):
    instance_id = started(operator_client)

    response = fire(operator_client, instance_id, "cancel-timeout-lab-root")

    assert response.status_code == 200, response.json()
    metadata = detail(operator_client, instance_id)["metadata"]
    assert (metadata["currentState"], metadata["status"]) == ("root-cancelled", "C")
    assert metadata["effectiveStateSubType"] == "cancelled"
    assert [job.status for job in deadline_jobs(instance_id)] == [JobStatus.CANCELLED]
    assert "timeout" not in state_function(operator_client, instance_id)
