"""One fault path: whatever faults an instance (a run, a job, the reaper, a refused write) sets
Faulted, opens one incident that says where (task, step, attempt), cancels the state's timers and
releases the instance's locks, in one transaction. Jobs of a faulted instance end `skipped` and
never run again; a job whose run faulted its instance says so; cancel closes the incident; the
listing, the instance and the state function agree."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from instances.job_handlers import jobs_run_due
from instances.job_table import Job
from instances.models import Incident, Instance
from instances.reaper import instances_reap_stranded_busy
from instances.replay import job_replay
from locks.models import ResourceLock
from tests.engine.builders import script, state, task_ref, transition, workflow
from tests.instances.answers import fault_code
from tests.instances.http_server import http_server
from tests.instances.workflows import CANCEL, http_ref, http_task, publish

pytestmark = pytest.mark.django_db
BASE = "/api/v1/core/workflows/breakable/instances"
HOUR_TIMER = script("def handler(context):\n    return 'PT1H'\n")


def breakable() -> dict:
    """`waiting` has a timer (an hour away), `break` (a script task whose output handler
    raises), `ok` and `cancel`."""
    return workflow(
        [
            state(
                "waiting",
                1,
                [
                    transition("break", "done", onExecutionTasks=[task_ref("1 / 0")]),
                    transition("ok", "done"),
                    transition("slow-ok", "done", onExecutionTasks=[task_ref({"x": 1})]),
                    transition("expire", "done", 2, timer=HOUR_TIMER),
                ],
            ),
            state("done", 3, subType=1),
            state("cancelled", 3, subType=3),
        ],
        key="breakable",
        cancel=CANCEL,
    )


@pytest.fixture
def started(operator_client) -> str:
    publish(breakable())
    response = operator_client.post(f"{BASE}/start?sync=true", {}, format="json")
    assert response.status_code == 200, response.json()
    return str(response.json()["id"])


def fire(client, instance_id: str, key: str, body=None, sync: bool = True):
    url = f"{BASE}/{instance_id}/transitions/{key}" + ("?sync=true" if sync else "")
    return client.patch(url, body or {}, format="json")


def test_a_faulted_instance_with_an_armed_timer_runs_no_job_again(operator_client, started):
    timer = Job.objects.get(instance_id=started, kind="timer")
    assert timer.status == "pending"

    response = fire(operator_client, started, "break")

    assert fault_code(response) == "Task:400008"
    timer.refresh_from_db()
    assert timer.status == "cancelled"
    # Even a timer row made due by a race is not run against the faulted instance: it is
    # skipped once, with its reason, and never claimed again.
    Job.objects.filter(pk=timer.pk).update(status="pending", run_at=timezone.now())
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        jobs_run_due()
        time.sleep(0.1)
    timer.refresh_from_db()
    assert (timer.status, timer.attempts) == ("skipped", 1)
    assert "faulted" in timer.last_error
    assert Instance.objects.get(pk=started).status == "F"


def test_the_incident_names_task_step_and_transition(operator_client, started):
    fire(operator_client, started, "break")
    incident = Incident.objects.get(instance_id=started)
    assert (incident.task_key, incident.step, incident.transition_key, incident.state) == (
        "script-task",
        "ON_EXECUTE",
        "break",
        "waiting",
    )
    assert incident.attempt is None  # a client's sync call, not a job attempt
    body = operator_client.get(f"{BASE}/{started}/incidents/active").json()
    assert (body["taskKey"], body["step"], body["errorCode"]) == (
        "script-task",
        "ON_EXECUTE",
        "Task:400008",
    )


def test_an_async_run_that_faults_its_instance_says_so_on_the_job(operator_client, started):
    accepted = fire(operator_client, started, "break", sync=False)
    assert accepted.status_code == 202

    assert jobs_run_due() == {"instance_faulted": 1}

    job = Job.objects.get(instance_id=started, kind="transition")
    assert job.status == "instance_faulted"
    assert job.last_error.startswith("Task:400008: ")
    assert Incident.objects.get(instance_id=started).attempt == 1
    replay = job_replay(job=job, operator="ops")
    assert replay.outcome == "refused"
    assert "retry or cancel the instance" in replay.reason
    job.refresh_from_db()
    assert job.status == "instance_faulted"


def test_listing_instance_and_state_function_agree_on_the_open_incident(operator_client, started):
    fire(operator_client, started, "break")

    listed = operator_client.get(BASE).json()["items"]
    detail = operator_client.get(f"{BASE}/{started}").json()
    state = operator_client.get(f"{BASE}/{started}/functions/state").json()

    (item,) = [item for item in listed if item["id"] == started]
    assert item["metadata"]["incident"]["hasActiveIncident"] is True
    assert detail["metadata"]["incident"]["hasActiveIncident"] is True
    assert state["incident"]["hasActiveIncident"] is True
    assert item["metadata"]["incident"]["active"]["id"] == state["incident"]["active"]["id"]
    # Only what a faulted instance can run is offered.
    assert [(t["name"], t.get("kind")) for t in state["transitions"]] == [
        ("cancel", "cancel"),
        ("retry", "retry"),
    ]
    assert state["transitions"][1]["href"].endswith(f"/{started}/retry")
    assert fire(operator_client, started, "ok").status_code == 409


def test_cancel_of_a_faulted_instance_closes_its_incident(operator_client, started):
    fire(operator_client, started, "break")

    response = fire(operator_client, started, "cancel")

    assert response.status_code == 200, response.json()
    incident = Incident.objects.get(instance_id=started)
    assert (incident.resolved, incident.resolution, incident.resolved_by) == (
        True,
        "cancelled",
        "operator",
    )
    assert incident.resolved_at is not None
    detail = operator_client.get(f"{BASE}/{started}").json()
    assert detail["metadata"]["incident"]["hasActiveIncident"] is False


def test_the_reaper_faults_like_a_run_locks_released_and_timers_cancelled(
    operator_client, started, settings
):
    settings.VNEXT = {**settings.VNEXT, "BUSY_LEASE_SECONDS": 1}
    ResourceLock.objects.create(
        key="account:42", owner=started, expires_at=timezone.now() + timedelta(hours=1)
    )
    Instance.objects.filter(pk=started).update(
        status="B", busy_owner="gone", busy_since=timezone.now() - timedelta(seconds=5)
    )

    assert instances_reap_stranded_busy() == 1

    row = Instance.objects.get(pk=started)
    assert (row.status, row.busy_owner) == ("F", "")
    assert not ResourceLock.objects.filter(owner=started).exists()
    assert Job.objects.get(instance_id=started, kind="timer").status == "cancelled"
    incident = Incident.objects.get(instance_id=started)
    assert (incident.error_code, incident.state) == ("Instance:StrandedBusy", "waiting")


@pytest.mark.postgres  # SQLite stores a NUL character; PostgreSQL refuses it
def test_a_write_the_database_refuses_after_busy_faults_at_once(operator_client):
    # The HTTP task's answer holds a NUL character: Busy was taken for the task, and PostgreSQL
    # refuses the answer's journal row when the run commits.
    with http_server() as base_url:
        document = breakable()
        document["attributes"]["states"][0]["transitions"].append(
            transition("fetch", "done", onExecutionTasks=[http_ref("nul-call")])
        )
        publish(http_task("nul-call", f"{base_url}/nul"), document)
        started = operator_client.post(f"{BASE}/start?sync=true", {}, format="json").json()["id"]

        response = fire(operator_client, started, "fetch")

    assert (response.status_code, response.json()["errorCode"]) == (400, "Instance:DataRefused")
    row = Instance.objects.get(pk=started)
    assert (row.status, row.busy_owner, row.current_state) == ("F", "", "waiting")
    assert Incident.objects.get(instance_id=started).error_code == "Instance:DataRefused"
    assert Job.objects.get(instance_id=started, kind="timer").status == "cancelled"


@pytest.mark.postgres
@pytest.mark.parametrize("key", ["slow-ok", "ok"], ids=["before-the-task", "no-io"])
def test_a_body_the_database_refuses_is_a_clean_400_with_nothing_written(
    operator_client, started, key
):
    # Refused at the first write (the Busy CAS of a hop with a task, or the only commit of one
    # without): nothing was written, so nothing is faulted.
    before = Instance.objects.get(pk=started)

    response = fire(operator_client, started, key, {"note": "a\u0000b"})

    assert (response.status_code, response.json()["errorCode"]) == (400, "Instance:DataRefused")
    row = Instance.objects.get(pk=started)
    assert (row.status, row.current_state, row.etag) == ("A", "waiting", before.etag)
    assert not Incident.objects.filter(instance_id=started).exists()
