"""Publish tolerances (issue 28): a start transition without `triggerType` is manual (the only
trigger it takes), publishes and runs as manual; every script site without `code`, once stored as
a script that never ran, is refused through the publish API at the script object's pointer with
"script missing" and what to do, one test per site kind; a folder import reads a code-less
script from the file its `location` names, and the script then runs."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from tests.conftest import DictResolver
from tests.engine.builders import script_task, state, transition, workflow
from tests.instances.scenario_api import WorkflowApi
from tests.workflows.helpers import UNIVERSAL_SCRIPT
from workflows.models import Component
from workflows.services import component_publish
from workflows.validation import validate_component

PUBLISH = "/api/v1/definitions/publish"
HEADER = {"domain": "core", "version": "1.0.0", "flowVersion": "1.0.0", "tags": ["test"]}
LOCATION = "./src/Probe.py"
MISSING = (
    f"script missing ({LOCATION} has no code): give `code`, or import the folder with "
    f"`manage.py import_components`, which reads {LOCATION} beside the JSON file"
)
MISSING_WITHOUT_LOCATION = "script missing: give `code` (with `encoding` NAT, B64 or REF)"


def ref(key: str, flow: str) -> dict[str, str]:
    return {"key": key, "domain": "core", "version": "1.0.0", "flow": flow}


def code() -> dict[str, str]:
    """A script object whose code defines every handler a site may call."""
    return {"location": LOCATION, "code": UNIVERSAL_SCRIPT, "encoding": "NAT"}


def task_ref() -> dict[str, Any]:
    return {"order": 1, "task": ref("script-task", "sys-tasks"), "mapping": code()}


VIEW = {
    "key": "probe-view",
    "flow": "sys-views",
    **HEADER,
    "attributes": {"type": 1, "content": "{}"},
}
SCHEMA = {
    "key": "probe-input",
    "flow": "sys-schemas",
    **HEADER,
    "attributes": {"type": "schema", "schema": {"type": "object"}},
}
CHILD = workflow([state("begin", 1, [transition("finish", "end")]), state("end", 3)], key="child")
CHILD["attributes"]["type"] = "S"
DEPENDENCIES = [script_task(), VIEW, SCHEMA, CHILD]
VIEW_REF = ref("probe-view", "sys-views")


def flow(*states: dict[str, Any], **attributes: Any) -> dict[str, Any]:
    """Workflow `probe`: the given states, `a` first (Initial), then a final `b`."""
    return workflow(copy.deepcopy([*states, state("b", 3)]), key="probe", **attributes)


def move(trigger: int = 0, **extra: Any) -> dict[str, Any]:
    """Transition `go` to `b`."""
    return transition("go", "b", trigger, **extra)


def function(**attributes: Any) -> dict[str, Any]:
    return {
        "key": "probe-function",
        "flow": "sys-functions",
        **HEADER,
        "attributes": {"scope": "I", "task": task_ref(), **attributes},
    }


def timeout() -> dict[str, Any]:
    return {
        "key": "expire",
        "target": "b",
        "versionStrategy": "None",
        "timer": {"reset": "never", "duration": "PT1H"},
        "mapping": code(),
    }


SUBFLOW = {"type": "S", "process": ref("child", "sys-flows"), "mapping": code()}
TASK_STATE = state("a", 1, [move()], onEntries=[task_ref()])
START = ("attributes", "startTransition")
A = ("attributes", "states", 0)
GO = (*A, "transitions", 0)

# Every kind of script site: (the document with its script, the path of the script object).
SITES: dict[str, tuple[Callable[[], dict[str, Any]], tuple[Any, ...]]] = {
    "automatic rule": (lambda: flow(state("a", 1, [move(1, rule=code())])), (*GO, "rule")),
    "timer": (lambda: flow(state("a", 1, [move(2, timer=code())])), (*GO, "timer")),
    "transition mapping": (lambda: flow(state("a", 1, [move(mapping=code())])), (*GO, "mapping")),
    "start mapping": (
        lambda: flow(state("a", 1, [move()]), start={"mapping": code()}),
        (*START, "mapping"),
    ),
    "task mapping": (lambda: flow(TASK_STATE), (*A, "onEntries", 0, "mapping")),
    "onExecutionTasks mapping": (
        lambda: flow(state("a", 1, [move(onExecutionTasks=[task_ref()])])),
        (*GO, "onExecutionTasks", 0, "mapping"),
    ),
    "lock key": (
        lambda: flow(
            state("a", 1, [move(resourceLock={"keyExpression": code(), "action": "Acquire"})])
        ),
        (*GO, "resourceLock", "keyExpression"),
    ),
    "transition event mapping": (
        lambda: flow(state("a", 1, [move(3, event={"mapping": code()})])),
        (*GO, "event", "mapping"),
    ),
    "start event mapping": (
        lambda: flow(state("a", 1, [move()]), event={"mapping": code()}),
        ("attributes", "event", "mapping"),
    ),
    "subflow mapping": (
        lambda: flow(
            state("a", 1, [transition("enter", "sub")]),
            state("sub", 4, [transition("leave", "b", 1, triggerKind=10)], subFlow=SUBFLOW),
        ),
        ("attributes", "states", 1, "subFlow", "mapping"),
    ),
    "output mapping": (
        lambda: flow(state("a", 1, [move()]), output=code()),
        ("attributes", "output"),
    ),
    "notification mapping": (
        lambda: flow(state("a", 1, [move()], notifications=[{"type": 0, "mapping": code()}])),
        (*A, "notifications", 0, "mapping"),
    ),
    "notification rule": (
        lambda: flow(
            state("a", 1, [move()], notifications=[{"type": 0, "mapping": code(), "rule": code()}])
        ),
        (*A, "notifications", 0, "rule"),
    ),
    "view rule": (
        lambda: flow(state("a", 1, [move()], view={"rules": [{"rule": code(), "view": VIEW_REF}]})),
        (*A, "view", "rules", 0, "rule"),
    ),
    "workflow timeout mapping": (
        lambda: flow(state("a", 1, [move()]), timeout=timeout()),
        ("attributes", "timeout", "mapping"),
    ),
    "function task mapping": (function, ("attributes", "task", "mapping")),
    "function output mapping": (lambda: function(output=code()), ("attributes", "output")),
    "function cache key": (
        lambda: function(cache={"key": "k", "ttlInSeconds": 60, "keyExpression": code()}),
        ("attributes", "cache", "keyExpression"),
    ),
    "function cache generation key": (
        lambda: function(cache={"ttlInSeconds": 60, "generationKeyExpression": code()}),
        ("attributes", "cache", "generationKeyExpression"),
    ),
    "function input schema rule": (
        lambda: function(
            inputSchema=[{"rule": code(), "schema": ref("probe-input", "sys-schemas")}]
        ),
        ("attributes", "inputSchema", 0, "rule"),
    ),
    "function input view rule": (
        lambda: function(inputView={"views": [{"rule": code(), "view": VIEW_REF}]}),
        ("attributes", "inputView", "views", 0, "rule"),
    ),
    "extension task mapping": (
        lambda: {
            "key": "probe-extension",
            "flow": "sys-extensions",
            **HEADER,
            "attributes": {"type": 3, "scope": 1, "task": task_ref()},
        },
        ("attributes", "task", "mapping"),
    ),
    "helper library (sys-mappings)": (
        lambda: {
            "key": "probe-helper",
            "flow": "sys-mappings",
            **HEADER,
            "attributes": {"name": "ProbeHelper", **code()},
        },
        ("attributes",),
    ),
}


def at(document: dict[str, Any], path: tuple[Any, ...]) -> dict[str, Any]:
    node: Any = document
    for part in path:
        node = node[part]
    assert isinstance(node, dict)
    return node


def pointer(path: tuple[Any, ...]) -> str:
    return "".join(f"/{part}" for part in path)


def violations(document: dict[str, Any]) -> list[tuple[str, str]]:
    resolver = DictResolver(copy.deepcopy(DEPENDENCIES))
    return [(v.pointer, v.message) for v in validate_component(document, resolver)]


def errors(response: Any) -> list[tuple[str, str]]:
    return [(error["pointer"], error["message"]) for error in response.json()["errors"]]


@pytest.fixture
def registry(db: None) -> None:
    for document in DEPENDENCIES:
        component_publish(document=copy.deepcopy(document))


# --- triggerType ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cancel", "exit", "updateData"])
def test_only_the_start_may_leave_out_trigger_type(name):
    # The vNext schema and seed 001 require it on cancel, exit and updateData, and no vNext
    # runtime behaviour says otherwise: there it is still refused, the start is not.
    document = flow(state("a", 1, [move()]))
    special = transition(name.lower(), "$self" if name == "updateData" else "b")
    del special["triggerType"]
    document["attributes"][name] = special
    del document["attributes"]["startTransition"]["triggerType"]
    assert violations(document) == [(f"/attributes/{name}/triggerType", "is required")]


def test_a_start_transition_with_another_trigger_is_still_refused():
    document = flow(state("a", 1, [move()]), start={"triggerType": 1})
    assert violations(document) == [
        (
            "/attributes/startTransition/triggerType",
            "startTransition is manual only (triggerType 0), got 1",
        )
    ]


@pytest.mark.postgres
def test_a_start_transition_without_trigger_type_publishes_and_starts_as_manual(operator_client):
    document = flow(state("a", 1, [move()]))
    del document["attributes"]["startTransition"]["triggerType"]
    response = operator_client.post(PUBLISH, document, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "published"
    stored = Component.objects.get(kind="workflow", key="probe").document
    assert "triggerType" not in stored["attributes"]["startTransition"]

    api = WorkflowApi(operator_client, "probe", audit=("transitionKey", "toState", "triggerType"))
    instance = api.started({"attributes": {"n": 1}})
    assert api.detail(instance)["attributes"] == {"n": 1}
    assert api.audit(instance) == [("start", "a", 0)]
    assert api.fired(instance, "go")["status"] == "C"


# --- script sites without code -------------------------------------------------------------------


@pytest.mark.parametrize("site", SITES.values(), ids=SITES.keys())
def test_every_site_document_is_valid_with_its_code(site):
    build, _ = site
    assert violations(build()) == []


@pytest.mark.parametrize("site", SITES.values(), ids=SITES.keys())
def test_a_script_site_without_code_is_refused_at_its_pointer(operator_client, registry, site):
    build, path = site
    document = build()
    del at(document, path)["code"]
    response = operator_client.post(PUBLISH, document, format="json")
    assert response.status_code == 400
    assert response.json()["errorCode"] == "App:900006"
    assert errors(response) == [(pointer(path), MISSING)]
    assert not Component.objects.filter(key=document["key"]).exists()
    # The same document with its code publishes: the code was all it lacked.
    assert operator_client.post(PUBLISH, build(), format="json").status_code == 200


@pytest.mark.parametrize(
    "script",
    [{"type": "G"}, {"encoding": "NAT"}, {}],
    ids=["global, no code", "encoding only", "empty object"],
)
def test_a_rule_with_neither_code_nor_location_is_refused(operator_client, registry, script):
    # Each was once published and never fired: the rule holds only when a script says so.
    document = flow(state("a", 1, [move(1, rule=script)]))
    response = operator_client.post(PUBLISH, document, format="json")
    assert response.status_code == 400
    assert errors(response) == [(pointer((*GO, "rule")), MISSING_WITHOUT_LOCATION)]


def test_an_empty_code_is_refused_at_the_code():
    document = flow(state("a", 1, [move(1, rule={**code(), "code": " "})]))
    assert violations(document) == [(pointer((*GO, "rule", "code")), MISSING)]


def test_a_task_mapping_written_global_with_no_code_means_no_mapping():
    # The older docs' `{"type": "G"}`: the task runs with its own config, as with no mapping.
    document = flow(TASK_STATE)
    at(document, (*A, "onEntries", 0))["mapping"] = {"type": "G"}
    assert violations(document) == []
    at(document, (*A, "onEntries", 0))["mapping"] = {"type": "G", "location": LOCATION}
    assert violations(document) == [(pointer((*A, "onEntries", 0, "mapping")), MISSING)]


# --- folder import -------------------------------------------------------------------------------


def gated_flow(location: str) -> dict[str, Any]:
    """`probe`: `a` moves to `b` by itself when its rule holds; the rule has only a location."""
    return flow(state("a", 1, [move(1, rule={"location": location})]))


@pytest.mark.postgres
def test_a_folder_import_reads_a_code_less_script_from_its_location(
    tmp_path: Path, operator_client
):
    rule = "def handler(context):\n    return context.instance.data.get('go') is True\n"
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "Gate.py").write_text(rule)
    (tmp_path / "probe.json").write_text(json.dumps(gated_flow("./src/Gate.csx")))
    call_command("import_components", str(tmp_path), "--no-progress")

    stored = Component.objects.get(kind="workflow", key="probe").document
    assert at(stored, (*GO, "rule")) == {
        "location": "./src/Gate.py",
        "code": rule,
        "encoding": "NAT",
    }
    api = WorkflowApi(operator_client, "probe", history=("transitionKey", "toState"))
    stays = api.started({"attributes": {"go": False}})
    moves = api.started({"attributes": {"go": True}})
    assert api.history(stays) == [("start", "a")]
    assert api.history(moves) == [("start", "a"), ("go", "b")]


def test_a_folder_import_without_the_location_file_is_refused_at_the_site(
    tmp_path: Path, db, capsys
):
    (tmp_path / "probe.json").write_text(json.dumps(gated_flow("./src/Gate.csx")))
    with pytest.raises(CommandError):
        call_command("import_components", str(tmp_path), "--no-progress")
    assert (
        f"{pointer((*GO, 'rule'))}: script missing (./src/Gate.csx has no code): give `code`, or "
        "import the folder with `manage.py import_components`, which reads ./src/Gate.py beside "
        "the JSON file"
    ) in capsys.readouterr().err
    assert not Component.objects.filter(key="probe").exists()
