"""Every feature the format defines is executed: the table of features refused at publish as "not
supported by this version" is gone, and documents using what it once listed (functions,
extensions, helpers, view rules, overrides, onTimeout, timer.reset, notification tasks, trigger
settings for remote targets ...) and empty or neutral values (`roles: []`, `errorBoundary: null`,
...) are valid, through `validate_component` and through the publish API."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from instances.engine.task_types import EXECUTORS
from tests.conftest import DictResolver
from tests.workflows.helpers import UNIVERSAL_SCRIPT
from workflows.services import component_publish
from workflows.validation import validate_component

LABELS = [{"label": "Probe", "language": "en-US"}]
HEADER = {"domain": "core", "version": "1.0.0", "flowVersion": "1.0.0", "tags": ["test"]}
PUBLISH = "/api/v1/definitions/publish"


def ref(key: str, flow: str) -> dict[str, str]:
    return {"key": key, "domain": "core", "version": "1.0.0", "flow": flow}


def script() -> dict[str, str]:
    return {"location": "./src/Probe.py", "code": UNIVERSAL_SCRIPT, "encoding": "NAT"}


def task(key: str, task_type: str, config: dict[str, Any]) -> dict[str, Any]:
    return {"key": key, "flow": "sys-tasks", **HEADER, "attributes": {"type": task_type, **config}}


def task_ref(key: str = "script-task") -> dict[str, Any]:
    return {"order": 1, "task": ref(key, "sys-tasks"), "mapping": script()}


def transition(key: str, target: str, **extra: Any) -> dict[str, Any]:
    return {
        "key": key,
        "target": target,
        "triggerType": 0,
        "versionStrategy": "None",
        "labels": LABELS,
        **extra,
    }


def state(key: str, state_type: int, *transitions: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "key": key,
        "stateType": state_type,
        "versionStrategy": "None",
        "labels": LABELS,
        "transitions": list(transitions),
        **extra,
    }


def base_workflow(key: str = "probe") -> dict[str, Any]:
    """intake -submit-> review -approve-> done, a shared `$self` note, cancel, a timeout."""
    return {
        "key": key,
        "flow": "sys-flows",
        **HEADER,
        "attributes": {
            "type": "F",
            "labels": LABELS,
            "startTransition": transition("start", "intake"),
            "states": [
                state("intake", 1, transition("submit", "review", onExecutionTasks=[task_ref()])),
                state(
                    "review",
                    2,
                    transition("approve", "done"),
                    view={"view": ref("review-view", "sys-views"), "loadData": True},
                ),
                state("done", 3, subType=1),
            ],
            "sharedTransitions": [transition("note", "$self", availableIn=["intake", "review"])],
            "cancel": transition("cancel", "done"),
            "timeout": {
                "key": "expire",
                "target": "done",
                "versionStrategy": "None",
                "timer": {"reset": "never", "duration": "PT1H"},
            },
        },
    }


SCRIPT_TASK = task("script-task", "7", {"config": {}})
TYPED_TASKS = {
    "11": task("typed-11", "11", {"config": {"flow": "child", "domain": "core"}}),
    "12": task(
        "typed-12", "12", {"config": {"flow": "child", "domain": "core", "transitionName": "go"}}
    ),
    "14": task("typed-14", "14", {"config": {"flow": "child", "domain": "core"}}),
}
VIEW = {
    "key": "review-view",
    "flow": "sys-views",
    **HEADER,
    "attributes": {"type": 1, "content": "{}"},
}
HELPER = {
    "key": "probe-helper",
    "flow": "sys-mappings",
    **HEADER,
    "attributes": {
        "name": "ProbeHelper",
        "code": "def double(x):\n    return 2 * x\n",
        "encoding": "NAT",
    },
}
FUNCTION = {
    "key": "probe-function",
    "flow": "sys-functions",
    **HEADER,
    "attributes": {"scope": "I", "task": task_ref()},
}
EXTENSION = {
    "key": "probe-extension",
    "flow": "sys-extensions",
    **HEADER,
    "attributes": {
        "type": 3,
        "scope": 1,
        "task": {**task_ref(), "mapping": {"code": UNIVERSAL_SCRIPT, "encoding": "NAT"}},
    },
}
CHILD = base_workflow("child")
# Everything a probe references, in publishing order.
DEPENDENCIES = [
    SCRIPT_TASK,
    VIEW,
    HELPER,
    *TYPED_TASKS.values(),
    FUNCTION,
    EXTENSION,
    CHILD,
]


def resolver() -> DictResolver:
    return DictResolver(copy.deepcopy(DEPENDENCIES))


def validate(document: dict[str, Any]) -> list[tuple[str, str]]:
    return [(v.pointer, v.message) for v in validate_component(document, resolver())]


# --- uses ---------------------------------------------------------------------------------------

Mutate = Callable[[dict[str, Any]], Any]
INTAKE, REVIEW, DONE = 0, 1, 2


def states(document: dict[str, Any]) -> list[dict[str, Any]]:
    return document["attributes"]["states"]


def submit(document: dict[str, Any]) -> dict[str, Any]:
    return states(document)[INTAKE]["transitions"][0]


def setting(*path: Any, value: Any) -> Mutate:
    """A mutation setting `value` at `path` (under the document)."""

    def apply(document: dict[str, Any]) -> None:
        node: Any = document
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = copy.deepcopy(value)

    return apply


def each(*mutations: Mutate) -> Mutate:
    def apply(document: dict[str, Any]) -> None:
        for mutation in mutations:
            mutation(document)

    return apply


REVIEW_PATH = ("attributes", "states", REVIEW)
SUBMIT_PATH = ("attributes", "states", INTAKE, "transitions", 0)
SUBMIT_TASK = (*SUBMIT_PATH, "onExecutionTasks", 0)
EVENT = {"mapping": script()}


def base_function() -> dict[str, Any]:
    """An instance function running the script task (custom functions are executed); not
    `FUNCTION`'s key, which the registry holds with other content."""
    return {**copy.deepcopy(FUNCTION), "key": "probe-function-settings"}


def test_the_base_documents_are_valid():
    assert validate(base_workflow()) == []
    for document in DEPENDENCIES:
        if document not in TYPED_TASKS.values():
            assert validate(copy.deepcopy(document)) == [], document["key"]


# --- neutral values -----------------------------------------------------------------------------

NEUTRAL = {
    "errorBoundary null, {} and rules without onTimeout": each(
        setting("attributes", "errorBoundary", value=None),
        setting(*REVIEW_PATH, "errorBoundary", value={}),
        setting(*SUBMIT_TASK, "errorBoundary", value={"onError": [{"action": 5}]}),
    ),
    "interaction null": setting(*REVIEW_PATH, "interaction", value=None),
    "interaction without longPoll": setting(*REVIEW_PATH, "interaction", value={}),
    "no notifications, no alias": each(
        setting(*REVIEW_PATH, "notifications", value=[]),
        setting(*REVIEW_PATH, "alias", value=[]),
    ),
    "output and event null": each(
        setting("attributes", "output", value=None),
        setting("attributes", "event", value=None),
        setting(*SUBMIT_PATH, "event", value=None),
    ),
    "roles and queryRoles empty": each(
        setting(*SUBMIT_PATH, "roles", value=[]),
        setting("attributes", "startTransition", "roles", value=[]),
        setting("attributes", "cancel", "roles", value=[]),
        setting("attributes", "queryRoles", value=[]),
        setting(*REVIEW_PATH, "queryRoles", value=[]),
        setting(
            "attributes",
            "sharedTransitions",
            0,
            "availableIn",
            value=["intake", {"state": "review", "roles": []}, {"state": "done"}],
        ),
    ),
    "config null": setting("attributes", "config", value=None),
    "functionCache null": setting("attributes", "config", value={"functionCache": None}),
    "functionCache without a positive TTL": setting(
        "attributes", "config", value={"functionCache": {"ttlSeconds": 0}}
    ),
    "functionCache {}": setting("attributes", "config", value={"functionCache": {}}),
    "no extensions, features or functions": each(
        setting("attributes", "extensions", value=[]),
        setting("attributes", "features", value=[]),
        setting("attributes", "functions", value=[]),
        setting(*REVIEW_PATH, "view", "extensions", value=[]),
    ),
    "no helpers, allowed modules": setting(
        "attributes", "scripts", value={"helpers": [], "allowedModules": ["statistics"]}
    ),
    "subFlow null": setting(*REVIEW_PATH, "subFlow", value=None),
    **{
        f"timer reset {reset!r}": setting("attributes", "timeout", "timer", "reset", value=reset)
        for reset in ["never", "None", "false", "", "NEVER"]
    },
}


@pytest.mark.parametrize("mutate", NEUTRAL.values(), ids=NEUTRAL.keys())
def test_an_empty_or_neutral_value_is_not_a_use(mutate):
    document = base_workflow()
    mutate(document)
    assert validate(document) == []


# --- whole components ---------------------------------------------------------------------------


def test_functions_and_extensions_are_executed_so_declaring_and_naming_them_is_no_use():
    document = base_workflow()
    each(
        setting("attributes", "functions", value=[ref("probe-function", "sys-functions")]),
        setting("attributes", "features", value=[ref("probe-extension", "sys-extensions")]),
        setting(*REVIEW_PATH, "view", "extensions", value=["probe-extension"]),
    )(document)
    assert validate(document) == []
    assert validate(copy.deepcopy(FUNCTION)) == []
    assert validate(copy.deepcopy(EXTENSION)) == []


def test_function_verbs_contracts_and_cache_key_sources_are_executed_so_using_them_is_no_use():
    document = base_function()
    each(
        setting("attributes", "verbs", value=["GET", "POST"]),
        setting("attributes", "inputView", value=ref("review-view", "sys-views")),
        setting("attributes", "outputView", value=ref("review-view", "sys-views")),
        setting(
            "attributes",
            "cache",
            value={
                "key": "probe",
                "ttlInSeconds": 60,
                "keyExpression": script(),
                "generationKey": "probe-generation",
                "storeName": "default",
            },
        ),
    )(document)
    assert validate(document) == []


def test_every_task_type_the_design_plans_has_an_executor_so_none_is_refused():
    # DESIGN 4.4's task types run (the Fan-Out, 21, is run by the task runner itself), and a
    # document using any of them is valid.
    assert {"6", "7", "8", "10", "11", "12", "13", "14", "15"} <= set(EXECUTORS)
    for task_type, document in TYPED_TASKS.items():
        assert validate(copy.deepcopy(document)) == [], task_type
    # A type without an executor is refused at publish instead of failing at run time with
    # `Task:Unsupported` (tests/workflows/test_validation__task_types.py).
    assert validate(task("llm", "20", {"config": {"componentName": "openai"}})) == [
        (
            "/attributes/type",
            "task type 20 (DaprConversationTask) needs an LLM conversation component, which "
            "this runtime does not provide",
        )
    ]


# --- through the API ----------------------------------------------------------------------------


@pytest.fixture
def registry(db):
    """The dependencies, published."""
    for document in DEPENDENCIES:
        component_publish(document=copy.deepcopy(document))


def test_a_batch_reports_a_violation_under_the_document_index(operator_client, registry):
    config = {"flow": "child", "domain": "core", "transitionName": "go", "tags": ["x"]}
    document = task("batch-trigger", "12", {"config": config})
    response = operator_client.post(PUBLISH, [base_workflow("batch-ok"), document], format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {
            "pointer": "/1/attributes/config/tags",
            "message": "tags are given when an instance starts, not by a transition",
        }
    ]


@pytest.mark.parametrize(
    ("task_type", "setting_name", "value", "message"),
    [
        ("11", "timeoutSeconds", 5, "applies to a call to another runtime; domain 'core' is "
         "served by this one (an operator routes domains with VNEXT_REMOTE_DOMAINS)"),
        ("14", "validateSsl", False, "a SubProcess child starts in this runtime: there is no "
         "call to configure"),
        ("12", "version", "1.0.0", "a transition runs on the version its instance pinned at "
         "start"),
        ("12", "tags", ["x"], "tags are given when an instance starts, not by a transition"),
    ],
)  # fmt: skip
def test_trigger_task_settings_the_target_would_not_use_are_refused(
    task_type, setting_name, value, message
):
    # No longer a missing feature: a rule of where the target runs (remote domains use them).
    config = {"flow": "child", "domain": "core", setting_name: value}
    if task_type == "12":
        config["transitionName"] = "go"
    assert validate(task("idle", task_type, {"config": config})) == [
        (f"/attributes/config/{setting_name}", message)
    ]
