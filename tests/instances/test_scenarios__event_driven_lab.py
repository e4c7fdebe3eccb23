"""SCENARIOS.md section 3, event-driven-lab: an event starts an instance (workflow `event`), a
second event moves it through `approve-by-event` (`triggerType: 3`, its own `event.mapping`,
correlation by business key); an event matching no instance is acknowledged and changes
nothing; a redelivered event applies once; a client cannot fire the event transition, and an
event cannot fire a manual one."""

from __future__ import annotations

from typing import Any

import pytest

from instances.job_handlers import jobs_run_due
from instances.job_table import Job
from instances.models import Instance, InstanceTransition
from tests.instances.scenario_api import WorkflowApi, import_examples

pytestmark = pytest.mark.django_db
EVENTS = "/api/v1/core/workflows/event-driven-lab/instances/events"


@pytest.fixture
def api(db: None, operator_client: Any) -> WorkflowApi:
    import_examples()
    return WorkflowApi(operator_client, "event-driven-lab")


def deliver(api: WorkflowApi, query: str, body: Any, **headers: str) -> dict[str, Any]:
    response = api.client.post(f"{EVENTS}?{query}", body, format="json", headers=headers)
    assert response.status_code == 200, response.content
    answer: dict[str, Any] = response.json()
    return answer


def order(key: str) -> Instance:
    return Instance.objects.get(workflow_key="event-driven-lab", key=key)


def test_an_event_starts_the_instance_and_another_approves_it(api):
    started = deliver(api, "action=start", {"orderId": "O-1", "amount": 100})
    jobs_run_due()

    assert started["matched"] == 1
    instance = order("O-1")
    assert (str(instance.pk), instance.current_state) == (
        started["instances"][0],
        "awaiting-approval",
    )
    assert instance.data == {"orderId": "O-1", "amount": 100, "startedBy": "event", "approvals": 0}

    approved = deliver(
        api,
        "action=transition&transitionKey=approve-by-event",
        {"orderId": "O-1", "decision": "approved", "approvedBy": "u1"},
    )
    jobs_run_due()

    assert (approved["matched"], approved["instances"]) == (1, [str(instance.pk)])
    instance.refresh_from_db()
    assert (instance.current_state, instance.status) == ("approved", "C")
    assert instance.data["approvals"] == 1
    assert (instance.data["decision"], instance.data["approvedBy"]) == ("approved", "u1")
    (row,) = InstanceTransition.objects.filter(instance=instance, transition_key="approve-by-event")
    assert row.trigger_type == 3


def test_an_event_matching_no_instance_is_acknowledged_and_changes_nothing(api):
    deliver(api, "action=start", {"orderId": "O-2", "amount": 5})
    jobs_run_due()

    answer = deliver(
        api,
        "action=transition&transitionKey=approve-by-event",
        {"orderId": "NOPE", "decision": "approved", "approvedBy": "u1"},
    )

    assert (answer["matched"], answer["instances"]) == (0, [])
    assert order("O-2").current_state == "awaiting-approval"


def test_a_cloud_event_redelivered_applies_once(api):
    cloud_event = {
        "specversion": "1.0",
        "id": "evt-42",
        "type": "order.created",
        "source": "/shop",
        "data": {"orderId": "O-3", "amount": 7},
    }

    first = deliver(api, "action=start", cloud_event)
    again = deliver(api, "action=start", cloud_event)
    jobs_run_due()

    assert (first["duplicate"], first["eventId"]) == (False, "evt-42")
    assert (again["duplicate"], again["matched"]) == (True, 0)
    assert Instance.objects.filter(workflow_key="event-driven-lab", key="O-3").count() == 1
    approval = {"orderId": "O-3", "decision": "approved", "approvedBy": "u2"}
    deliver(api, "action=transition&transitionKey=approve-by-event", approval, **{"ce-id": "a-1"})
    repeat = deliver(
        api, "action=transition&transitionKey=approve-by-event", approval, **{"ce-id": "a-1"}
    )
    jobs_run_due()
    assert repeat["duplicate"] is True
    assert InstanceTransition.objects.filter(transition_key="approve-by-event").count() == 1
    assert Job.objects.filter(kind="event").count() == 2  # one receipt per event


def test_a_client_cannot_fire_the_event_transition(api):
    deliver(api, "action=start", {"orderId": "O-4", "amount": 1})
    jobs_run_due()

    response = api.fire("O-4", "approve-by-event")

    assert response.status_code == 400
    assert response.json()["errorCode"] == "NotAnEventTransition"


def test_an_event_for_a_transition_without_an_event_is_refused(api, operator_client):
    response = operator_client.post(
        f"{EVENTS}?action=transition&transitionKey=start-event-driven-lab", {}, format="json"
    )

    assert response.status_code == 400
    assert response.json()["errorCode"] == "NotAnEventTransition"
