"""The bench workflows: a two-state ping-pong, without tasks and with one script task, and the
`order` suite's three-state workflow (`order_document`, published by that suite only), also in a
variant whose every step runs one script task (`ORDER_SCRIPTS`).

Domain `bench`; `ping` (Initial) and `pong` (Intermediate); manual transitions `to-pong`
(ping -> pong) and `to-ping` (pong -> ping); `versionStrategy` "None" everywhere, no schema, no
view, no scripts. The `-task` variant runs one script task (type 7) on both transitions: a
script task touches nothing outside the script worker, so its transition commits once, guarded by
the state it loaded, without taking the Busy flag; the task's mapping has an input and an output
handler returning `{}`: two handlers, run in one worker exchange per transition.
"""

from __future__ import annotations

import copy
from typing import Any

DOMAIN = "bench"
VERSION = "1.0.0"
NO_TASK = "bench-ping-pong"
WITH_TASK = "bench-ping-pong-task"
ORDER = "bench-order"
ORDER_SCRIPTS = "bench-order-scripts"
TASK_KEY = "bench-noop-script"

NOOP_MAPPING = '''"""Bench mapping: does nothing; the task measures the Busy path, not a script."""


def input_handler(task, context):
    return {}


def output_handler(context):
    return {}
'''


# The `order` variant's mapping: one input handler (a script task's result is its data patch), a
# field computed from each step's request, as a workflow author would write it.
ORDER_MAPPING = '''"""Bench order mapping: a field derived from the step's input."""


def input_handler(task, context):
    body = context.body or {}
    if "amount" in body:
        return {"gross": round(body["amount"] * 1.2, 2)}
    if "decision" in body:
        return {"closed": body["decision"] == "approved"}
    return {"channel": context.transition.key}
'''


def _labels(text: str) -> list[dict[str, str]]:
    return [{"language": "en-US", "label": text}]


def _tasks(with_task: bool, mapping: str = NOOP_MAPPING) -> list[dict[str, Any]]:
    if not with_task:
        return []
    location = "./src/BenchNoopMapping.py" if mapping == NOOP_MAPPING else "./src/BenchOrder.py"
    return [
        {
            "order": 1,
            "task": {"key": TASK_KEY, "domain": DOMAIN, "version": VERSION, "flow": "sys-tasks"},
            "mapping": {"location": location, "code": mapping, "encoding": "NAT"},
        }
    ]


def _transition(
    key: str, target: str, with_task: bool, mapping: str = NOOP_MAPPING
) -> dict[str, Any]:
    return {
        "key": key,
        "target": target,
        "triggerType": 0,
        "versionStrategy": "None",
        "labels": _labels(key),
        "schema": None,
        "view": None,
        "mapping": None,
        "onExecutionTasks": _tasks(with_task, mapping),
    }


def _state(key: str, state_type: int, transitions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "key": key,
        "stateType": state_type,
        "subType": 0,
        "versionStrategy": "None",
        "labels": _labels(key),
        "view": None,
        "subFlow": None,
        "onEntries": [],
        "onExits": [],
        "transitions": transitions,
    }


def _workflow(
    key: str,
    label: str,
    initial: str,
    states: list[dict[str, Any]],
    start_tasks: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "key": key,
        "flow": "sys-flows",
        "flowVersion": "1.0.0",
        "domain": DOMAIN,
        "version": VERSION,
        "tags": ["bench"],
        "attributes": {
            "type": "F",
            "labels": _labels(label),
            "functions": [],
            "features": [],
            "extensions": [],
            "sharedTransitions": [],
            "startTransition": {
                "key": "start",
                "target": initial,
                "triggerType": 0,
                "versionStrategy": "None",
                "labels": _labels("Start"),
                "onExecutionTasks": start_tasks or [],
            },
            "states": states,
        },
    }


def workflow_document(*, with_task: bool) -> dict[str, Any]:
    """The ping-pong workflow; `with_task` adds the script task to both manual transitions."""
    return _workflow(
        WITH_TASK if with_task else NO_TASK,
        f"Bench ping-pong{' (script task)' if with_task else ''}",
        "ping",
        [
            _state("ping", 1, [_transition("to-pong", "pong", with_task)]),
            _state("pong", 2, [_transition("to-ping", "ping", with_task)]),
        ],
    )


def order_document(*, with_scripts: bool = False) -> dict[str, Any]:
    """The `order` suite's workflow: `draft` -submit-> `submitted` -approve-> `approved`
    (Final), no tasks: the engine merges each request's attributes into the data itself.
    `with_scripts` (`ORDER_SCRIPTS`): start, submit and approve each run one script task whose
    mapping (`ORDER_MAPPING`) adds a field computed from the step's input."""
    mapping = ORDER_MAPPING
    return _workflow(
        ORDER_SCRIPTS if with_scripts else ORDER,
        "Bench order (a script task per step)" if with_scripts else "Bench order",
        "draft",
        [
            _state("draft", 1, [_transition("submit", "submitted", with_scripts, mapping)]),
            _state("submitted", 2, [_transition("approve", "approved", with_scripts, mapping)]),
            _state("approved", 3, []),
        ],
        start_tasks=_tasks(with_scripts, mapping),
    )


TASK_DOCUMENT: dict[str, Any] = {
    "key": TASK_KEY,
    "version": VERSION,
    "domain": DOMAIN,
    "flow": "sys-tasks",
    "flowVersion": "1.0.0",
    "tags": ["bench"],
    "attributes": {"type": "7", "config": {}},
}


def documents() -> list[dict[str, Any]]:
    """Everything to publish, in publishing order (the task before the workflow using it)."""
    return [
        copy.deepcopy(TASK_DOCUMENT),
        workflow_document(with_task=False),
        workflow_document(with_task=True),
    ]
