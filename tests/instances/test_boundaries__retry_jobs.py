"""Error-boundary retries are durable jobs at the policy's due times, never sleeps: an async
transition whose HTTP task keeps answering 503 under an exponential policy (PT1S, x2, capped at
PT3S, 3 retries, no jitter) leaves one retry job at a time, due 1 s, 2 s, then 3 s after the
failure that scheduled it; the instance stays Busy under the job's reservation (the stranded-Busy
reaper leaves it alone) and faults through the Abort fallback once the retries are spent."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from instances.job_handlers import jobs_run_due
from instances.job_table import Job
from instances.models import Incident, Instance, InstanceTask
from instances.reaper import instances_reap_stranded_busy
from tests.engine.builders import script, state, transition, workflow
from tests.instances.eb_lab_stub import eb_lab_stub
from tests.instances.http_server import http_server
from tests.instances.scenario_api import make_due
from tests.instances.workflows import http_ref, http_task, publish

pytestmark = pytest.mark.django_db

BASE = "/api/v1/core/workflows/retrying/instances"
POLICY = {
    "maxRetries": 3,
    "initialDelay": "PT1S",
    "backoffType": 1,
    "backoffMultiplier": 2,
    "maxDelay": "PT3S",
    "useJitter": False,
}


def retrying_workflow(url: str, codes: tuple[str, ...] | list[str] = ("503",)) -> None:
    reference = http_ref("flaky-call")
    reference["errorBoundary"] = {
        "onError": [
            {"action": 1, "errorCodes": list(codes), "priority": 1, "retryPolicy": POLICY},
            {"action": 0, "priority": 999},
        ]
    }
    publish(
        http_task("flaky-call", url),
        workflow(
            [
                state("idle", 1, [transition("call", "called", onExecutionTasks=[reference])]),
                state("called", 2),
            ],
            key="retrying",
        ),
    )


def retry_jobs(instance_id: str) -> list[Job]:
    return list(
        Job.objects.filter(instance_id=instance_id, payload__has_key="boundaryRetry").order_by(
            "created_at"
        )
    )


def test_retries_wait_the_policy_delays_as_jobs_then_fall_back_to_abort(
    operator_client: Any, settings: Any
):
    with http_server() as base:
        retrying_workflow(f"{base}/status/503")
        created = operator_client.post(f"{BASE}/start?sync=true", {}, format="json").json()
        instance_id = created["id"]
        accepted = operator_client.patch(
            f"{BASE}/{instance_id}/transitions/call", {}, format="json"
        )
        assert accepted.status_code == 202
        jobs_run_due()

        waits = []
        for retry in (1, 2, 3):
            (job,) = [j for j in retry_jobs(instance_id) if j.status == "pending"]
            assert job.payload["boundaryRetry"]["retry"] == retry
            waits.append(job.run_at - job.created_at)
            instance = Instance.objects.get(pk=instance_id)
            assert (instance.status, instance.busy_owner) == ("B", job.payload["reservation"])
            # Busy for the job's reservation: the reaper must not fault it, however old.
            settings.VNEXT = {**settings.VNEXT, "BUSY_LEASE_SECONDS": 0.0}
            assert instances_reap_stranded_busy() == 0
            make_due(job)
            jobs_run_due()

    expected = [timedelta(seconds=1), timedelta(seconds=2), timedelta(seconds=3)]
    for waited, due in zip(waits, expected, strict=True):
        # The job row is inserted a moment after the engine computed its due time.
        assert due - timedelta(milliseconds=250) <= waited <= due, waits
    instance = Instance.objects.get(pk=instance_id)
    assert (instance.status, instance.current_state) == ("F", "idle")
    incident = Incident.objects.get(instance_id=instance_id)
    assert (incident.boundary_action, incident.boundary_level) == ("Abort", "Task")
    assert incident.error_code == "Task:Http:503"
    assert "after 3 retries" in incident.message
    # One journal row per attempt, numbered.
    attempts = InstanceTask.objects.filter(task_key="flaky-call").order_by("attempts")
    assert [(row.status, row.attempts) for row in attempts] == [
        ("failed", 1),
        ("failed", 2),
        ("failed", 3),
        ("failed", 4),
    ]


def test_a_retry_that_succeeds_finishes_the_transition_without_an_incident(operator_client: Any):
    with eb_lab_stub() as stub:
        # Answers 500, 500, then 200.
        retrying_workflow(f"{stub.base_url}/api/eb-lab/flaky", codes=["500"])
        instance_id = operator_client.post(f"{BASE}/start?sync=true", {}, format="json").json()
        instance_id = instance_id["id"]
        operator_client.patch(f"{BASE}/{instance_id}/transitions/call", {}, format="json")
        jobs_run_due()
        for _ in range(2):
            (job,) = [j for j in retry_jobs(instance_id) if j.status == "pending"]
            make_due(job)
            assert jobs_run_due() == {"succeeded": 1}
        assert stub.calls["/api/eb-lab/flaky"] == 3

    instance = Instance.objects.get(pk=instance_id)
    assert (instance.status, instance.current_state, instance.busy_owner) == ("A", "called", "")
    assert not Incident.objects.filter(instance_id=instance_id).exists()
    journal = InstanceTask.objects.filter(task_key="flaky-call").order_by("attempts")
    assert [(row.status, row.attempts) for row in journal] == [
        ("failed", 1),
        ("failed", 2),
        ("succeeded", 3),
    ]
    # The hop kept one history row through its retries, completed at the end.
    assert [
        (row.transition_key, row.status) for row in instance.transitions.order_by("started_at")
    ] == [
        ("start", "completed"),
        ("call", "completed"),
    ]


def test_a_cancel_while_a_retry_is_pending_wins_and_the_retry_job_is_skipped(
    operator_client: Any,
):
    """Cancel is exempt from 409: it takes the Busy instance over from the pending retry's
    reservation, so the retry job finds the reservation gone and ends `skipped`."""
    with http_server() as base:
        reference = http_ref("flaky-call")
        reference["errorBoundary"] = {
            "onError": [{"action": 1, "priority": 1, "retryPolicy": POLICY}]
        }
        publish(
            http_task("flaky-call", f"{base}/status/503"),
            workflow(
                [
                    state("idle", 1, [transition("call", "called", onExecutionTasks=[reference])]),
                    state("called", 2),
                    state("cancelled", 3, subType=3),
                ],
                key="retrying",
                cancel={
                    "key": "cancel",
                    "target": "cancelled",
                    "triggerType": 0,
                    "versionStrategy": "None",
                    "labels": [{"label": "Cancel", "language": "en"}],
                },
            ),
        )
        instance_id = operator_client.post(f"{BASE}/start?sync=true", {}, format="json").json()
        instance_id = instance_id["id"]
        operator_client.patch(f"{BASE}/{instance_id}/transitions/call", {}, format="json")
        jobs_run_due()
        (job,) = retry_jobs(instance_id)
        assert Instance.objects.get(pk=instance_id).status == "B"
        # A client's transition gets 409 meanwhile; the retry endpoint says it is not faulted.
        busy = operator_client.patch(
            f"{BASE}/{instance_id}/transitions/call?sync=true", {}, format="json"
        )
        assert (busy.status_code, busy.json()["errorCode"]) == (409, "Instance:100031")
        retry = operator_client.post(f"{BASE}/{instance_id}/retry?sync=true", {}, format="json")
        assert (retry.status_code, retry.json()["errorCode"]) == (400, "Instance:100027")

        cancelled = operator_client.patch(
            f"{BASE}/{instance_id}/transitions/cancel?sync=true", {}, format="json"
        )
        assert (cancelled.status_code, cancelled.json()["status"]) == (200, "C")
        make_due(job)
        assert jobs_run_due() == {"skipped": 1}

    instance = Instance.objects.get(pk=instance_id)
    assert (instance.status, instance.current_state, instance.busy_owner) == ("C", "cancelled", "")
    assert not Incident.objects.filter(instance_id=instance_id, resolved=False).exists()


def failing_script_ref(boundary: dict[str, Any]) -> dict[str, Any]:
    """An onExecutionTasks item whose script task's input handler raises, under `boundary`."""
    source = "def input_handler(task, context):\n    raise ValueError('refused')\n"
    return {
        "order": 1,
        "task": {"key": "script-task", "domain": "core", "version": "1.0.0", "flow": "sys-tasks"},
        "mapping": script(source),
        "errorBoundary": boundary,
    }


def test_a_failing_script_task_takes_busy_for_its_retry_job_then_aborts(
    operator_client: Any, settings: Any
):
    # A hop of script tasks runs without Busy (nothing outside changes); a retry job resumes
    # under the run's reservation, so the failure takes Busy before scheduling it.
    policy = {**POLICY, "maxRetries": 1}
    reference = failing_script_ref(
        {"onError": [{"action": 1, "priority": 1, "retryPolicy": policy}, {"action": 0}]}
    )
    publish(
        workflow(
            [
                state("idle", 1, [transition("call", "called", onExecutionTasks=[reference])]),
                state("called", 2),
            ],
            key="retrying",
        )
    )
    settings.VNEXT = {**settings.VNEXT, "SYNC_RETRY_WAIT_SECONDS": 0.0}
    instance_id = operator_client.post(f"{BASE}/start?sync=true", {}, format="json").json()["id"]
    answered = operator_client.patch(
        f"{BASE}/{instance_id}/transitions/call?sync=true", {}, format="json"
    )
    assert (answered.status_code, answered.json()["status"]) == (200, "B")
    (job,) = retry_jobs(instance_id)
    instance = Instance.objects.get(pk=instance_id)
    assert (instance.status, instance.busy_owner) == ("B", job.payload["reservation"])
    make_due(job)
    assert jobs_run_due() == {"instance_faulted": 1}
    instance = Instance.objects.get(pk=instance_id)
    assert (instance.status, instance.current_state, instance.busy_owner) == ("F", "idle", "")
    incident = Incident.objects.get(instance_id=instance_id)
    assert (incident.boundary_action, incident.error_code) == (
        "Abort",
        "Task:Script:script-task:500",
    )
    assert "after 1 retry" in incident.message


def test_a_failing_script_task_rolls_back_through_its_boundary_transition(operator_client: Any):
    reference = failing_script_ref({"onError": [{"action": 2, "transition": "recover"}]})
    publish(
        workflow(
            [
                state(
                    "idle",
                    1,
                    [
                        transition("call", "called", onExecutionTasks=[reference]),
                        transition("recover", "recovered"),
                    ],
                ),
                state("called", 2),
                state("recovered", 2),
            ],
            key="retrying",
        )
    )
    instance_id = operator_client.post(f"{BASE}/start?sync=true", {}, format="json").json()["id"]
    answered = operator_client.patch(
        f"{BASE}/{instance_id}/transitions/call?sync=true", {}, format="json"
    )
    assert (answered.status_code, answered.json()["status"]) == (200, "A")
    instance = Instance.objects.get(pk=instance_id)
    assert (instance.status, instance.current_state, instance.busy_owner) == (
        "A",
        "recovered",
        "",
    )
    incident = Incident.objects.get(instance_id=instance_id)
    assert (incident.boundary_action, incident.resolved) == ("Rollback", True)
    assert [
        (row.transition_key, row.status) for row in instance.transitions.order_by("started_at")
    ] == [("start", "completed"), ("call", "diverted"), ("recover", "completed")]
