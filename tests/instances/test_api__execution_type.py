"""`executionType` (API.md 1): "S" or "A" on a transition, else on the workflow, overrides the
request's `?sync` — the start and client transitions answer 200 with the envelope, or 202 with
the job accepted, as the definition says. Publishing refuses any other value at its pointer."""

from __future__ import annotations

from typing import Any

import pytest

from instances.job_table import Job
from instances.models import Instance
from tests.engine.builders import state, transition, workflow
from tests.instances.workflows import publish

pytestmark = pytest.mark.django_db
BASE = "/api/v1/core/workflows/typed/instances"


def typed(workflow_type: str | None = None, **transition_types: str) -> dict[str, Any]:
    """ready --go--> done --back--> ready, with the given executionTypes."""

    def typed_transition(key: str, target: str) -> dict[str, Any]:
        extra: dict[str, Any] = (
            {"executionType": transition_types[key]} if key in transition_types else {}
        )
        return transition(key, target, **extra)

    extra: dict[str, Any] = {"executionType": workflow_type} if workflow_type else {}
    if "start" in transition_types:
        extra["start"] = {"executionType": transition_types["start"]}
    return workflow(
        [
            state("ready", 1, [typed_transition("go", "done")]),
            state("done", 2, [typed_transition("back", "ready")]),
        ],
        key="typed",
        **extra,
    )


def start(client: Any, query: str = "") -> Any:
    return client.post(f"{BASE}/start{query}", {}, format="json")


def test_without_execution_type_the_request_decides(operator_client):
    publish(typed())

    assert start(operator_client, "?sync=true").status_code == 200
    assert start(operator_client).status_code == 202


def test_a_synchronous_start_transition_answers_200_without_sync(operator_client):
    publish(typed(start="S"))

    response = start(operator_client)

    assert response.status_code == 200
    assert response.json()["status"] == "A"


def test_an_asynchronous_workflow_accepts_even_a_sync_request(operator_client):
    publish(typed("A"))

    response = start(operator_client, "?sync=true")

    assert response.status_code == 202
    instance_id = response.json()["id"]
    assert Job.objects.filter(instance_id=instance_id, kind="transition").exists()


def test_a_transition_s_execution_type_beats_the_workflow_s(operator_client):
    publish(typed("A", start="S", go="S"))
    instance_id = start(operator_client).json()["id"]

    went = operator_client.patch(
        f"{BASE}/{instance_id}/transitions/go?sync=false", {}, format="json"
    )
    assert went.status_code == 200
    assert Instance.objects.get(pk=instance_id).current_state == "done"

    back = operator_client.patch(
        f"{BASE}/{instance_id}/transitions/back?sync=true", {}, format="json"
    )
    assert back.status_code == 202  # `back` has none of its own: the workflow's "A"


def test_any_other_execution_type_is_refused_at_its_pointer(operator_client):
    publish(typed())  # the script task the builders need
    document = typed(go="X")
    document["version"] = "1.0.1"

    response = operator_client.post("/api/v1/definitions/publish", document, format="json")

    assert response.status_code == 400
    pointers = [e["pointer"] for e in response.json()["errors"]]
    assert "/attributes/states/0/transitions/0/executionType" in pointers
