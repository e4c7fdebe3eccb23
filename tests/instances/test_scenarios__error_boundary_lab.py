"""SCENARIOS.md section 6, error-boundary-lab and error-boundary-lab-global, driven through the
HTTP API with their scripts in Python (`examples/core/Workflows/error-boundary-lab/src/`) and a
local stub standing in for the mock API the HTTP tasks call (`tests/instances/eb_lab_stub.py`).

Boundaries at task, state and workflow level; actions abort, retry, rollback, ignore, notify and
log; `errorCodes` matched on the answer's status; priority, then specificity within a level;
level dominance before priority; retries as durable jobs (a sync call answers once they settle);
incidents and the retry endpoint. `zone-secured` runs without its `queryRoles` (not executed by
this version, see `examples/README.md`).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from instances.job_table import Job
from instances.models import Incident, Instance
from instances.wiring import engine
from tests.instances.eb_lab_stub import EbLabStub, eb_lab_stub
from tests.instances.scenario_api import WorkflowApi, import_examples

pytestmark = pytest.mark.django_db

SCRIPT_FAILURE = "Task:Script:eb-script-fail-task:500"


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[EbLabStub]:
    """The mock API, and the lab's mapping pointed at it through `context.configuration`."""
    with eb_lab_stub() as running:
        configuration = engine().config.script_configuration
        monkeypatch.setitem(configuration, "Example:ApiBaseUrl", running.base_url)
        yield running


@pytest.fixture
def lab(db: None, operator_client: Any, stub: EbLabStub) -> WorkflowApi:
    import_examples()
    return WorkflowApi(operator_client, "error-boundary-lab")


@pytest.fixture
def global_lab(db: None, operator_client: Any, stub: EbLabStub) -> WorkflowApi:
    import_examples()
    return WorkflowApi(operator_client, "error-boundary-lab-global")


def ready(api: WorkflowApi, **attributes: Any) -> str:
    """A new lab instance, waiting in its first state for a case."""
    instance_id = api.started({"attributes": {"testId": "eb", **attributes}})
    assert api.detail(instance_id)["metadata"]["currentState"] in ("ready", "g-ready")
    return instance_id


def incidents(api: WorkflowApi, instance_id: str, **params: str) -> dict[str, Any]:
    response = api.client.get(api.url(instance_id, "incidents"), params)
    assert response.status_code == 200, response.content
    body: dict[str, Any] = response.json()
    return body


def boundary_of(incident: dict[str, Any]) -> tuple[Any, ...]:
    """What an incident says about the boundary: action, level, code, whether it is resolved."""
    return (
        incident["boundaryAction"],
        incident["boundaryLevel"],
        incident["errorCode"],
        incident["resolved"],
    )


def where(api: WorkflowApi, instance_id: str) -> tuple[str, str]:
    """The instance's state and status."""
    metadata = api.detail(instance_id)["metadata"]
    return metadata["currentState"], metadata["status"]


# --- task level -----------------------------------------------------------------------------------


def test_task_abort_faults_with_one_incident_and_answers_200_status_f(lab):
    instance_id = ready(lab, shouldFail=True)

    response = lab.fire(instance_id, "case-task-abort")

    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["error"]["errorCode"]) == ("F", SCRIPT_FAILURE)
    assert body["error"]["incident"]["href"].endswith(f"/instances/{instance_id}/incidents/active")
    assert where(lab, instance_id) == ("ready", "F")
    (incident,) = incidents(lab, instance_id)["items"]
    assert boundary_of(incident) == ("Abort", "Task", SCRIPT_FAILURE, False)
    assert (incident["taskKey"], incident["step"]) == ("eb-script-fail-task", "ON_EXECUTE")


def test_task_rollback_runs_its_transition_and_resolves_the_incident(lab, stub):
    instance_id = ready(lab)

    body = lab.fired(instance_id, "case-task-rollback")

    assert (body["status"], body["attributes"]["httpLastStatus"]) == ("C", 500)
    assert where(lab, instance_id) == ("rolled-back", "C")
    page = incidents(lab, instance_id)
    assert page["hasActiveIncident"] is False
    (incident,) = page["items"]
    assert boundary_of(incident) == ("Rollback", "Task", "Task:Http:500", True)
    assert incident["resolution"] == "rollback to to-rolled-back"
    # The failed hop is recorded as diverted; the boundary's transition ran as trigger 9.
    assert lab.audit(instance_id)[1:] == [
        ("case-task-rollback", "ready", "ready", "diverted", 0, "operator"),
        ("to-rolled-back", "ready", "rolled-back", "completed", 9, "operator"),
    ]
    assert stub.calls["/api/eb-lab/fail-500"] == 1


def test_within_a_level_a_specific_rule_beats_a_default_wildcard(lab):
    instance_id = ready(lab)

    lab.fired(instance_id, "case-within-level-order")

    assert where(lab, instance_id) == ("rolled-back", "C")
    (incident,) = incidents(lab, instance_id)["items"]
    assert boundary_of(incident) == ("Rollback", "Task", "Task:Http:500", True)


def test_within_a_level_the_lower_priority_number_wins(lab):
    instance_id = ready(lab)

    lab.fired(instance_id, "case-within-level-priority")

    assert where(lab, instance_id) == ("notified", "C")
    (incident,) = incidents(lab, instance_id)["items"]
    assert boundary_of(incident) == ("Notify", "Task", "Task:Http:500", True)


def test_retries_exhaust_then_the_abort_fallback_faults(lab, stub):
    instance_id = ready(lab)

    body = lab.fired(instance_id, "case-retry-exhaust")

    # 1 + maxRetries (2) calls, each recorded by the output handler, then Abort.
    assert (body["status"], body["attributes"]["httpAttempts"]) == ("F", 3)
    assert body["error"]["errorCode"] == "Task:Http:500"
    assert stub.calls["/api/eb-lab/fail-500"] == 3
    (incident,) = incidents(lab, instance_id)["items"]
    assert boundary_of(incident) == ("Abort", "Task", "Task:Http:500", False)
    assert "after 2 retries" in incident["message"]
    retries = Job.objects.filter(instance_id=instance_id, payload__has_key="boundaryRetry")
    # The first retry failed and scheduled the second; the second's run faulted the instance.
    assert sorted((j.payload["boundaryRetry"]["retry"], j.status) for j in retries) == [
        (1, "succeeded"),
        (2, "instance_faulted"),
    ]


def test_a_retry_recovers_on_the_third_attempt_with_no_incident(lab, stub):
    instance_id = ready(lab)

    body = lab.fired(instance_id, "case-retry-recover")

    assert body["status"] == "C"
    assert (body["attributes"]["httpAttempts"], body["attributes"]["httpLastStatus"]) == (3, 200)
    assert where(lab, instance_id) == ("landed", "C")
    assert incidents(lab, instance_id)["items"] == []
    assert stub.calls["/api/eb-lab/flaky"] == 3


@pytest.mark.parametrize("case", ["case-ignore", "case-log"])
def test_ignore_and_log_go_on_and_skip_the_rest_of_the_task_list(lab, case):
    instance_id = ready(lab)

    body = lab.fired(instance_id, case)

    assert where(lab, instance_id) == ("landed", "C")
    assert incidents(lab, instance_id)["items"] == []
    assert body["attributes"]["httpLastStatus"] == 500
    assert "markerAfterFailure" not in body["attributes"]


def test_without_any_boundary_a_failed_answer_is_not_acted_on(lab):
    instance_id = ready(lab)

    body = lab.fired(instance_id, "case-unhandled")

    assert where(lab, instance_id) == ("landed", "C")
    assert incidents(lab, instance_id)["items"] == []
    # Not acted on at all: the output handler saw the 500 and the rest of the list ran.
    assert body["attributes"]["httpLastStatus"] == 500
    assert body["attributes"]["markerAfterFailure"] is True


# --- state level and precedence -------------------------------------------------------------------


def test_a_state_notify_boundary_handles_an_on_entry_failure(lab):
    instance_id = ready(lab)

    lab.fired(instance_id, "case-state-notify")

    assert where(lab, instance_id) == ("notified", "C")
    (incident,) = incidents(lab, instance_id)["items"]
    assert boundary_of(incident) == ("Notify", "State", "Task:Http:500", True)
    assert (incident["state"], incident["step"]) == ("zone-state-notify", "ON_ENTRY")


def test_the_task_level_decides_before_a_higher_priority_state_rule(lab):
    instance_id = ready(lab, shouldFail=True)

    body = lab.fired(instance_id, "case-precedence-task-over-state")

    assert body["status"] == "F"
    assert where(lab, instance_id) == ("zone-precedence", "F")
    (incident,) = incidents(lab, instance_id)["items"]
    assert boundary_of(incident) == ("Abort", "Task", SCRIPT_FAILURE, False)


def test_a_fault_inside_the_secured_zone(lab):
    instance_id = ready(lab, shouldFail=True)

    body = lab.fired(instance_id, "case-secured")

    assert body["status"] == "F"
    assert where(lab, instance_id) == ("zone-secured", "F")


# --- workflow (global) level ----------------------------------------------------------------------


def test_a_global_rollback_handles_a_503(global_lab):
    instance_id = ready(global_lab)

    global_lab.fired(instance_id, "g-case-global-rollback")

    assert where(global_lab, instance_id) == ("rolled-back", "C")
    (incident,) = incidents(global_lab, instance_id)["items"]
    assert boundary_of(incident) == ("Rollback", "Global", "Task:Http:503", True)


def test_a_boundary_that_matches_nothing_faults_with_no_action(global_lab):
    instance_id = ready(global_lab)

    body = global_lab.fired(instance_id, "g-case-unhandled-no-match")

    assert (body["status"], body["error"]["errorCode"]) == ("F", "Task:Http:500")
    (incident,) = incidents(global_lab, instance_id)["items"]
    assert boundary_of(incident) == (None, None, "Task:Http:500", False)


def test_a_state_rule_shadows_the_global_rule(global_lab):
    instance_id = ready(global_lab)

    global_lab.fired(instance_id, "g-case-state-over-global")

    assert where(global_lab, instance_id) == ("notified", "C")
    (incident,) = incidents(global_lab, instance_id)["items"]
    assert boundary_of(incident) == ("Notify", "State", "Task:Http:503", True)


# --- incidents and the retry endpoint -------------------------------------------------------------


def test_incidents_and_retry_sequence(lab):
    """The .http sequence of the lab: fault, read the incident every way, retry with the cause
    still there (faults again, one more incident), fix it and retry (lands, all resolved),
    retry again (400)."""
    instance_id = ready(lab, shouldFail=True)
    assert lab.fired(instance_id, "case-retry-endpoint")["status"] == "F"

    state = lab.function(instance_id, "state")
    block = state.json()["incident"]
    assert block["hasActiveIncident"] is True
    assert block["active"]["href"].endswith(f"/{instance_id}/incidents/active")
    assert block["history"]["href"].endswith(f"/{instance_id}/incidents")
    again = lab.client.get(
        lab.url(instance_id, "functions", "state"), headers={"If-None-Match": state["ETag"]}
    )
    assert again.status_code == 304
    assert lab.detail(instance_id)["metadata"]["incident"]["active"]["id"] == block["active"]["id"]
    active = lab.client.get(lab.url(instance_id, "incidents", "active"))
    assert (active.status_code, active.json()["errorCode"]) == (200, SCRIPT_FAILURE)
    page = incidents(lab, instance_id, page="1", pageSize="20")
    assert [i["id"] for i in page["items"]] == [block["active"]["id"]]
    assert incidents(lab, instance_id, page="1", pageSize="1")["hasNext"] is False

    still = lab.client.post(
        lab.url(instance_id, "retry") + "?sync=true",
        {"attributes": {"shouldFail": True}},
        format="json",
    )
    assert (still.status_code, still.json()["status"]) == (200, "F")
    assert still.json()["retriedTransitionId"]
    assert len(incidents(lab, instance_id)["items"]) == 2

    fixed = lab.client.post(
        lab.url(instance_id, "retry") + "?sync=true",
        {"attributes": {"shouldFail": False}},
        format="json",
    )
    assert (fixed.status_code, fixed.json()["status"]) == (200, "C")
    assert fixed.json()["attributes"]["scriptRecovered"] is True
    assert where(lab, instance_id) == ("landed", "C")
    page = incidents(lab, instance_id)
    assert page["hasActiveIncident"] is False
    assert [i["resolution"] for i in page["items"]] == ["retried", "retried"]

    once_more = lab.client.post(lab.url(instance_id, "retry") + "?sync=true", {}, format="json")
    assert (once_more.status_code, once_more.json()["errorCode"]) == (400, "Instance:100027")


# --- retries are durable jobs at their due times --------------------------------------------------


def test_retry_jobs_are_due_at_the_policy_delays(lab, stub):
    """Fixed backoff PT0.2S: each retry is a job due 0.2 s after the failure that scheduled it
    (the sync call ran them as they came due; none slept inside the pipeline)."""
    instance_id = ready(lab)

    lab.fired(instance_id, "case-retry-exhaust")

    jobs = list(
        Job.objects.filter(instance_id=instance_id, payload__has_key="boundaryRetry").order_by(
            "run_at"
        )
    )
    assert len(jobs) == 2
    for job in jobs:
        waited = job.run_at - job.created_at
        assert timedelta(seconds=0.15) <= waited <= timedelta(seconds=0.2), waited
    assert Instance.objects.get(pk=instance_id).status == "F"
    assert Incident.objects.filter(instance_id=instance_id).count() == 1


def test_the_labs_mock_is_reached_through_an_explicit_egress_allow(
    lab, stub, settings, monkeypatch, egress_refuses_loopback
):
    # As `make run` does (VNEXT_EGRESS_ALLOW_HOSTS=localhost:3001): the mock by name and port,
    # nothing else on the machine.
    port = stub.base_url.rsplit(":", 1)[1]
    settings.VNEXT = {**settings.VNEXT, "EGRESS_ALLOW_HOSTS": [f"localhost:{port}"]}
    configuration = engine().config.script_configuration
    monkeypatch.setitem(configuration, "Example:ApiBaseUrl", f"http://localhost:{port}")
    instance_id = ready(lab)

    body = lab.fired(instance_id, "case-task-rollback")

    assert (body["status"], body["attributes"]["httpLastStatus"]) == ("C", 500)
