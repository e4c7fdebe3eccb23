"""`errorBoundary.onTimeout` end to end, through the HTTP API on PostgreSQL, with an HTTP task
whose local stub answers after the task's `timeoutSeconds`: a task-level Retry policy retries
the timed-out call as a due job, then (its retries spent) the task level's onError Rollback rule
takes the instance to its compensation state; a state-level Ignore policy lets the transition
finish past the timeout. Each attempt is journalled `Task:Http:Timeout`."""

from __future__ import annotations

from typing import Any

import pytest

from instances.job_handlers import jobs_run_due
from instances.job_table import Job
from instances.models import Incident, Instance, InstanceTask
from tests.engine.builders import state, transition, workflow
from tests.instances.http_server import http_server
from tests.instances.scenario_api import make_due
from tests.instances.workflows import http_ref, http_task, publish

pytestmark = pytest.mark.django_db

BASE = "/api/v1/core/workflows/slow-partner/instances"
# The stub answers after 2.5 s; the task gives up after 1 s.
SLOW = "/slow?ms=2500"
RETRY_ONCE = {
    "action": 1,
    "defaultRetryPolicy": {
        "maxRetries": 1,
        "initialDelay": "PT0.1S",
        "backoffType": 0,
        "useJitter": False,
    },
}


def slow_partner(base: str, *, task_boundary: Any = None, state_boundary: Any = None) -> None:
    reference = http_ref("slow-call")
    if task_boundary is not None:
        reference["errorBoundary"] = task_boundary
    idle_extra = {"errorBoundary": state_boundary} if state_boundary is not None else {}
    publish(
        http_task("slow-call", f"{base}{SLOW}", timeoutSeconds=1),
        workflow(
            [
                state(
                    "idle",
                    1,
                    [
                        transition("call", "called", onExecutionTasks=[reference]),
                        transition("give-up", "gave-up"),
                    ],
                    **idle_extra,
                ),
                state("called", 2),
                state("gave-up", 2),
            ],
            key="slow-partner",
        ),
    )


def journal(instance_id: str) -> list[tuple[str, str, int]]:
    rows = InstanceTask.objects.filter(instance_id=instance_id, task_key="slow-call")
    return [(row.status, row.error_code, row.attempts) for row in rows.order_by("attempts")]


def history(instance: Instance) -> list[tuple[str, str, str]]:
    rows = instance.transitions.order_by("started_at")
    return [(row.transition_key, row.status, row.to_state) for row in rows]


def test_a_retry_policy_retries_the_timeout_then_the_on_error_rollback_decides(
    operator_client: Any,
):
    boundary = {
        "onTimeout": RETRY_ONCE,
        "onError": [{"action": 2, "errorCodes": ["Task:Http:Timeout"], "transition": "give-up"}],
    }
    with http_server() as base:
        slow_partner(base, task_boundary=boundary)
        instance_id = operator_client.post(f"{BASE}/start?sync=true", {}, format="json").json()[
            "id"
        ]
        accepted = operator_client.patch(
            f"{BASE}/{instance_id}/transitions/call", {}, format="json"
        )
        assert accepted.status_code == 202
        jobs_run_due()

        # The first attempt timed out: one retry job, due after the policy's 0.1 s.
        (retry,) = Job.objects.filter(instance_id=instance_id, payload__has_key="boundaryRetry")
        assert (retry.status, retry.payload["boundaryRetry"]["retry"]) == ("pending", 1)
        assert Instance.objects.get(pk=instance_id).status == "B"
        make_due(retry)
        jobs_run_due()

    instance = Instance.objects.get(pk=instance_id)
    assert (instance.status, instance.current_state, instance.busy_owner) == ("A", "gave-up", "")
    assert journal(instance_id) == [
        ("failed", "Task:Http:Timeout", 1),
        ("failed", "Task:Http:Timeout", 2),
    ]
    assert history(instance) == [
        ("start", "completed", "idle"),
        ("call", "diverted", "idle"),
        ("give-up", "completed", "gave-up"),
    ]
    incident = Incident.objects.get(instance_id=instance_id)
    assert (incident.error_code, incident.boundary_action, incident.boundary_level) == (
        "Task:Http:Timeout",
        "Rollback",
        "Task",
    )
    assert (incident.resolved, incident.resolution) == (True, "rollback to give-up")
    state = operator_client.get(f"{BASE}/{instance_id}/functions/state").json()
    assert (state["state"], state["status"]) == ("gave-up", "A")


def test_an_ignore_policy_of_the_state_lets_the_transition_finish(operator_client: Any):
    with http_server() as base:
        slow_partner(base, state_boundary={"onTimeout": {"action": 3}})
        instance_id = operator_client.post(f"{BASE}/start?sync=true", {}, format="json").json()[
            "id"
        ]
        response = operator_client.patch(
            f"{BASE}/{instance_id}/transitions/call?sync=true", {}, format="json"
        )

    assert response.status_code == 200, response.json()
    instance = Instance.objects.get(pk=instance_id)
    assert (instance.status, instance.current_state) == ("A", "called")
    assert journal(instance_id) == [("failed", "Task:Http:Timeout", 1)]
    assert not Incident.objects.filter(instance_id=instance_id).exists()


def test_publishing_an_on_timeout_policy_is_accepted_and_a_broken_one_refused(
    operator_client: Any,
):
    with http_server() as base:
        slow_partner(base, task_boundary={"onTimeout": RETRY_ONCE})
    document = workflow(
        [state("idle", 1, [transition("call", "called")]), state("called", 2)],
        key="broken-policy",
        errorBoundary={"onTimeout": {"action": 2, "transition": "nowhere"}},
    )

    response = operator_client.post("/api/v1/definitions/publish", document, format="json")

    assert response.status_code == 400
    assert response.json()["errors"] == [
        {
            "pointer": "/attributes/errorBoundary/onTimeout/transition",
            "message": "'nowhere' is neither a transition nor a state of this workflow",
        }
    ]
