"""`interaction.longPoll` (seed 001 "State Interaction", seed 000 step 75): entering a state with
`terminate: true` pauses the run after OnEntry, Busy, until the client's ack or the fallback job
continues it (automatic transitions, timers); a second ack is 409; `terminate: false` only
informs. The state function carries the `interaction` block."""

from __future__ import annotations

from typing import Any

import pytest

from instances.job_handlers import jobs_run_due
from instances.job_table import Job
from instances.models import Instance
from tests.engine.builders import state, task_ref, transition, workflow
from tests.instances.scenario_api import WorkflowApi, make_due
from tests.instances.workflows import publish

pytestmark = pytest.mark.django_db


def reviewed(terminate: bool = True) -> dict[str, Any]:
    long_poll = {"terminate": terminate, "fallbackTimeoutSeconds": 30, "roles": []}
    return workflow(
        [
            state("begin", 1, [transition("submit", "review")]),
            state(
                "review",
                2,
                [transition("go-on", "done", 1, triggerKind=10)],
                interaction={"longPoll": long_poll},
                onEntries=[task_ref({"entered": True})],
            ),
            state("done", 3, subType=1),
        ],
        key="reviewed",
    )


@pytest.fixture
def api(operator_client: Any) -> WorkflowApi:
    return WorkflowApi(operator_client, "reviewed")


def paused(api: WorkflowApi) -> str:
    instance_id = api.started()
    answer = api.fired(instance_id, "submit")
    assert (answer["status"], answer["attributes"]) == ("B", {"entered": True})
    row = Instance.objects.get(pk=instance_id)
    assert (row.current_state, row.busy_owner[:9]) == ("review", "longpoll:")
    return instance_id


def test_a_terminating_state_pauses_until_the_ack_and_a_second_ack_is_409(api):
    publish(reviewed())
    instance_id = paused(api)
    state_body = api.state(instance_id)
    assert state_body["interaction"] == {
        "terminateLongPoll": True,
        "fallbackTimeoutSeconds": 30,
        "ack": {"href": api.url(instance_id, "longpoll/ack")},
    }
    (fallback,) = Job.objects.filter(instance_id=instance_id, kind="longpoll-fallback")
    assert 29 <= (fallback.run_at - fallback.created_at).total_seconds() <= 30
    # Paused is Busy: a client's transition waits for the ack.
    busy = api.fire(instance_id, "go-on")
    assert busy.status_code in (400, 409)

    acked = api.client.patch(api.url(instance_id, "longpoll/ack"))
    assert acked.status_code == 200, acked.json()
    assert acked.json()["status"] == "C"
    row = Instance.objects.get(pk=instance_id)
    assert (row.current_state, row.status, row.busy_owner) == ("done", "C", "")
    assert Job.objects.get(pk=fallback.pk).status == "cancelled"

    again = api.client.post(api.url(instance_id, "longpoll/ack"))
    assert (again.status_code, again.json()["errorCode"]) == (409, "Instance:NoAckPending")


def test_without_an_ack_the_fallback_continues_the_run(api):
    publish(reviewed())
    instance_id = paused(api)
    (fallback,) = Job.objects.filter(instance_id=instance_id, kind="longpoll-fallback")
    make_due(fallback)
    assert jobs_run_due() == {"succeeded": 1}
    row = Instance.objects.get(pk=instance_id)
    assert (row.current_state, row.status) == ("done", "C")
    late = api.client.patch(api.url(instance_id, "longpoll/ack"))
    assert (late.status_code, late.json()["errorCode"]) == (409, "Instance:NoAckPending")
    keys = [r["transitionKey"] for r in api.transitions(instance_id)]
    assert keys == ["start", "submit", "$longpoll-ack", "go-on"]


def test_an_ack_on_an_instance_that_awaits_none_is_409(api):
    publish(reviewed())
    instance_id = api.started()
    response = api.client.patch(api.url(instance_id, "longpoll/ack"))
    assert (response.status_code, response.json()["errorCode"]) == (409, "Instance:NoAckPending")


def test_a_non_terminating_long_poll_only_informs(api):
    publish(reviewed(terminate=False))
    instance_id = api.started()
    answer = api.fired(instance_id, "submit")
    assert answer["status"] == "C"  # the automatic transition ran at once
    assert not Job.objects.filter(kind="longpoll-fallback").exists()
