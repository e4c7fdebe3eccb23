"""Publish checks of notification tasks (task type 10): the task component is accepted; a
workflow's reference to one has a mapping defining `channel_handler` when it sends on channels
other than `state` (the `state` channel alone needs no script: the older docs' `{"type": "G"}`
mapping will do, and a script there defines `enrich`); a Fan-Out task cannot run one as its inner
task. Each refusal at the exact pointer."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.conftest import DictResolver
from tests.engine.builders import script, state, task_component, transition, workflow
from workflows.validation import validate_component

CHANNELS = task_component("notify-sms", "10", {"channels": ["sms", "email"]})
STATE_ONLY = task_component(
    "notify-state", "10", {"channels": ["state"], "includeStateChannel": True}
)
SHAPING = "def channel_handler(channel, context):\n    return {'channel': channel}\n"
ENRICHING = "def enrich(context):\n    return {'X-Device-Id': 'd'}\n"
REFERENCE = "/attributes/states/1/onEntries/0"


def reference(key: str, source: str | None) -> dict[str, Any]:
    """A reference to task `key` with a mapping running `source`; None: no mapping at all."""
    ref: dict[str, Any] = {
        "order": 1,
        "task": {"key": key, "domain": "core", "version": "1.0.0", "flow": "sys-tasks"},
    }
    if source is not None:
        ref["mapping"] = script(source)
    return ref


def platform_mapping(key: str) -> dict[str, Any]:
    """A reference with the older docs' script-less mapping (`{"type": "G"}`)."""
    return {**reference(key, None), "mapping": {"type": "G"}}


def approvals(ref: dict[str, Any]) -> dict[str, Any]:
    return workflow(
        [
            state("draft", 1, [transition("approve", "approved")]),
            state("approved", 2, onEntries=[ref]),
        ]
    )


def validate(document: dict[str, Any]) -> list[tuple[str, str]]:
    resolver = DictResolver([copy.deepcopy(CHANNELS), copy.deepcopy(STATE_ONLY)])
    return [(v.pointer, v.message) for v in validate_component(document, resolver)]


def test_notification_task_components_are_accepted():
    assert validate(copy.deepcopy(CHANNELS)) == []
    assert validate(copy.deepcopy(STATE_ONLY)) == []


@pytest.mark.parametrize(
    ("key", "source"),
    [
        ("notify-sms", SHAPING),
        ("notify-sms", SHAPING + "\n" + ENRICHING),
        ("notify-state", ENRICHING),
    ],
)
def test_a_reference_with_the_mapping_its_channels_need_is_accepted(key, source):
    assert validate(approvals(reference(key, source))) == []
    assert validate(approvals(platform_mapping("notify-state"))) == []


@pytest.mark.parametrize("ref", [reference("notify-sms", None), platform_mapping("notify-sms")])
def test_channels_other_than_state_need_a_mapping_script(ref):
    assert validate(approvals(ref)) == [
        (
            f"{REFERENCE}/mapping",
            "the notification task sends on sms, email: its reference needs a mapping that "
            "defines channel_handler(channel, context)",
        )
    ]


def test_the_mapping_defines_the_handler_its_channels_call():
    assert validate(approvals(reference("notify-sms", ENRICHING))) == [
        (f"{REFERENCE}/mapping/code", "./src/Test.py: script must define channel_handler()")
    ]
    assert validate(approvals(reference("notify-state", SHAPING))) == [
        (f"{REFERENCE}/mapping/code", "./src/Test.py: script must define enrich()")
    ]


def test_a_fan_out_cannot_run_a_notification_task_per_item():
    fan_out = task_component(
        "notify-each",
        "21",
        {
            "itemsPath": "$.customers",
            "task": {
                "key": "notify-sms",
                "domain": "core",
                "version": "1.0.0",
                "flow": "sys-tasks",
            },
        },
    )
    assert validate(fan_out) == [
        (
            "/attributes/config/task",
            "a notification task (type 10) cannot be a fan-out's inner task: its messages are "
            "committed with a transition, which an item does not have",
        )
    ]
