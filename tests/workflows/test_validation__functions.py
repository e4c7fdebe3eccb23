"""Publish-time checks of custom functions and extensions (`workflows/validation/functions.py`,
with the reference and script checks every component gets): each problem is reported at its
JSON pointer, and the documents without it are valid."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.conftest import DictResolver
from tests.engine.builders import script, script_task, state, task_ref, transition, workflow
from workflows.validation import validate_component

VIEW = {
    "key": "desk-view",
    "domain": "core",
    "version": "1.0.0",
    "flow": "sys-views",
    "flowVersion": "1.0.0",
    "tags": ["test"],
    "attributes": {"type": 1, "content": "{}"},
}


def ref(key: str, flow: str) -> dict[str, str]:
    return {"key": key, "domain": "core", "version": "1.0.0", "flow": flow}


def function(key: str = "desk-summary", **attributes: Any) -> dict[str, Any]:
    if "onExecutionTasks" not in attributes:
        attributes.setdefault("task", task_ref({"ok": True}))
    return {
        "key": key,
        "domain": "core",
        "version": "1.0.0",
        "flow": "sys-functions",
        "flowVersion": "1.0.0",
        "tags": ["test"],
        "attributes": {"scope": "I", **attributes},
    }


def extension(key: str = "desk-limits") -> dict[str, Any]:
    return {
        "key": key,
        "domain": "core",
        "version": "1.0.0",
        "flow": "sys-extensions",
        "flowVersion": "1.0.0",
        "tags": ["test"],
        "attributes": {"type": 4, "scope": 1, "task": task_ref({"limits": 1})},
    }


def desk(**attributes: Any) -> dict[str, Any]:
    view = {"view": ref("desk-view", "sys-views"), "extensions": ["desk-limits"]}
    return workflow(
        [state("open", 1, [transition("close", "closed")], view=view), state("closed", 2)],
        key="desk",
        functions=[ref("desk-summary", "sys-functions")],
        extensions=[ref("desk-limits", "sys-extensions")],
        **attributes,
    )


def violations(document: dict[str, Any]) -> list[tuple[str, str]]:
    resolver = DictResolver(
        [script_task(), VIEW, function(), function("data"), extension(), extension("x")]
    )
    return [(v.pointer, v.message) for v in validate_component(document, resolver)]


def test_the_valid_documents():
    assert violations(desk()) == []
    assert violations(function()) == []
    assert violations(extension()) == []


@pytest.mark.parametrize(
    ("change", "pointer", "says"),
    [
        (
            {"functions": [ref("desk-summary", "sys-functions"), ref("data", "sys-functions")]},
            "/attributes/functions/1/key",
            "'data' is a built-in function",
        ),
        (
            {"functions": [ref("desk-summary", "sys-functions")] * 2},
            "/attributes/functions/1/key",
            "declared twice",
        ),
        (
            {"functions": [ref("script-task", "sys-tasks")]},
            "/attributes/functions/0/flow",
            "names sys-functions, not sys-tasks",
        ),
        (
            {"features": [ref("desk-limits", "sys-extensions")]},
            "/attributes/features/0/key",
            "declared twice",
        ),
        (
            {"extensions": [ref("x", "sys-extensions")]},
            "/attributes/states/0/view/extensions/0",
            "'desk-limits' is not declared in attributes.extensions",
        ),
    ],
    ids=["built-in name", "twice", "not a function", "extension twice", "undeclared view name"],
)
def test_a_workflows_declarations_are_checked(change, pointer, says):
    document = desk()
    document["attributes"].update(copy.deepcopy(change))
    [(found, message)] = violations(document)
    assert found == pointer
    assert says in message


def test_a_function_runs_its_task_or_its_task_list_and_each_task_once():
    both = function(
        onExecutionTasks=[task_ref({"a": 1})], output=script("def handler(c):\n    return 1\n")
    )
    both["attributes"]["task"] = task_ref({"b": 2})
    assert [p for p, _ in violations(both)] == ["/attributes/task"]

    twice = function(
        onExecutionTasks=[task_ref({"a": 1}), task_ref({"b": 2}, order=2)],
        output=script("def handler(context):\n    return context.body\n"),
    )
    [(pointer, message)] = violations(twice)
    assert pointer == "/attributes/onExecutionTasks/1/task/key"
    assert "runs twice" in message


def test_a_functions_task_must_exist_and_its_mapping_define_a_handler():
    missing = function(task={**task_ref({}), "task": ref("no-such-task", "sys-tasks")})
    assert [p for p, _ in violations(missing)] == ["/attributes/task/task"]

    handlerless = function(
        task={**task_ref({}), "mapping": script("def helper():\n    return 1\n")}
    )
    [(pointer, message)] = violations(handlerless)
    assert pointer == "/attributes/task/mapping/code"
    assert "input_handler() or output_handler()" in message

    outputless = function(onExecutionTasks=[task_ref({"a": 1})])
    # Several tasks need an output script to make one answer of them (the schema says so).
    assert [p for p, _ in violations(outputless)] == ["/attributes/output"]


# --- verbs, contracts and cache settings --------------------------------------------------------

SCHEMA = {
    "key": "desk-input",
    "domain": "core",
    "version": "1.0.0",
    "flow": "sys-schemas",
    "flowVersion": "1.0.0",
    "tags": ["test"],
    "attributes": {"type": "schema", "schema": {"type": "object"}},
}
RULE = script("def handler(context):\n    return True\n")


def contract_violations(document: dict[str, Any]) -> list[tuple[str, str]]:
    resolver = DictResolver([script_task(), VIEW, SCHEMA])
    return [(v.pointer, v.message) for v in validate_component(document, resolver)]


def test_a_function_with_every_setting_is_valid():
    document = function(
        verbs=["GET", "POST", "PATCH", "DELETE"],
        inputSchema=[{"rule": RULE, "schema": ref("desk-input", "sys-schemas")}],
        outputSchema=ref("desk-input", "sys-schemas"),
        inputView={
            "views": [
                {"rule": RULE, "view": ref("desk-view", "sys-views")},
                {"view": ref("desk-view", "sys-views")},
            ]
        },
        outputView=ref("desk-view", "sys-views"),
        cache={
            "keyExpression": script("def handler(context):\n    return context.query['k']\n"),
            "generationKeyExpression": {
                "code": "def handler(context):\n    return 'g'\n",
                "encoding": "NAT",
            },
            "generationKey": "fallback",
            "storeName": "default",
            "ttlInSeconds": 30,
        },
    )
    assert contract_violations(document) == []


@pytest.mark.parametrize(
    ("attributes", "pointer", "says"),
    [
        (
            {"verbs": ["GET", "PUT"]},
            "/attributes/verbs/1",
            'must be one of "GET", "POST", "PATCH", "DELETE"',
        ),
        (
            {"inputSchema": ref("no-such-schema", "sys-schemas")},
            "/attributes/inputSchema",
            "does not exist",
        ),
        (
            {"outputSchema": ref("desk-view", "sys-views")},
            "/attributes/outputSchema/flow",
            'must be "sys-schemas"',
        ),
        (
            {
                "inputView": [
                    {"view": ref("desk-view", "sys-views")},
                    {"rule": RULE, "view": ref("desk-view", "sys-views")},
                ]
            },
            "/attributes/inputView/1",
            "never chosen: the entry at /attributes/inputView/0 has no rule",
        ),
        (
            {
                "outputSchema": {
                    "schemas": [
                        {
                            "rule": script("def output_handler(context):\n    return 1\n"),
                            "schema": ref("desk-input", "sys-schemas"),
                        }
                    ]
                }
            },
            "/attributes/outputSchema/schemas/0/rule/code",
            "must define handler()",
        ),
        (
            {"cache": {"keyExpression": script("def handler(context:\n    return 1\n")}},
            "/attributes/cache/keyExpression/code",
            "line 1",
        ),
        (
            # Without location or encoding it is still a script (B64 by default): checked too.
            {"cache": {"keyExpression": {"code": "ZGVmIGtleSgpOgogICAgcmV0dXJuIDEK"}}},
            "/attributes/cache/keyExpression/code",
            "must define handler()",
        ),
        (
            {
                "cache": {
                    "generationKeyExpression": {
                        "code": "import os\ndef handler(c):\n    return ''\n",
                        "encoding": "NAT",
                    }
                }
            },
            "/attributes/cache/generationKeyExpression/code",
            "os",
        ),
        (
            {
                "cache": {
                    "generationKeyExpression": script("def output_handler(c):\n    return ''\n")
                }
            },
            "/attributes/cache/generationKeyExpression/code",
            "must define handler()",
        ),
        (
            {"cache": {"storeName": "redis"}},
            "/attributes/cache/storeName",
            "no cache store 'redis' here: CACHES has default",
        ),
        (
            {"cache": {"consistency": "Strong"}},
            "/attributes/cache/consistency",
            "Strong consistency is not offered",
        ),
    ],
    ids=[
        "unknown verb",
        "missing schema",
        "a view as a schema",
        "a fallback before a rule",
        "a rule without handler",
        "a key expression that does not compile",
        "a bare key expression without handler",
        "a generation expression importing os",
        "a generation expression without handler",
        "an unknown store",
        "strong consistency",
    ],
)
def test_a_functions_verbs_contracts_and_cache_settings_are_checked(attributes, pointer, says):
    found = contract_violations(function(**attributes))
    assert [p for p, _ in found] == [pointer], found
    assert says in found[0][1]


def test_a_store_name_is_any_alias_of_the_deployments_caches(settings):
    settings.CACHES = {
        **settings.CACHES,
        "redis": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    }
    assert contract_violations(function(cache={"storeName": "redis"})) == []
