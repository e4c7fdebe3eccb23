"""The `order` workflow of the `order` suite (issue 32): start -> `draft`, manual `submit`
(draft -> submitted, the client's body carries `amount`), manual `approve` (submitted ->
approved, Final; the body carries `decision`). Domain `bench`, `versionStrategy` "None", no
schema, no view, no tasks, no scripts: a transition's request attributes are merged into the
instance data by the engine itself."""

from __future__ import annotations

from typing import Any

DOMAIN = "bench"
VERSION = "1.0.0"
ORDER = "bench-order"


def _labels(text: str) -> list[dict[str, str]]:
    return [{"language": "en-US", "label": text}]


def _transition(key: str, target: str) -> dict[str, Any]:
    return {
        "key": key,
        "target": target,
        "triggerType": 0,
        "versionStrategy": "None",
        "labels": _labels(key),
        "schema": None,
        "view": None,
        "mapping": None,
        "onExecutionTasks": [],
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


def order_document() -> dict[str, Any]:
    """The workflow document to publish."""
    return {
        "key": ORDER,
        "flow": "sys-flows",
        "flowVersion": "1.0.0",
        "domain": DOMAIN,
        "version": VERSION,
        "tags": ["bench"],
        "attributes": {
            "type": "F",
            "labels": _labels("Bench order"),
            "functions": [],
            "features": [],
            "extensions": [],
            "sharedTransitions": [],
            "startTransition": {
                "key": "start",
                "target": "draft",
                "triggerType": 0,
                "versionStrategy": "None",
                "labels": _labels("Start"),
                "onExecutionTasks": [],
            },
            "states": [
                _state("draft", 1, [_transition("submit", "submitted")]),
                _state("submitted", 2, [_transition("approve", "approved")]),
                _state("approved", 3, []),
            ],
        },
    }
