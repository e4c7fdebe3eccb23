"""Publish rules of the trigger task types (11 start, 12 direct trigger, 14 subprocess) about
where their target runs: `timeoutSeconds` and `validateSsl` describe an HTTP call to another
runtime, so they are accepted only for a target domain the operator routes to one
(`VNEXT_REMOTE_DOMAINS`); a SubProcess child always starts here; a direct trigger's `version`
and `tags` have no meaning (a transition runs on the version its instance pinned; tags are given
at start). A workflow referencing such a task is checked too, at the reference's `task`, so a
task published under other settings still counts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from instances.engine.errors import Violation
from instances.status import TaskType
from vnext.conf import remote_base_url
from workflows.documents import ComponentKind, ComponentRef, json_pointer
from workflows.validation.scripts import Resolver

TRIGGER_TYPES = frozenset({TaskType.START_FLOW, TaskType.DIRECT_TRIGGER, TaskType.SUBPROCESS})
REMOTE_CALL_SETTINGS = ("timeoutSeconds", "validateSsl")


def trigger_violations(document: Any, kind: str, resolver: Resolver) -> list[Violation]:
    """The trigger rules' violations of a task component, or of a workflow's references to
    trigger tasks."""
    if not isinstance(document, dict):
        return []
    if kind == ComponentKind.TASK:
        return [
            Violation(json_pointer("attributes", "config", name), message)
            for name, message in _task_problems(document)
        ]
    if kind != ComponentKind.WORKFLOW:
        return []
    return [
        Violation(json_pointer(*path, "task"), f"task {ref.key}: config.{name}: {message}")
        for path, ref, task in _trigger_references(document, resolver)
        for name, message in _task_problems(task)
    ]


def _task_problems(task: dict[str, Any]) -> Iterator[tuple[str, str]]:
    attributes = task.get("attributes")
    config = attributes.get("config") if isinstance(attributes, dict) else None
    if not isinstance(attributes, dict) or not isinstance(config, dict):
        return
    task_type = str(attributes.get("type"))
    if task_type not in TRIGGER_TYPES:
        return
    domain = str(config.get("domain") or task.get("domain") or "")
    remote = remote_base_url(domain) if domain else None
    if task_type == TaskType.SUBPROCESS and remote:
        yield (
            "domain",
            (f"a SubProcess child starts in this runtime; domain {domain!r} is served by {remote}"),
        )
    for name in REMOTE_CALL_SETTINGS:
        if config.get(name) is None:
            continue
        if task_type == TaskType.SUBPROCESS:
            yield name, "a SubProcess child starts in this runtime: there is no call to configure"
        elif not remote:
            yield (
                name,
                (
                    f"applies to a call to another runtime; domain {domain!r} is served by this "
                    "one (an operator routes domains with VNEXT_REMOTE_DOMAINS)"
                ),
            )
    if task_type == TaskType.DIRECT_TRIGGER:
        if config.get("version") not in (None, ""):
            yield "version", "a transition runs on the version its instance pinned at start"
        if config.get("tags") not in (None, []):
            yield "tags", "tags are given when an instance starts, not by a transition"


def _trigger_references(
    document: dict[str, Any], resolver: Resolver
) -> Iterator[tuple[tuple[Any, ...], ComponentRef, dict[str, Any]]]:
    attributes = document.get("attributes")
    if not isinstance(attributes, dict):
        return
    holders: list[tuple[tuple[Any, ...], Any]] = []
    if isinstance(attributes.get("startTransition"), dict):
        holders.append((("attributes", "startTransition"), attributes["startTransition"]))
    for index, state in enumerate(_list(attributes.get("states"))):
        if not isinstance(state, dict):
            continue
        holders.append((("attributes", "states", index), state))
        for t_index, transition in enumerate(_list(state.get("transitions"))):
            holders.append((("attributes", "states", index, "transitions", t_index), transition))
    for t_index, transition in enumerate(_list(attributes.get("sharedTransitions"))):
        holders.append((("attributes", "sharedTransitions", t_index), transition))
    for name in ("cancel", "exit", "updateData"):
        holders.append((("attributes", name), attributes.get(name)))
    for path, holder in holders:
        if not isinstance(holder, dict):
            continue
        for field in ("onExecutionTasks", "onEntries", "onExits"):
            for index, reference in enumerate(_list(holder.get(field))):
                if not isinstance(reference, dict):
                    continue
                ref = ComponentRef.from_reference(reference.get("task"))
                if ref is None or ref.kind != ComponentKind.TASK:
                    continue
                task = resolver.resolve(ref)
                if isinstance(task, dict):
                    yield (*path, field, index), ref, task


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
