"""Publish checks of timeouts (`workflows/validation/timeouts.py`): `errorBoundary.onTimeout`
policies at every level are accepted when well formed and refused, at the exact pointer, when a
field would be ignored or missing (`retryPolicy` instead of `defaultRetryPolicy`, a Retry without
one, a Rollback going nowhere); `timer.reset` accepts the documents' spellings (`OnEntry` of the
vNext sample included) and the two re-arming strategies in any case, on the workflow timeout and
on a SubFlow state's override of its child's timeout, and refuses anything else there with a
message saying what vNext would do."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.conftest import DictResolver
from tests.engine.builders import script, script_task, state, transition, workflow
from workflows.validation import validate_component

TASK_SCRIPT = (
    "def input_handler(task, context):\n    return ScriptResponse()\n\n"
    "def output_handler(context):\n    return {}\n"
)
RETRY_POLICY = {"maxRetries": 2, "initialDelay": "PT1S"}
TIMEOUT = {
    "key": "expire",
    "target": "done",
    "versionStrategy": "None",
    "timer": {"reset": "None", "duration": "PT1H"},
}


def task_ref(**extra: Any) -> dict[str, Any]:
    return {
        "order": 1,
        "task": {"key": "script-task", "domain": "core", "version": "1.0.0", "flow": "sys-tasks"},
        "mapping": script(TASK_SCRIPT),
        **extra,
    }


def base(**attributes: Any) -> dict[str, Any]:
    """idle -call-> called -finish-> done, with a give-up transition to failed, a timeout."""
    return workflow(
        [
            state(
                "idle",
                1,
                [
                    transition("call", "called", onExecutionTasks=[task_ref()]),
                    transition("give-up", "failed"),
                ],
            ),
            state("called", 2, [transition("finish", "done")]),
            state("failed", 2),
            state("done", 3, subType=1),
        ],
        timeout=copy.deepcopy(TIMEOUT),
        **attributes,
    )


CHILD = workflow([state("waiting", 1), state("done", 3, subType=1)], key="child")


def validate(document: dict[str, Any]) -> list[tuple[str, str]]:
    resolver = DictResolver([script_task(), copy.deepcopy(CHILD)])
    return [(v.pointer, v.message) for v in validate_component(document, resolver)]


CALL_TASK = "/attributes/states/0/transitions/0/onExecutionTasks/0/errorBoundary/onTimeout"


def with_policies(task: Any = None, state_policy: Any = None, flow: Any = None) -> dict[str, Any]:
    document = base()
    attributes = document["attributes"]
    if task is not None:
        call = attributes["states"][0]["transitions"][0]
        call["onExecutionTasks"][0]["errorBoundary"] = {"onTimeout": task}
    if state_policy is not None:
        attributes["states"][0]["errorBoundary"] = {"onError": [], "onTimeout": state_policy}
    if flow is not None:
        attributes["errorBoundary"] = {"onTimeout": flow}
    return document


def test_well_formed_policies_at_every_level_are_accepted():
    assert validate(base()) == []
    document = with_policies(
        task={"action": 1, "defaultRetryPolicy": RETRY_POLICY},
        state_policy={"action": 2, "transition": "give-up"},
        flow={"action": 4, "transition": "failed"},  # a state: the schema's "state key"
    )
    assert validate(document) == []
    for action in (0, 3, 5):
        assert validate(with_policies(task={"action": action})) == []


@pytest.mark.parametrize(
    ("policy", "field", "message"),
    [
        ({"action": 1}, "defaultRetryPolicy", "a Retry policy needs a defaultRetryPolicy"),
        (
            {"action": 3, "defaultRetryPolicy": RETRY_POLICY},
            "defaultRetryPolicy",
            "only a Retry policy has a defaultRetryPolicy",
        ),
        (
            {"action": 1, "defaultRetryPolicy": RETRY_POLICY, "retryPolicy": RETRY_POLICY},
            "retryPolicy",
            "an onTimeout policy has only action, defaultRetryPolicy and transition (its retry "
            "policy is defaultRetryPolicy)",
        ),
        (
            {"action": 3, "errorCodes": ["*"]},
            "errorCodes",
            "an onTimeout policy has only action, defaultRetryPolicy and transition",
        ),
        (
            {"action": 2},
            "transition",
            "a Rollback or Notify policy names the transition (or state) to go to",
        ),
        (
            {"action": 4, "transition": "ghost"},
            "transition",
            "'ghost' is neither a transition nor a state of this workflow",
        ),
        ({"action": 3, "transition": "failed"}, "transition", "only Rollback and Notify"),
        ({"action": 0, "transition": "failed"}, "transition", "only Rollback and Notify"),
        ({}, "action", "an onTimeout policy needs an action"),
        (
            {"action": 1, "defaultRetryPolicy": {"initialDelay": "PT0S"}},
            "defaultRetryPolicy/initialDelay",
            "initialDelay must be longer than zero",
        ),
        (
            {"action": 1, "defaultRetryPolicy": {"initialDelay": "PT5S", "maxDelay": "PT1S"}},
            "defaultRetryPolicy/maxDelay",
            "maxDelay must not be shorter than initialDelay",
        ),
    ],
)
def test_a_policy_with_a_field_missing_or_ignored_is_refused_at_it(policy, field, message):
    violations = validate(with_policies(task=policy))
    assert [pointer for pointer, _ in violations] == [f"{CALL_TASK}/{field}"]
    assert violations[0][1].startswith(message)


def test_the_same_checks_apply_at_the_state_and_workflow_levels():
    document = with_policies(state_policy={"action": 2}, flow={"action": 1})
    assert validate(document) == [
        (
            "/attributes/errorBoundary/onTimeout/defaultRetryPolicy",
            "a Retry policy needs a defaultRetryPolicy",
        ),
        (
            "/attributes/states/0/errorBoundary/onTimeout/transition",
            "a Rollback or Notify policy names the transition (or state) to go to",
        ),
    ]


# --- timer.reset --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reset",
    [
        "None",
        "N",
        "never",
        "false",
        "",
        "workflow-start",
        "OnEntry",
        "on-entry",
        "ONENTRY",
        "transition",
        "State-Change",
        "ONSTATECHANGE",
    ],
)
def test_known_reset_values_are_accepted_in_any_case(reset):
    document = base()
    document["attributes"]["timeout"]["timer"]["reset"] = reset
    assert validate(document) == []
    assert validate(subflow_with_timeout(reset)) == []


def subflow_with_timeout(reset: str) -> dict[str, Any]:
    document = base()
    called = document["attributes"]["states"][1]
    called["stateType"] = 4
    called["subFlow"] = {
        "type": "S",
        "process": {"key": "child", "domain": "core", "version": "1.0.0", "flow": "sys-flows"},
        "mapping": script(TASK_SCRIPT),
        "overrides": {
            "timeout": {**copy.deepcopy(TIMEOUT), "timer": {"reset": reset, "duration": "PT5M"}}
        },
    }
    return document


@pytest.mark.parametrize("reset", ["always", "true", "daily", "OnExit", "entry"])
def test_an_unknown_reset_is_refused_on_the_timeout_and_on_a_subflow_override(reset):
    document = base()
    document["attributes"]["timeout"]["timer"]["reset"] = reset
    ((pointer, message),) = validate(document)
    assert pointer == "/attributes/timeout/timer/reset"
    assert message == (
        f"unknown timer reset {reset!r}: use None (also N, never, false, workflow-start, "
        "OnEntry: an absolute deadline from the instance's start), transition (re-armed after "
        "every transition) or state-change (re-armed when the instance enters another state) "
        "(vNext reads no timer.reset and would keep an absolute deadline from the start)"
    )
    ((pointer, override_message),) = validate(subflow_with_timeout(reset))
    assert pointer == "/attributes/states/1/subFlow/overrides/timeout/timer/reset"
    assert override_message == message
