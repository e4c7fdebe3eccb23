"""SCENARIOS.md section 10, display-labels-lab (+ display-labels-lab-child), driven through the
HTTP API: every surface a client renders carries its labels, and `label` is given in the language
the client asks for (`Accept-Language`, exact tag, then the same language, then the first label):
the state, each offered transition and its target state, the state's view, the workflow timeout's
target; through an open subflow the parent describes the child's state and transitions.

Deviation (examples/README.md): the declared domain function `til-cached-echo` is left out of
the example copy (custom functions are not served yet)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.instances.scenario_api import WorkflowApi, api_fixture

pytestmark = pytest.mark.django_db

api = api_fixture("display-labels-lab")


def state_in(api: WorkflowApi, ref: str, language: str) -> dict[str, Any]:
    response = api.function(ref, "state", headers={"Accept-Language": language})
    assert response.status_code == 200, response.content
    body: dict[str, Any] = response.json()
    return body


def offered(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in body["transitions"]}


def test_the_review_state_and_its_transitions_carry_labels_in_the_asked_language(api):
    ref = api.started()

    english = state_in(api, ref, "en-US")
    assert (english["state"], english["label"], english["stateSubType"]) == (
        "dl-review",
        "Review",
        "human",
    )
    assert {"language": "tr-TR", "label": "İnceleme"} in english["labels"]
    transitions = offered(english)
    assert transitions["dl-approve"]["label"] == "Approve"
    assert transitions["dl-approve"]["target"]["key"] == "dl-approved"
    assert transitions["dl-approve"]["target"]["label"] == "Approved"
    assert transitions["dl-approve"]["target"]["stateType"] == 3
    assert transitions["dl-ask-sub"]["target"]["label"] == "In Child Flow"
    assert transitions["dl-ask-sub"]["target"]["stateType"] == 4
    assert transitions["dl-note"]["target"]["key"] == "dl-review"  # $self
    assert english["view"]["hasView"] is True
    assert english["view"]["label"]
    assert english["timeout"]["target"] == "dl-expired"
    assert english["timeout"]["targetState"]["stateSubType"] == 8
    assert english["timeout"]["targetState"]["labels"]

    turkish = state_in(api, ref, "tr")
    assert turkish["label"] == "İnceleme"
    assert offered(turkish)["dl-approve"]["label"] == "Onayla"
    assert offered(turkish)["dl-ask-sub"]["target"]["label"] == "Alt Ak\u0131\u015fta"
    # A language nobody wrote: the first label.
    assert state_in(api, ref, "de-DE")["label"] == "İnceleme"


def test_through_the_subflow_the_parent_describes_the_childs_state(api):
    ref = api.started()
    answer = api.fired(ref, "dl-ask-sub")
    assert answer["status"] == "B"

    body = state_in(api, ref, "en-US")
    assert body["state"] == "child-review"
    assert body["stateSubType"] == "human"
    assert body["label"]
    child_done = offered(body)["child-done"]
    assert child_done["label"]
    assert child_done["target"]["key"] == "child-finished"
    (correlation,) = body["activeCorrelations"]
    assert correlation["subFlowName"] == "display-labels-lab-child"

    api.fired(ref, "child-done")  # forwarded to the child
    detail = api.detail(ref)
    assert detail["metadata"]["currentState"] == "dl-sub"  # no transitions out: it stays
    assert detail["attributes"]["childSettled"] is True


def test_approve_with_its_schema_ends_in_approved(api):
    ref = api.started()

    invalid = api.fire(ref, "dl-approve", {"attributes": {"comment": 42}})
    assert invalid.status_code == 400, invalid.json()
    api.fired(ref, "dl-approve", {"attributes": {"comment": "fine"}})

    assert api.detail(ref)["metadata"]["currentState"] == "dl-approved"
