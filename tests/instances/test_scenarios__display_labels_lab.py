"""SCENARIOS.md section 10, display-labels-lab (+ display-labels-lab-child), driven through the
HTTP API: every surface a client renders carries its labels, and `label` is given in the language
the client asks for (`Accept-Language`, exact tag, then the same language, then the first label):
the state, each offered transition and its target state, the state's view, the workflow timeout's
target; through an open subflow the parent describes the child's state and transitions. The
declared domain function `til-cached-echo` (an HTTP task, response cached 60 s under its key)
answers on an instance and on the domain route, the same `computedAtUtc` while cached."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from instances.wiring import engine
from tests.instances.http_server import http_server
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


# --- the declared domain function til-cached-echo ----------------------------------------------


@pytest.fixture
def mock_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A loopback server answering the task's `POST /api/til/ok`, and the function's mapping
    pointed at it through `context.configuration`."""
    with http_server() as base:
        configuration = engine().config.script_configuration
        monkeypatch.setitem(configuration, "Example:ApiBaseUrl", base)
        yield base


def test_the_cached_echo_answers_on_an_instance_and_on_the_domain_from_its_cache(api, mock_api):
    ref = api.started()

    first = api.function(ref, "til-cached-echo")
    assert first.status_code == 200, first.json()
    echo = first.json()["tilCachedEcho"]
    assert echo["source"] == "til-cached-echo"
    assert api.function(ref, "til-cached-echo").json()["tilCachedEcho"] == echo  # a cache hit

    on_domain = api.client.get("/api/v1/core/functions/til-cached-echo")
    assert on_domain.status_code == 200, on_domain.json()
    domain_echo = on_domain.json()["tilCachedEcho"]
    assert domain_echo["source"] == "til-cached-echo"
    again = api.client.get("/api/v1/core/functions/til-cached-echo").json()["tilCachedEcho"]
    assert again["computedAtUtc"] == domain_echo["computedAtUtc"]
