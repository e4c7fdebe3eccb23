"""SCENARIOS.md section 2, timeout-lab-root, driven through the HTTP API: a workflow-level
`timeout` (`PT20S`, an absolute budget from the start) is armed at start as a `timeout` job, the
state function carries its `timeout` block while it is pending, the due job pulls the instance
onto `root-timedout` (reporting the `timeout` sub-type), and the block is gone once the instance
is terminal. Finishing or cancelling before the deadline cancels the timeout job.

The deadline is made due with an `update(run_at=...)` and run with `jobs_run_due()` instead of
waiting 20 s. Parent/child (item 2) needs subflows, which this build does not have.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from instances.job_handlers import job_run, jobs_run_due
from instances.job_table import Job
from instances.models import Instance
from instances.status import JobStatus
from tests.instances.scenario_api import FULL, api_fixture, at, make_due, timers

pytestmark = pytest.mark.django_db

api = api_fixture("timeout-lab-root", history=FULL)
TIMEOUT = "root-abandoned"


def deadline_jobs(instance_id: str) -> list[Job]:
    """The instance's workflow-timeout jobs, oldest first."""
    return timers(instance_id, kind="timeout")


START_ROW = ("start-timeout-lab-root", "", "root-waiting", "completed", 0, "operator")


# --- 1. root: armed at start, listed by the state function ----------------------------------------


def test_start_parks_in_root_waiting_and_arms_the_workflow_timeout(api):
    before = timezone.now()

    instance_id = api.started({"attributes": {"testId": "t-root"}})

    after = timezone.now()
    instance = api.detail(instance_id)
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
    assert api.history(instance_id) == [START_ROW]


def test_state_function_carries_the_pending_timeout(api):
    instance_id = api.started()

    state = api.state(instance_id)

    assert state["state"] == "root-waiting"
    assert state["status"] == "A"
    (job,) = deadline_jobs(instance_id)
    timeout = state["timeout"]
    assert timeout["key"] == TIMEOUT
    # This build reports the target as the state key (newer runtimes send an object).
    assert timeout["target"] == "root-timedout"
    assert timeout["executeAtUtc"].endswith("Z"), timeout["executeAtUtc"]
    executes_at = at(timeout["executeAtUtc"])
    assert executes_at == job.run_at
    assert timedelta(seconds=15) < executes_at - timezone.now() <= timedelta(seconds=20)
    # The workflow timeout is not a scheduled transition of the state.
    assert [t.get("kind") for t in state["transitions"]] == [None, "cancel"]
    assert [t["name"] for t in state["transitions"]] == ["root-finish", "cancel-timeout-lab-root"]


def test_idempotent_start_arms_one_timeout(api):
    first = api.started({"key": "tl-1"})
    second = api.started({"key": "tl-1"})

    assert first == second
    assert [job.status for job in deadline_jobs(first)] == [JobStatus.PENDING]


# --- 1. root: the deadline fires ------------------------------------------------------------------


def test_the_due_timeout_lands_on_root_timedout(api):
    instance_id = api.started({"attributes": {"testId": "t-fire"}})
    (job,) = deadline_jobs(instance_id)
    pending = api.function(instance_id, "state")
    assert "timeout" in pending.json()
    etag = pending.headers["ETag"]

    make_due(job)
    outcome = jobs_run_due()

    assert outcome == {"succeeded": 1}
    instance = api.detail(instance_id)
    metadata = instance["metadata"]
    assert metadata["currentState"] == "root-timedout"
    assert metadata["status"] == "C"
    assert metadata["effectiveStateType"] == "final"
    assert metadata["effectiveStateSubType"] == "timeout"
    assert metadata["completedAt"] is not None
    assert instance["attributes"] == {"testId": "t-fire"}
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.SUCCEEDED, 1)
    assert api.history(instance_id) == [
        START_ROW,
        (TIMEOUT, "root-waiting", "root-timedout", "completed", 2, "scheduler"),
    ]
    # Once terminal the `timeout` block is gone at once, and nothing is offered.
    changed = api.function(instance_id, "state", headers={"If-None-Match": etag})
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
    assert len(api.history(instance_id)) == 2


def test_a_timeout_not_yet_due_does_not_run(api):
    instance_id = api.started()

    assert jobs_run_due() == {}

    assert api.detail(instance_id)["metadata"]["currentState"] == "root-waiting"
    assert [job.status for job in deadline_jobs(instance_id)] == [JobStatus.PENDING]


def test_a_client_cannot_fire_the_timeout_transition(api):
    instance_id = api.started()

    response = api.fire(instance_id, TIMEOUT)

    # The workflow timeout is not a transition a client can name.
    assert response.status_code == 404, response.json()
    assert response.json()["errorCode"] == "Transition:100004"
    metadata = api.detail(instance_id)["metadata"]
    assert (metadata["currentState"], metadata["status"]) == ("root-waiting", "A")
    assert [job.status for job in deadline_jobs(instance_id)] == [JobStatus.PENDING]


def test_the_timeout_takes_over_an_instance_busy_with_an_accepted_transition(api):
    instance_id = api.started()
    accepted = api.fire(instance_id, "root-finish", sync=False)
    assert (accepted.status_code, accepted.json()["status"]) == (202, "B")
    (job,) = deadline_jobs(instance_id)
    # Due before the accepted transition's job, so it runs first and finds the instance Busy.
    make_due(job, ago=timedelta(minutes=1))

    outcome = jobs_run_due()

    # The timeout took Busy over; the accepted transition then found its reservation gone and
    # ended `skipped`, saying so.
    assert outcome == {"succeeded": 1, "skipped": 1}
    transition_job = Job.objects.get(instance_id=instance_id, kind="transition")
    assert transition_job.status == "skipped"
    assert "no longer reserved for this job" in transition_job.last_error
    row = Instance.objects.get(pk=instance_id)
    assert (row.status, row.current_state, row.busy_owner) == ("C", "root-timedout", "")
    metadata = api.detail(instance_id)["metadata"]
    assert metadata["effectiveStateSubType"] == "timeout"
    assert api.history(instance_id) == [
        START_ROW,
        (TIMEOUT, "root-waiting", "root-timedout", "completed", 2, "scheduler"),
    ]


# --- 1. root: finished or cancelled before the deadline -------------------------------------------


def test_root_finish_before_the_deadline_cancels_the_timeout(api):
    instance_id = api.started()

    response = api.fire(instance_id, "root-finish")

    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "C"
    metadata = api.detail(instance_id)["metadata"]
    assert metadata["currentState"] == "root-completed"
    assert metadata["status"] == "C"
    assert metadata["effectiveStateSubType"] == "success"
    (job,) = deadline_jobs(instance_id)
    assert job.status == JobStatus.CANCELLED
    assert "timeout" not in api.state(instance_id)
    assert api.history(instance_id) == [
        START_ROW,
        ("root-finish", "root-waiting", "root-completed", "completed", 0, "operator"),
    ]
    # Past the deadline, the cancelled job never fires.
    make_due(job, ago=timedelta(seconds=1))
    assert jobs_run_due() == {}
    assert job_run(job.pk) == "skipped"
    assert api.detail(instance_id)["metadata"]["currentState"] == "root-completed"
    assert Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED


def test_cancel_before_the_deadline_cancels_the_timeout(api):
    instance_id = api.started()

    response = api.fire(instance_id, "cancel-timeout-lab-root")

    assert response.status_code == 200, response.json()
    metadata = api.detail(instance_id)["metadata"]
    assert (metadata["currentState"], metadata["status"]) == ("root-cancelled", "C")
    assert metadata["effectiveStateSubType"] == "cancelled"
    assert [job.status for job in deadline_jobs(instance_id)] == [JobStatus.CANCELLED]
    assert "timeout" not in api.state(instance_id)
