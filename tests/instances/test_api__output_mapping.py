"""Output mapping (seed 001): `attributes.output` shapes the answer of a sync start or
transition — body, status and headers from the script — and leaves async answers alone; a script
that fails is logged and the standard envelope is sent (200); a SubFlow child keeps the standard
answer."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from instances.models import Instance
from tests.engine.builders import script, state, transition, workflow
from tests.instances.workflows import publish

pytestmark = pytest.mark.django_db
BASE = "/api/v1/core/workflows/shaped/instances"

SHAPING = """
def output_handler(context):
    body = context.body
    return ScriptResponse(
        data={"ref": body["id"], "where": context.instance.state, "n": body["attributes"].get("n")},
        status_code=201 if context.transition.key == "start" else 200,
        headers={"X-Flow": "shaped"},
    )
"""
RAISING = "def output_handler(context):\n    raise ValueError('no shape today')\n"
EMPTY = "def handler(context):\n    return ScriptResponse(data=None, status_code=204)\n"


def shaped(source: str) -> dict[str, Any]:
    return workflow(
        [
            state("ready", 1, [transition("go", "done")]),
            state("done", 2, [transition("back", "ready")]),
        ],
        key="shaped",
        output=script(source),
    )


def test_a_sync_start_and_transition_answer_what_the_script_shapes(operator_client):
    publish(shaped(SHAPING))

    started = operator_client.post(
        f"{BASE}/start?sync=true", {"attributes": {"n": 3}}, format="json"
    )

    assert started.status_code == 201
    assert started.headers["X-Flow"] == "shaped"
    ref = started.json()["ref"]
    assert started.json() == {"ref": ref, "where": "ready", "n": 3}
    went = operator_client.patch(f"{BASE}/{ref}/transitions/go?sync=true", {}, format="json")
    assert (went.status_code, went.json()) == (200, {"ref": ref, "where": "done", "n": 3})


def test_async_answers_stay_standard(operator_client):
    publish(shaped(SHAPING))

    accepted = operator_client.post(f"{BASE}/start", {}, format="json")

    assert accepted.status_code == 202
    assert set(accepted.json()) == {"id", "status"}


def test_a_script_may_answer_an_empty_body_with_its_own_status(operator_client):
    publish(shaped(EMPTY))

    started = operator_client.post(f"{BASE}/start?sync=true", {}, format="json")

    assert (started.status_code, started.content) == (204, b"")


def test_a_failing_output_mapping_is_logged_and_the_standard_envelope_sent(operator_client, caplog):
    publish(shaped(RAISING))
    caplog.set_level(logging.WARNING, "instances.services")

    started = operator_client.post(
        f"{BASE}/start?sync=true", {"attributes": {"n": 1}}, format="json"
    )

    assert started.status_code == 200
    assert started.json()["attributes"] == {"n": 1}
    assert any("output mapping of shaped" in r.getMessage() and "no shape today" in r.getMessage()
               for r in caplog.records)  # fmt: skip


def test_an_output_mapping_may_not_set_framing_headers(operator_client, caplog):
    source = (
        "def output_handler(context):\n"
        "    return ScriptResponse(data={'x': 1}, headers={'Set-Cookie': 'session=stolen'})\n"
    )
    publish(shaped(source))
    caplog.set_level(logging.WARNING, "instances.services")

    started = operator_client.post(f"{BASE}/start?sync=true", {}, format="json")

    assert started.status_code == 200
    assert "Set-Cookie" not in started.headers or "stolen" not in started.headers["Set-Cookie"]
    assert "id" in started.json()  # the standard envelope


def test_a_subflow_child_keeps_the_standard_answer(operator_client):
    child = workflow(
        [state("c-open", 1, [transition("c-close", "c-done")]), state("c-done", 3, subType=1)],
        key="kid",
        output=script(SHAPING),
    )
    child["attributes"]["type"] = "S"
    subflow = {
        "type": "S",
        "process": {"key": "kid", "domain": "core", "version": "1.0.0", "flow": "sys-flows"},
        "mapping": script(
            "def input_handler(context):\n    return ScriptResponse(data={})\n\n"
            "def output_handler(context):\n    return {}\n"
        ),
    }
    parent = workflow(
        [
            state("p-open", 1, [transition("p-go", "p-sub", 1, triggerKind=10)]),
            state("p-sub", 4, [transition("p-end", "p-done", 1, triggerKind=10)], subFlow=subflow),
            state("p-done", 3, subType=1),
        ],
        key="mom",
    )
    publish(child, parent)
    operator_client.post("/api/v1/core/workflows/mom/instances/start?sync=true", {}, format="json")
    kid = Instance.objects.get(workflow_key="kid")
    closed = operator_client.patch(
        f"/api/v1/core/workflows/kid/instances/{kid.pk}/transitions/c-close?sync=true",
        {},
        format="json",
    )

    assert closed.status_code == 200
    assert closed.json()["id"] == str(kid.pk)  # the envelope, not the shaped {"ref": ...}
