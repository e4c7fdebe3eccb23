"""`POST .../instances/{instance}/retry`: an operator repairs a Faulted instance. The correction
is merged first, the faulting transition runs again from the step that failed, a success closes
the incident, a repeat fault opens a new one and the instance stays retryable; two concurrent
retries: one runs, the other gets 409."""

from __future__ import annotations

import httpx
import pytest

from instances.job_handlers import jobs_run_due
from instances.models import Incident, Instance, InstanceTransition
from tests.engine.builders import state, transition, workflow
from tests.instances.answers import fault_code
from tests.instances.http_server import http_server
from tests.instances.operator_fixtures import DIVIDE
from tests.instances.test_admission__concurrency import race
from tests.instances.workflows import http_ref, http_task, publish

BASE = "/api/v1/core/workflows/repairable/instances"


def repairable(*, on_execute: list | None = None, on_entry: list | None = None) -> dict:
    """`ready --compute--> working --finish--> done`; where the division sits is the test's."""
    return workflow(
        [
            state(
                "ready", 1, [transition("compute", "working", onExecutionTasks=on_execute or [])]
            ),
            state("working", 2, [transition("finish", "done")], onEntries=on_entry or []),
            state("done", 3, subType=1),
        ],
        key="repairable",
    )


def started(client) -> str:
    response = client.post(f"{BASE}/start?sync=true", {}, format="json")
    assert response.status_code == 200, response.json()
    return str(response.json()["id"])


def compute(client, instance_id: str):
    return client.patch(f"{BASE}/{instance_id}/transitions/compute?sync=true", {}, format="json")


def retry(client, instance_id: str, body=None):
    return client.post(f"{BASE}/{instance_id}/retry?sync=true", body or {}, format="json")


@pytest.mark.django_db
def test_fix_the_cause_and_retry_completes_the_transition(operator_client):
    publish(repairable(on_execute=[DIVIDE]))
    instance_id = started(operator_client)
    assert fault_code(compute(operator_client, instance_id)) == "Task:400008"

    response = retry(operator_client, instance_id, {"attributes": {"divisor": 4}})

    assert response.status_code == 200, response.json()
    row = Instance.objects.get(pk=instance_id)
    assert (row.status, row.current_state, row.data) == (
        "A",
        "working",
        {"divisor": 4, "quotient": 2.5},
    )
    incident = Incident.objects.get(instance_id=instance_id)
    assert (incident.resolved, incident.resolution, incident.resolved_by) == (
        True,
        "retried",
        "operator",
    )
    history = InstanceTransition.objects.filter(instance_id=instance_id, transition_key="compute")
    assert sorted(h.status for h in history) == ["completed", "faulted"]


@pytest.mark.django_db
def test_a_retry_that_faults_again_opens_a_new_incident_and_stays_retryable(operator_client):
    publish(repairable(on_execute=[DIVIDE]))
    instance_id = started(operator_client)
    compute(operator_client, instance_id)

    again = retry(operator_client, instance_id)

    assert fault_code(again) == "Task:400008"
    # The answer names the re-run's history row (faulted too), not the first run's.
    history = InstanceTransition.objects.filter(instance_id=instance_id, transition_key="compute")
    runs = list(history.order_by("started_at"))
    assert [run.status for run in runs] == ["faulted", "faulted"]
    assert again.json()["retriedTransitionId"] == str(runs[1].id)
    assert Instance.objects.get(pk=instance_id).status == "F"
    assert Incident.objects.filter(instance_id=instance_id, resolved=False).count() == 2
    fixed = retry(operator_client, instance_id, {"divisor": 5})
    assert fixed.status_code == 200, fixed.json()
    assert not Incident.objects.filter(instance_id=instance_id, resolved=False).exists()


@pytest.mark.django_db
def test_a_fault_in_on_entry_reruns_on_entry_not_on_execute(operator_client):
    with http_server() as base_url:
        counter = f"{base_url}/counted/retry-execute-{id(operator_client)}"
        publish(
            http_task("count-execute", counter),
            repairable(on_execute=[http_ref("count-execute")], on_entry=[DIVIDE]),
        )
        instance_id = started(operator_client)
        assert fault_code(compute(operator_client, instance_id)) == "Task:400008"
        row = Instance.objects.get(pk=instance_id)
        assert (row.status, row.current_state) == ("F", "working")
        assert Incident.objects.get(instance_id=instance_id).step == "ON_ENTRY"

        response = retry(operator_client, instance_id, {"attributes": {"divisor": 2}})

        assert response.status_code == 200, response.json()
        count = httpx.get(counter.replace("/counted/", "/count/")).json()["count"]
    assert count == 1
    row = Instance.objects.get(pk=instance_id)
    assert (row.status, row.current_state, row.data["quotient"]) == ("A", "working", 5.0)


@pytest.mark.django_db
def test_retry_refuses_what_is_not_faulted(operator_client):
    publish(repairable(on_execute=[DIVIDE]))
    instance_id = started(operator_client)

    active = retry(operator_client, instance_id)
    unknown = retry(operator_client, "00000000-0000-0000-0000-000000000000")

    assert (active.status_code, active.json()["errorCode"]) == (400, "Instance:100027")
    assert (unknown.status_code, unknown.json()["errorCode"]) == (404, "Instance:100017")
    compute(operator_client, instance_id)
    bad = retry(operator_client, instance_id, {"attributes": [1, 2]})
    assert (bad.status_code, bad.json()["errorCode"]) == (400, "App:900002")
    assert Instance.objects.get(pk=instance_id).status == "F"


@pytest.mark.postgres
@pytest.mark.concurrency
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_retries_one_runs_the_other_gets_409(operator, operator_client):
    with http_server() as base_url:
        publish(
            http_task("slow-call", f"{base_url}/slow?ms=400"),
            repairable(on_entry=[http_ref("slow-call", order=1), {**DIVIDE, "order": 2}]),
        )
        instance_id = started(operator_client)
        assert fault_code(compute(operator_client, instance_id)) == "Task:400008"

        results = race(2, lambda client, _: retry(client, instance_id, {"divisor": 1}), operator)

    codes = sorted(result.status_code for result in results)
    assert codes == [200, 409], [r.json() for r in results]
    row = Instance.objects.get(pk=instance_id)
    assert (row.status, row.current_state, row.busy_owner) == ("A", "working", "")
    completed = InstanceTransition.objects.filter(instance_id=instance_id, status="completed")
    assert completed.filter(transition_key="compute").count() == 1


@pytest.mark.django_db
def test_an_async_retry_answers_202_and_its_job_runs_the_retry(operator_client):
    publish(repairable(on_execute=[DIVIDE]))
    instance_id = started(operator_client)
    compute(operator_client, instance_id)

    accepted = operator_client.post(
        f"{BASE}/{instance_id}/retry?sync=false", {"divisor": 2}, format="json"
    )

    assert (accepted.status_code, accepted.json()["status"]) == (202, "B")
    assert retry(operator_client, instance_id).status_code == 400  # Busy now, not faulted
    assert jobs_run_due() == {"succeeded": 1}
    row = Instance.objects.get(pk=instance_id)
    assert (row.status, row.current_state, row.data["quotient"]) == ("A", "working", 5.0)
    assert Incident.objects.get(instance_id=instance_id).resolution == "retried"
