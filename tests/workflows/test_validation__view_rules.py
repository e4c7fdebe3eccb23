"""Publish checks of conditional views (`view: {rules: [{rule, view, loadData}], default}`):
accepted on states and transitions; each rule is a condition script checked like a transition
`rule` (it compiles, imports only allowed modules, defines `handler`), each rule's and the
default's view reference resolves, and the shape follows vnext-schema `viewDefinition`."""

from __future__ import annotations

import copy
from typing import Any

from tests.conftest import DictResolver
from tests.engine.builders import script, state, transition, workflow
from workflows.services import component_publish
from workflows.validation import validate_component

PUBLISH = "/api/v1/definitions/publish"
HOLDS = script('def handler(context):\n    return context.headers.get("x-platform") == "ios"\n')


def ref(key: str) -> dict[str, str]:
    return {"key": key, "domain": "core", "version": "1.0.0", "flow": "sys-views"}


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


VIEWS = [view("ios-view"), view("web-view")]


def ruled(rule: dict[str, Any] | None = None, **default: Any) -> dict[str, Any]:
    """A workflow whose form state and submit transition have a conditional view."""
    conditional: dict[str, Any] = {
        "rules": [{"rule": rule or HOLDS, "view": ref("ios-view"), "loadData": True}],
        "default": {"view": ref("web-view"), **default},
    }
    return workflow(
        [
            state(
                "form",
                1,
                [transition("submit", "done", view=copy.deepcopy(conditional))],
                view=conditional,
            ),
            state("done", 3, subType=1),
        ],
        key="ruled",
    )


def validate(document: dict[str, Any]) -> list[tuple[str, str]]:
    resolver = DictResolver(copy.deepcopy(VIEWS))
    return [(v.pointer, v.message) for v in validate_component(document, resolver)]


FORM_RULE = "/attributes/states/0/view/rules/0"
SUBMIT_RULE = "/attributes/states/0/transitions/0/view/rules/0"


def test_a_conditional_view_on_a_state_and_a_transition_is_valid():
    assert validate(ruled(loadData=False)) == []


def test_a_rule_script_must_define_handler_and_import_only_allowed_modules():
    found = validate(ruled(script("import os\n\ndef decide(context):\n    return True\n")))
    pointers = {pointer for pointer, _ in found}
    assert pointers == {f"{FORM_RULE}/rule/code", f"{SUBMIT_RULE}/rule/code"}
    messages = " ".join(message for _, message in found)
    assert "script must define handler()" in messages
    assert "os" in messages


def test_every_view_a_rule_or_the_default_names_must_exist():
    document = ruled()
    form_view = document["attributes"]["states"][0]["view"]
    form_view["rules"][0]["view"] = ref("ghost-view")
    form_view["default"]["view"] = ref("lost-view")
    assert validate(document) == [
        (
            "/attributes/states/0/view/default/view",
            "referenced view:core/lost-view@1.0.0 does not exist",
        ),
        (f"{FORM_RULE}/view", "referenced view:core/ghost-view@1.0.0 does not exist"),
    ]


def test_a_rule_entry_needs_its_rule_and_its_view():
    document = ruled()
    del document["attributes"]["states"][0]["view"]["rules"][0]["rule"]
    assert [pointer for pointer, _ in validate(document)] == [f"{FORM_RULE}/rule"]


def test_publishing_a_conditional_view_through_the_api(operator_client):
    for document in VIEWS:
        component_publish(document=copy.deepcopy(document))
    response = operator_client.post(PUBLISH, ruled(), format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "published"
