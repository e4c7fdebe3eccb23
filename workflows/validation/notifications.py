"""Publish checks of notification tasks (task type 10) the JSON Schema cannot make, because they
need the task component a reference resolves to:

- a workflow's reference to a notification task that sends on channels other than `state` has
  a mapping (its `channel_handler(channel, context)` shapes those messages; `scripts.py` checks
  the mapping defines it);
- a Fan-Out task's inner task is not a notification task (an item has no hop of its own to
  commit the messages with).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from instances.engine.errors import Violation
from instances.engine.task_types.notification import STATE_CHANNEL, notification_channels
from instances.status import TaskType
from workflows.documents import ComponentRef, json_pointer
from workflows.validation.scripts import Resolver

TASK_LISTS = ("onExecutionTasks", "onEntries", "onExits")
Path = tuple[Any, ...]


def _attributes(document: Any) -> dict[str, Any]:
    attributes = document.get("attributes") if isinstance(document, dict) else None
    return attributes if isinstance(attributes, dict) else {}


def _notification_task(reference: Any, resolver: Resolver) -> dict[str, Any] | None:
    """The attributes of the notification task `reference` names, else None."""
    ref = ComponentRef.from_reference(reference)
    attributes = _attributes(resolver.resolve(ref)) if ref is not None else {}
    return attributes if str(attributes.get("type")) == TaskType.NOTIFICATION else None


def _task_references(node: Any, path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in TASK_LISTS and isinstance(value, list):
                for index, item in enumerate(value):
                    if isinstance(item, dict):
                        yield (*path, key, index), item
            elif isinstance(value, dict | list):
                yield from _task_references(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _task_references(value, (*path, index))


def notification_reference_violations(
    document: dict[str, Any], resolver: Resolver
) -> Iterator[Violation]:
    """A workflow's references to notification tasks that send messages a mapping must shape
    but have none."""
    for path, reference in _task_references(_attributes(document), ("attributes",)):
        task = _notification_task(reference.get("task"), resolver)
        if task is None:
            continue
        shaped = [c for c in notification_channels(task.get("config")) if c != STATE_CHANNEL]
        mapping = reference.get("mapping")
        if shaped and not (isinstance(mapping, dict) and mapping.get("code")):
            yield Violation(
                json_pointer(*path, "mapping"),
                f"the notification task sends on {', '.join(shaped)}: its reference needs a "
                "mapping that defines channel_handler(channel, context)",
            )


def fan_out_notification_violations(
    document: dict[str, Any], resolver: Resolver
) -> Iterator[Violation]:
    """A Fan-Out task whose inner task is a notification task."""
    attributes = _attributes(document)
    config = attributes.get("config")
    if str(attributes.get("type")) != TaskType.FAN_OUT or not isinstance(config, dict):
        return
    if _notification_task(config.get("task"), resolver) is not None:
        yield Violation(
            json_pointer("attributes", "config", "task"),
            "a notification task (type 10) cannot be a fan-out's inner task: its messages are "
            "committed with a transition, which an item does not have",
        )
