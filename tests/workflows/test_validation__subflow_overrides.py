"""Publish checks of a SubFlow state's overrides (workflows/validation/subflows.py): every
`viewOverrides` / `overrides.views` key is a view the child shows, every `overrides.transitions`
key a transition of the child other than its start (manual, automatic, scheduled, event, shared,
cancel: vNext's `authorize` reads an override of any of them), every `overrides.states` key and
the `overrides.timeout` target a state of the child, each refused at its JSON pointer with what
vNext would do where that differs; a child that does not resolve is reported once, by the
reference check."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.conftest import DictResolver
from tests.engine.builders import script, state, transition, workflow
from workflows.services import component_publish
from workflows.validation import validate_component

PUBLISH = "/api/v1/definitions/publish"
SUBFLOW = ("attributes", "states", 1, "subFlow")


def ref(key: str, flow: str = "sys-views", version: str = "1.0.0") -> dict[str, str]:
    return {"key": key, "domain": "core", "version": version, "flow": flow}


def view(key: str) -> dict[str, Any]:
    return {
        "key": key,
        "domain": "core",
        "version": "1.0.0",
        "flow": "sys-views",
        "flowVersion": "1.0.0",
        "tags": ["test"],
        "attributes": {"type": 1, "content": {"screen": key}},
    }


RULE = script("def handler(context):\n    return True\n")
TIMER = script("def handler(context):\n    return 'PT1H'\n")
EVENT = {"mapping": script("def handler(context):\n    return {'key': 'k', 'body': {}}\n")}
VIEWS = [view(key) for key in ("form-view", "ruled-view", "fallback-view", "other-view")]


def child() -> dict[str, Any]:
    """fill (plain view) -send-> check (conditional view; an automatic move, a scheduled one, an
    event one) -> ok, with a shared manual transition and a cancel."""
    return workflow(
        [
            state(
                "fill",
                1,
                [transition("send", "check")],
                view={"view": ref("form-view"), "loadData": True},
            ),
            state(
                "check",
                2,
                [
                    transition("settle", "ok", 1, triggerKind=10),
                    transition("expire", "ok", 2, timer=TIMER),
                    transition("confirmed", "ok", 3, event=EVENT),
                ],
                view={
                    "rules": [{"rule": RULE, "view": ref("ruled-view")}],
                    "default": {"view": ref("fallback-view")},
                },
            ),
            state("ok", 3, subType=1),
        ],
        key="child",
        cancel=transition("abandon", "ok"),
        sharedTransitions=[transition("note", "$self", availableIn=["fill", "check"])],
    )


def parent(**subflow: Any) -> dict[str, Any]:
    return workflow(
        [
            state("intake", 1, [transition("go", "delegate", 1, triggerKind=10)]),
            state(
                "delegate",
                4,
                [transition("wrap-up", "closed", 1, triggerKind=10)],
                subFlow={
                    "type": "S",
                    "process": ref("child", "sys-flows"),
                    "mapping": script("def input_handler(context):\n    return {}\n"),
                    **subflow,
                },
            ),
            state("closed", 3, subType=1),
        ],
        key="parent",
    )


def validate(document: dict[str, Any]) -> list[tuple[str, str]]:
    resolver = DictResolver([*copy.deepcopy(VIEWS), child()])
    return [(v.pointer, v.message) for v in validate_component(document, resolver)]


VALID = {
    "viewOverrides": {"form-view": ref("other-view")},
    "overrides": {
        "views": {"ruled-view": ref("other-view"), "fallback-view": ref("other-view")},
        "transitions": {
            "send": {"roles": [{"role": "agent", "grant": "allow"}]},
            "settle": {"roles": [{"role": "agent", "grant": "allow"}]},
            "abandon": {"roles": []},
        },
        "states": {"fill": {"queryRoles": [{"role": "agent", "grant": "allow"}]}},
        "timeout": {
            "key": "late",
            "target": "ok",
            "versionStrategy": "None",
            "timer": {"reset": "OnEntry", "duration": "PT1M"},
        },
    },
}


def test_overrides_naming_what_the_child_has_are_valid():
    assert validate(child()) == []
    assert validate(parent(**copy.deepcopy(VALID))) == []


@pytest.mark.parametrize("key", ["settle", "expire", "confirmed", "note", "abandon"])
def test_a_roles_override_of_any_child_transition_but_the_start_is_accepted(key):
    # Automatic (settle), scheduled (expire), event (confirmed), shared (note), cancel (abandon):
    # vNext's authorize reads the stamped override of each while the child's state offers it.
    roles = [{"role": "agent", "grant": "allow"}]
    assert validate(parent(overrides={"transitions": {key: {"roles": roles}}})) == []


@pytest.mark.parametrize(
    ("overrides", "pointer", "words"),
    [
        (
            {"viewOverrides": {"ghost-view": ref("other-view")}},
            "/viewOverrides/ghost-view",
            "shows no view 'ghost-view'",
        ),
        (
            {"overrides": {"views": {"other-view": ref("form-view")}}},
            "/overrides/views/other-view",
            "shows no view 'other-view'",
        ),
        (
            {"overrides": {"transitions": {"ghost": {"roles": []}}}},
            "/overrides/transitions/ghost",
            "the child workflow workflow:core/child@1.0.0 has no transition 'ghost' (vNext would "
            "keep the override and it would never apply)",
        ),
        (
            {"overrides": {"transitions": {"start": {"roles": []}}}},
            "/overrides/transitions/start",
            "'start' is the start transition of the child workflow workflow:core/child@1.0.0: "
            "this SubFlow state runs it and no state offers it, so no caller's roles and no "
            "authorize question ever read its override (vNext checks no roles when a SubFlow "
            "state starts its child)",
        ),
        (
            {"overrides": {"states": {"ghost": {"queryRoles": []}}}},
            "/overrides/states/ghost",
            "has no state 'ghost'",
        ),
        (
            {
                "overrides": {
                    "timeout": {
                        "key": "late",
                        "target": "closed",
                        "versionStrategy": "None",
                        "timer": {"reset": "never", "duration": "PT1M"},
                    }
                }
            },
            "/overrides/timeout/target",
            "has no state 'closed'",
        ),
    ],
)
def test_an_override_key_the_child_lacks_is_refused_at_its_pointer(overrides, pointer, words):
    [(found, message)] = validate(parent(**overrides))
    assert found == "/attributes/states/1/subFlow" + pointer
    assert words in message
    assert "core/child@1.0.0" in message


def test_an_unresolved_child_is_reported_once_by_the_reference_check():
    document = parent(**copy.deepcopy(VALID))
    document["attributes"]["states"][1]["subFlow"]["process"]["version"] = "9.9.9"
    assert validate(document) == [
        (
            "/attributes/states/1/subFlow/process",
            "referenced workflow:core/child@9.9.9 does not exist",
        )
    ]


def test_publishing_through_the_api_refuses_a_bad_key_and_accepts_good_ones(operator_client):
    for document in [*VIEWS, child()]:
        component_publish(document=copy.deepcopy(document))
    bad = parent(overrides={"states": {"ghost": {"queryRoles": []}}})
    response = operator_client.post(PUBLISH, bad, format="json")
    assert response.status_code == 400, response.json()
    body = response.json()
    assert body["errorCode"] == "App:900006"
    assert [error["pointer"] for error in body["errors"]] == [
        "/attributes/states/1/subFlow/overrides/states/ghost"
    ]
    response = operator_client.post(PUBLISH, parent(**copy.deepcopy(VALID)), format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "published"
