"""Workflow documents the instance tests publish."""

from __future__ import annotations

from typing import Any

from tests.engine.builders import script_task, state, task_ref, transition, workflow
from workflows.services import component_publish

UPDATE_DATA = {
    "key": "update-data",
    "target": "$self",
    "triggerType": 0,
    "versionStrategy": "Patch",
    "labels": [{"label": "Update data", "language": "en"}],
}
CANCEL = {
    "key": "cancel",
    "target": "cancelled",
    "triggerType": 0,
    "versionStrategy": "None",
    "labels": [{"label": "Cancel", "language": "en"}],
}


def ping_pong(key: str = "ping-pong", *, with_task: bool = False) -> dict[str, Any]:
    """ping <-> pong; `with_task` puts a script task on to-pong (the Busy path)."""
    extra: dict[str, Any] = {"onExecutionTasks": [task_ref({"ponged": True})]} if with_task else {}
    return workflow(
        [
            state("ping", 1, [transition("to-pong", "pong", **extra)]),
            state("pong", 2, [transition("to-ping", "ping"), transition("finish", "done")]),
            state("done", 3, subType=1),
            state("cancelled", 3, subType=3),
        ],
        key=key,
        updateData=UPDATE_DATA,
        cancel=CANCEL,
    )


def http_task(key: str, url: str, method: str = "GET", **config: Any) -> dict[str, Any]:
    """A type-6 task component calling `url`."""
    return {
        "key": key,
        "domain": "core",
        "version": "1.0.0",
        "flow": "sys-tasks",
        "flowVersion": "1.0.0",
        "tags": ["test"],
        "attributes": {"type": "6", "config": {"url": url, "method": method, **config}},
    }


def http_ref(key: str, order: int = 1, mapping: str | None = None) -> dict[str, Any]:
    """An onExecutionTasks item running the HTTP task `key`, with an optional mapping."""
    source = mapping or "def input_handler(task, context):\n    return None\n"
    return {
        "order": order,
        "task": {"key": key, "domain": "core", "version": "1.0.0", "flow": "sys-tasks"},
        "mapping": {"location": "./src/Http.py", "code": source, "encoding": "NAT"},
    }


def publish(*documents: dict[str, Any]) -> None:
    """Publish the script task, then `documents`."""
    component_publish(document=script_task())
    for document in documents:
        component_publish(document=document)
