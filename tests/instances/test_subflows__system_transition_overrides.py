"""A SubFlow state's roles override of a child transition no caller fires (automatic, scheduled,
event), taken as the vNext runtime takes it: publish accepts it, the child pins it, and it
decides what `authorize?transitionKey=` answers for that transition while the child's state
offers it (vNext's oracle reads the stamped override for every transition of the state), while
the engine still fires the transition whatever anyone's roles: roles gate only what a caller
fires, and no caller fires these."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from instances.job_handlers import jobs_run_due
from instances.models import Instance
from tests.engine.builders import script, state, transition, workflow
from tests.instances.scenario_api import make_due, timers
from tests.instances.workflows import publish

pytestmark = pytest.mark.django_db

PARENT = "/api/v1/core/workflows/sys-parent/instances"
CHILD = "/api/v1/core/workflows/sys-child/instances"
AGENTS = [{"role": "parent.agent", "grant": "allow"}]
SYSTEM_FIRED = ("auto-go", "tick", "confirmed")
HOURLY = "def handler(context):\n    return 'PT1H'\n"


def child_flow() -> dict[str, Any]:
    """wait (an automatic move whose rule never holds, an hourly scheduled one, an event one)
    -> done; none of them has roles of its own."""
    return workflow(
        [
            state(
                "wait",
                1,
                [
                    transition(
                        "auto-go",
                        "done",
                        1,
                        rule=script("def handler(context):\n    return False\n"),
                    ),
                    transition("tick", "done", 2, timer=script(HOURLY)),
                    transition(
                        "confirmed",
                        "done",
                        3,
                        event={
                            "mapping": script(
                                "def handler(context):\n    return {'key': 'k', 'body': {}}\n"
                            )
                        },
                    ),
                ],
            ),
            state("done", 3, subType=1),
        ],
        key="sys-child",
        type="S",
    )


def parent_flow() -> dict[str, Any]:
    """intake -auto-> delegate (starts sys-child; its three system-fired transitions only for
    parent.agent) -auto-> closed."""
    return workflow(
        [
            state("intake", 1, [transition("delegate-now", "delegate", 1, triggerKind=10)]),
            state(
                "delegate",
                4,
                [transition("wrap-up", "closed", 1, triggerKind=10)],
                subFlow={
                    "type": "S",
                    "process": {
                        "key": "sys-child",
                        "domain": "core",
                        "version": "1.0.0",
                        "flow": "sys-flows",
                    },
                    "mapping": script("def input_handler(context):\n    return {}\n"),
                    "overrides": {"transitions": {key: {"roles": AGENTS} for key in SYSTEM_FIRED}},
                },
            ),
            state("closed", 3, subType=1),
        ],
        key="sys-parent",
    )


@pytest.fixture
def parent_and_child(operator_client: APIClient) -> tuple[str, str]:
    """A started parent (published through the API) waiting on its child in `wait`."""
    publish(child_flow())
    published = operator_client.post("/api/v1/definitions/publish", parent_flow(), format="json")
    assert published.status_code == 200, published.json()
    response = operator_client.post(f"{PARENT}/start?sync=true", {}, format="json")
    assert response.status_code == 200, response.json()
    parent_id = str(response.json()["id"])
    child = Instance.objects.get(parent_correlation__parent__pk=parent_id)
    assert child.current_state == "wait"
    return parent_id, str(child.pk)


def verdict(client: APIClient, child_id: str, key: str, role: str) -> tuple[int, Any]:
    response = client.get(f"{CHILD}/{child_id}/functions/authorize?transitionKey={key}&role={role}")
    return response.status_code, response.json()


@pytest.mark.parametrize("key", SYSTEM_FIRED)
def test_the_override_decides_what_authorize_answers_for_the_transition(
    operator_client, parent_and_child, key
):
    _, child_id = parent_and_child
    assert Instance.objects.get(pk=child_id).extra["subflowOverrides"]["transitions"][key] == (
        AGENTS
    )

    assert verdict(operator_client, child_id, key, "parent.agent") == (200, {"allowed": True})
    assert verdict(operator_client, child_id, key, "parent.intern") == (403, {"allowed": False})

    # A child started on its own runs under its own (empty) roles.
    alone = operator_client.post(f"{CHILD}/start?sync=true", {}, format="json")
    assert alone.status_code == 200, alone.json()
    alone_id = str(alone.json()["id"])
    assert verdict(operator_client, alone_id, key, "parent.intern") == (200, {"allowed": True})


def test_the_engine_fires_an_overridden_transition_whatever_the_roles(
    operator_client, parent_and_child
):
    parent_id, child_id = parent_and_child
    # No caller fires it, with or without the override's role.
    refused = operator_client.patch(
        f"{CHILD}/{child_id}/transitions/auto-go?sync=true", {}, format="json"
    )
    assert (refused.status_code, refused.json()["errorCode"]) == (400, "Transition:100020")

    (tick,) = timers(child_id)
    assert tick.payload["transition"] == "tick"
    make_due(tick)
    for _ in range(3):  # the timer, then the parent's resume it queues
        jobs_run_due()

    child = Instance.objects.get(pk=child_id)
    assert (child.status, child.current_state) == ("C", "done")
    assert child.transitions.filter(transition_key="tick").count() == 1
    parent = Instance.objects.get(pk=parent_id)
    assert (parent.status, parent.current_state) == ("C", "closed")
