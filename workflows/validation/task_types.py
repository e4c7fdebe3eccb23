"""No task type publishes that does not run: a task component whose `type` has no executor here
is refused at publish, at `/attributes/type`, and so is any reference to such a task (a
workflow's task lists, a function's or an extension's task, a Fan-Out's inner task) that
resolves to one published before this check existed.

The refused types are derived from `EXECUTORS`, not listed: once a type gets an executor it
stops being refused. `REASONS` only words the refusal of types that stay refused on purpose; any
other type without an executor gets the general message.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from instances.engine.errors import Violation
from instances.engine.task_types import EXECUTORS
from instances.status import TaskType
from workflows.documents import ComponentKind, ComponentRef, json_pointer
from workflows.validation.scripts import Resolver

# Run by the task runner itself, not through `EXECUTORS` (instances/engine/tasks.py).
RUN_BY_THE_RUNNER = frozenset({TaskType.FAN_OUT})

# Why a type without an executor is refused, where a plain word helps more than the general
# message. A type listed here that gets an executor is no longer refused (see `refusal`).
REASONS: dict[str, str] = {
    TaskType.DAPR_CONVERSATION: (
        "task type 20 (DaprConversationTask) needs an LLM conversation component, which this "
        "runtime does not provide"
    ),
    TaskType.TIMER: (
        "task type 9 (TimerTask) is a vNext system task that cannot be defined by hand "
        "(doc/en/flow/tasks/timer-task.md); to wait, give the state a scheduled transition "
        "(triggerType 2) with a timer"
    ),
}


LABELS: dict[str, str] = {str(member): member.label for member in TaskType}


def refusal(task_type: Any) -> str | None:
    """Why a task of `task_type` cannot be published here, or None when it runs. A type that is
    not one of the format's is the JSON Schema's to refuse (None here)."""
    value = str(task_type)
    if value not in LABELS or value in EXECUTORS or value in RUN_BY_THE_RUNNER:
        return None
    return REASONS.get(value) or (
        f"task type {value} ({LABELS[value]}) has no executor in this runtime: every run of it "
        "would fail with Task:Unsupported, so it is refused at publish"
    )


def refused_types() -> dict[str, str]:
    """Every task type of the format that is refused at publish now, with its message."""
    return {value: reason for value in LABELS if (reason := refusal(value)) is not None}


def task_type_violations(document: Any, kind: str, resolver: Resolver) -> Iterator[Violation]:
    """A task component of a type that does not run here, and every reference of `document`
    to a published task of such a type."""
    if not isinstance(document, dict) or kind == ComponentKind.SCHEMA:
        return  # a schema component's body is a JSON Schema, not references
    attributes = document.get("attributes")
    if not isinstance(attributes, dict):
        return
    if kind == ComponentKind.TASK:
        reason = refusal(attributes.get("type")) if "type" in attributes else None
        if reason is not None:
            yield Violation(json_pointer("attributes", "type"), reason)
    yield from _reference_violations(attributes, ("attributes",), resolver)


def _reference_violations(
    node: Any, path: tuple[Any, ...], resolver: Resolver
) -> Iterator[Violation]:
    if isinstance(node, dict):
        ref = ComponentRef.from_reference(node) if node.get("flow") == "sys-tasks" else None
        if ref is not None:
            target = resolver.resolve(ref)
            target_attributes = target.get("attributes") if isinstance(target, dict) else None
            if isinstance(target_attributes, dict):
                reason = refusal(target_attributes.get("type"))
                if reason is None and str(target_attributes.get("type")) == TaskType.HUMAN:
                    reason = _human_task_misplaced(path)
                if reason is not None:
                    yield Violation(json_pointer(*path), f"task {ref} cannot run: {reason}")
            return
        for key, value in node.items():
            yield from _reference_violations(value, (*path, key), resolver)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _reference_violations(value, (*path, index), resolver)


def _human_task_misplaced(path: tuple[Any, ...]) -> str | None:
    # A human task opens an inbox entry for the state it is entered with, and leaving that
    # state cancels it: anywhere but a state's onEntries (a transition's or an exit's tasks, a
    # function, a fan-out item, a cache-aside source) it would be cancelled as it is made.
    if len(path) >= 5 and path[-5] == "states" and path[-3] == "onEntries" and path[-1] == "task":
        return None
    return (
        "a human task (type 5) waits in the state that opens it: reference it from a state's "
        "onEntries (here it would be cancelled as soon as it is made)"
    )
