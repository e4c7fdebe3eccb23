"""The table of features this version does not execute (`workflows/validation/unsupported.py`):
each row refuses a minimal document that uses its feature, at the exact pointer, with
"<feature> is not supported by this version", and the same document without the feature is valid
(through `validate_component` and through the publish API). Every place a feature can be used is
reported; an empty or neutral value (`roles: []`, `errorBoundary: null`, ...) is not a use."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import pytest

from instances.engine.task_types import EXECUTORS
from tests.conftest import DictResolver
from tests.workflows.helpers import UNIVERSAL_SCRIPT
from workflows.services import component_publish
from workflows.validation import validate_component
from workflows.validation.unsupported import (
    UNSUPPORTED,
    UNSUPPORTED_TASK_TYPES,
    UnsupportedFeature,
)

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
    "10": task("typed-10", "10", {"config": {"channels": ["sms"]}}),
    "11": task("typed-11", "11", {"config": {"flow": "child", "domain": "core"}}),
    "12": task(
        "typed-12", "12", {"config": {"flow": "child", "domain": "core", "transitionName": "go"}}
    ),
    "14": task("typed-14", "14", {"config": {"flow": "child", "domain": "core"}}),
}
# A direct trigger naming a version: the in-process call runs on the instance's own version.
IDLE_TRIGGER = task(
    "idle-trigger",
    "12",
    {"config": {"flow": "child", "domain": "core", "transitionName": "go", "version": "1.0.0"}},
)
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
    IDLE_TRIGGER,
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
ROLES = [{"role": "maker", "grant": "allow"}]
EVENT = {"mapping": script()}
RULED_VIEW = {
    "rules": [{"rule": script(), "view": ref("review-view", "sys-views")}],
    "default": {"view": ref("review-view", "sys-views")},
}


def use_task(task_type: str) -> Mutate:
    return setting(*SUBMIT_TASK, "task", value=ref(f"typed-{task_type}", "sys-tasks"))


@dataclass
class Use:
    """A use of a row's feature in the base workflow, and every pointer it is reported at."""

    feature: str
    name: str
    mutate: Mutate
    pointers: list[str]
    base: Callable[[], dict[str, Any]] = field(default=lambda: base_workflow())


def _row(prefix: str) -> str:
    """The feature of the one row whose name starts with `prefix` (typos fail loudly)."""
    [feature] = [row.feature for row in UNSUPPORTED if row.feature.startswith(prefix)]
    return feature


# The first use of each row is its minimal use: the only violation of its document.
USES = [
    Use(
        _row("error boundary timeout"),
        "task level",
        setting(*SUBMIT_TASK, "errorBoundary", value={"onTimeout": {"action": 0}}),
        ["/attributes/states/0/transitions/0/onExecutionTasks/0/errorBoundary/onTimeout"],
    ),
    Use(
        _row("error boundary timeout"),
        "state and workflow level, beside onError rules (which are executed)",
        each(
            setting(
                *REVIEW_PATH,
                "errorBoundary",
                value={"onError": [{"action": 3}], "onTimeout": {"action": 0}},
            ),
            setting("attributes", "errorBoundary", value={"onTimeout": {"action": 0}}),
        ),
        ["/attributes/errorBoundary/onTimeout", "/attributes/states/1/errorBoundary/onTimeout"],
    ),
    Use(
        _row("extension"),
        "view extensions",
        setting(*REVIEW_PATH, "view", "extensions", value=["customer-detail"]),
        ["/attributes/states/1/view/extensions"],
    ),
    Use(
        _row("extension"),
        "workflow extensions and features",
        each(
            setting("attributes", "extensions", value=[ref("probe-extension", "sys-extensions")]),
            setting("attributes", "features", value=[ref("probe-extension", "sys-extensions")]),
        ),
        ["/attributes/extensions", "/attributes/features"],
    ),
    Use(
        _row("extension"),
        "extensions of a conditional view's rule and default",
        each(
            setting(*REVIEW_PATH, "view", value=RULED_VIEW),
            setting(*REVIEW_PATH, "view", "rules", 0, "extensions", value=["x"]),
            setting(*REVIEW_PATH, "view", "default", "extensions", value=["x"]),
        ),
        [
            "/attributes/states/1/view/default/extensions",
            "/attributes/states/1/view/rules/0/extensions",
        ],
    ),
    Use(
        _row("conditional view"),
        "view rules",
        setting(*REVIEW_PATH, "view", value=RULED_VIEW),
        ["/attributes/states/1/view/rules"],
    ),
    Use(
        _row("custom function"),
        "workflow functions",
        setting("attributes", "functions", value=[ref("probe-function", "sys-functions")]),
        ["/attributes/functions"],
    ),
    Use(
        _row("timer reset"),
        "a reset strategy",
        setting("attributes", "timeout", "timer", "reset", value="always"),
        ["/attributes/timeout/timer/reset"],
    ),
    Use(
        _row("timer reset"),
        "a reset strategy on the timeout a SubFlow state gives its child",
        each(
            setting(*REVIEW_PATH, "stateType", value=4),
            setting(
                *REVIEW_PATH,
                "subFlow",
                value={
                    "type": "S",
                    "process": ref("child", "sys-flows"),
                    "mapping": script(),
                    "overrides": {
                        "timeout": {
                            "key": "child-late",
                            "target": "done",
                            "versionStrategy": "Minor",
                            "timer": {"reset": "always", "duration": "PT1M"},
                        }
                    },
                },
            ),
        ),
        ["/attributes/states/1/subFlow/overrides/timeout/timer/reset"],
    ),
    Use(
        _row("trigger task setting"),
        "a reference to a direct trigger naming a version",
        setting(*SUBMIT_TASK, "task", value=ref("idle-trigger", "sys-tasks")),
        ["/attributes/states/0/transitions/0/onExecutionTasks/0/task"],
    ),
    Use(
        _row("script helpers"),
        "workflow helpers",
        setting("attributes", "scripts", value={"helpers": [ref("probe-helper", "sys-mappings")]}),
        ["/attributes/scripts/helpers"],
    ),
    Use(
        _row("script helpers"),
        "a task mapping's helpers",
        setting(
            *SUBMIT_TASK,
            "mapping",
            "scripts",
            value={"helpers": [ref("probe-helper", "sys-mappings")]},
        ),
        ["/attributes/states/0/transitions/0/onExecutionTasks/0/mapping/scripts/helpers"],
    ),
    Use(
        _row("subflow view and role override"),
        "a SubFlow state's view and role overrides (its timeout override is executed)",
        each(
            setting(*REVIEW_PATH, "stateType", value=4),
            setting(
                *REVIEW_PATH,
                "subFlow",
                value={
                    "type": "S",
                    "process": ref("child", "sys-flows"),
                    "mapping": script(),
                    "viewOverrides": {"a-view": ref("review-view", "sys-views")},
                    "overrides": {
                        "views": {"a-view": ref("review-view", "sys-views")},
                        "transitions": {"approve": {"roles": []}},
                        "states": {"review": {"queryRoles": []}},
                        "timeout": None,
                    },
                },
            ),
        ),
        [
            "/attributes/states/1/subFlow/overrides/states",
            "/attributes/states/1/subFlow/overrides/transitions",
            "/attributes/states/1/subFlow/overrides/views",
            "/attributes/states/1/subFlow/viewOverrides",
        ],
    ),
    *[
        Use(
            _row(f"{name} (task type {task_type})"),
            "a workflow task reference",
            use_task(task_type),
            ["/attributes/states/0/transitions/0/onExecutionTasks/0/task"],
        )
        for task_type, name in [("10", "notification task")]
    ],
]


def base_schema() -> dict[str, Any]:
    """A master schema with field rules the data reads apply (x-roles, x-masking)."""
    return {
        "key": "probe-master",
        "domain": "core",
        "version": "1.0.0",
        "flow": "sys-schemas",
        "flowVersion": "1.0.0",
        "tags": ["probe"],
        "attributes": {
            "type": "schema",
            "schema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "note": {"type": "string", "x-roles": ROLES},
                    "card": {"type": "string", "x-masking": {"operator": "mask"}},
                    "phone": {"type": "string", "x-encryption": {"type": "hash"}},
                    "customer": {"type": "object", "properties": {"tckn": {"type": "string"}}},
                },
            },
        },
    }


SCHEMA_PROPERTIES = ("attributes", "schema", "properties")
USES += [
    Use(
        _row("field encryption"),
        "x-encryption encrypt on a nested field (hash is applied)",
        setting(
            *SCHEMA_PROPERTIES,
            "customer",
            "properties",
            "tckn",
            "x-encryption",
            value={"type": "encrypt"},
        ),
        ["/attributes/schema/properties/customer/properties/tckn/x-encryption/type"],
        base=base_schema,
    ),
    Use(
        _row("field encryption"),
        "a hash algorithm the reads do not apply",
        setting(*SCHEMA_PROPERTIES, "phone", "x-encryption", "params", value={"algorithm": "md5"}),
        ["/attributes/schema/properties/phone/x-encryption/params/algorithm"],
        base=base_schema,
    ),
    Use(
        _row("field encryption"),
        "a masking operator the reads do not apply",
        setting(*SCHEMA_PROPERTIES, "card", "x-masking", "operator", value="tokenize"),
        ["/attributes/schema/properties/card/x-masking/operator"],
        base=base_schema,
    ),
]
PRIMARY = {
    row.feature: next(use for use in USES if use.feature == row.feature) for row in UNSUPPORTED
}


def row_id(row: UnsupportedFeature) -> str:
    return row.feature


def use_id(use: Use) -> str:
    return f"{use.feature}: {use.name}"


def test_every_row_has_a_use_and_a_clear_message():
    assert {use.feature for use in USES} == {row.feature for row in UNSUPPORTED}
    assert len({row.feature for row in UNSUPPORTED}) == len(UNSUPPORTED)
    for row in UNSUPPORTED:
        assert row.message == f"{row.feature} is not supported by this version"
        assert row.kinds
        assert row.where
        assert row.built_by


def test_the_base_documents_are_valid():
    assert validate(base_workflow()) == []
    for document in DEPENDENCIES:
        if document not in (FUNCTION, EXTENSION, IDLE_TRIGGER, *TYPED_TASKS.values()):
            assert validate(copy.deepcopy(document)) == [], document["key"]


@pytest.mark.parametrize("row", UNSUPPORTED, ids=row_id)
def test_each_row_refuses_its_minimal_use_and_nothing_else(row):
    use = PRIMARY[row.feature]
    document = use.base()
    use.mutate(document)
    assert validate(document) == [(pointer, row.message) for pointer in use.pointers]
    assert validate(use.base()) == []  # the same document without the feature


@pytest.mark.parametrize("use", USES, ids=use_id)
def test_every_place_a_feature_is_used_is_reported(use):
    document = use.base()
    use.mutate(document)
    message = f"{use.feature} is not supported by this version"
    reported = [pointer for pointer, text in validate(document) if text == message]
    assert reported == use.pointers


def test_several_features_are_all_reported_at_once():
    document = base_workflow()

    def on_workflows(feature: str) -> bool:
        return not any(word in feature for word in ("task type", "conditional view", "x-enc"))

    for use in PRIMARY.values():
        if on_workflows(use.feature):
            use.mutate(document)
    reported = {message for _, message in validate(document)}
    expected = {row.message for row in UNSUPPORTED if on_workflows(row.feature)}
    assert reported == expected


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


@pytest.mark.parametrize("task_type", UNSUPPORTED_TASK_TYPES)
def test_a_task_component_of_an_unsupported_type_is_refused_at_its_type(task_type):
    [row] = [row for row in UNSUPPORTED if row.feature.endswith(f"(task type {task_type})")]
    assert validate(copy.deepcopy(TYPED_TASKS[task_type])) == [("/attributes/type", row.message)]


@pytest.mark.parametrize(
    ("document", "feature"), [(FUNCTION, "custom function"), (EXTENSION, "extension")]
)
def test_function_and_extension_components_are_refused_as_a_whole(document, feature):
    assert validate(copy.deepcopy(document)) == [
        ("", f"{feature} is not supported by this version")
    ]


def test_refused_task_types_have_no_executor_and_executed_ones_no_row():
    # A later issue that adds an executor for one of these types deletes its row.
    assert set(UNSUPPORTED_TASK_TYPES).isdisjoint(EXECUTORS)
    # Dapr, human, timer, SOAP and cache-aside types stay accepted by design (DESIGN 4.4): they
    # fail at run time with `Task:Unsupported` unless mapped to an equivalent.
    assert validate(task("dapr-service", "3", {"config": {"appId": "x", "methodName": "y"}})) == []


# --- through the API ----------------------------------------------------------------------------


@pytest.fixture
def registry(db):
    """The dependencies, published as an earlier version without the table would have."""
    with mock.patch("workflows.validation.unsupported.UNSUPPORTED", ()):
        for document in DEPENDENCIES:
            component_publish(document=copy.deepcopy(document))


@pytest.mark.parametrize("row", UNSUPPORTED, ids=row_id)
def test_publishing_a_use_is_400_with_the_pointer_and_without_it_200(
    operator_client, registry, row
):
    use = PRIMARY[row.feature]
    document = use.base()
    use.mutate(document)
    response = operator_client.post(PUBLISH, document, format="json")
    assert response.status_code == 400, response.json()
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["errorCode"] == "App:900006"
    assert body["errors"] == [
        {"pointer": pointer, "message": row.message} for pointer in use.pointers
    ]

    response = operator_client.post(PUBLISH, use.base(), format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["status"] in ("published", "unchanged")


def test_a_batch_reports_the_use_under_the_document_index(operator_client, registry):
    document = base_workflow("batch-probe")
    setting("attributes", "errorBoundary", value={"onTimeout": {"action": 0}})(document)
    response = operator_client.post(PUBLISH, [base_workflow("batch-ok"), document], format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {
            "pointer": "/1/attributes/errorBoundary/onTimeout",
            "message": "error boundary timeout policy (errorBoundary.onTimeout) is not supported "
            "by this version",
        }
    ]


@pytest.mark.parametrize(
    ("task_type", "setting_name", "value"),
    [
        ("11", "timeoutSeconds", 5),
        ("14", "validateSsl", False),
        ("12", "version", "1.0.0"),
        ("12", "tags", ["x"]),
    ],
)
def test_trigger_task_settings_the_runtime_would_not_use_are_refused(
    task_type, setting_name, value
):
    config = {"flow": "child", "domain": "core", setting_name: value}
    if task_type == "12":
        config["transitionName"] = "go"
    assert validate(task("idle", task_type, {"config": config})) == [
        (
            f"/attributes/config/{setting_name}",
            "trigger task setting the in-process call does not use is not supported by this "
            "version",
        )
    ]
