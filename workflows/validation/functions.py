"""Publish-time checks of custom functions and extensions (vNext "Custom Functions", "Extension
Management") the JSON Schema cannot express: what a workflow declares can be called and run,
and what a function component runs is unambiguous. That each referenced component exists, and
that each mapping defines its handlers, is checked with every other reference and script."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from instances.engine.errors import Violation
from instances.engine.functions import BUILT_IN_FUNCTIONS
from workflows.documents import ComponentKind, json_pointer

Path = tuple[str | int, ...]


def _dicts(value: Any, path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    if isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(item, dict):
                yield (*path, index), item


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def function_and_extension_violations(document: Any, kind: str) -> list[Violation]:
    """The function and extension findings of a workflow or function component."""
    if not isinstance(document, dict):
        return []
    if kind == ComponentKind.WORKFLOW:
        return [*_declared_functions(document), *_declared_extensions(document)]
    if kind == ComponentKind.FUNCTION:
        return list(_function_tasks(document))
    return []


def _declared_functions(document: dict[str, Any]) -> Iterator[Violation]:
    """`attributes.functions`: sys-functions references, each key once, none shadowed by a
    built-in function (its route always wins: the custom one could never be called)."""
    seen: set[str] = set()
    attributes = _object(document.get("attributes"))
    for path, reference in _dicts(attributes.get("functions"), ("attributes", "functions")):
        flow = reference.get("flow")
        if isinstance(flow, str) and flow != "sys-functions":
            yield Violation(
                json_pointer(*path, "flow"), f"a function reference names sys-functions, not {flow}"
            )
        key = reference.get("key")
        if not isinstance(key, str):
            continue
        if key in BUILT_IN_FUNCTIONS:
            yield Violation(
                json_pointer(*path, "key"),
                f"{key!r} is a built-in function: a custom function of that name could never "
                "be called",
            )
        elif key in seen:
            yield Violation(
                json_pointer(*path, "key"),
                f"function {key!r} is declared twice: a call by name would be ambiguous",
            )
        seen.add(key)


def _declared_extensions(document: dict[str, Any]) -> Iterator[Violation]:
    """`attributes.extensions` and `features`: sys-extensions references, each key once over
    both lists; and every name a view asks for (`view.extensions`, its default's and rules')
    is one of them (a name is requested by key: the declaration pins its version)."""
    attributes = _object(document.get("attributes"))
    declared: set[str] = set()
    for name in ("extensions", "features"):
        for path, reference in _dicts(attributes.get(name), ("attributes", name)):
            flow = reference.get("flow")
            if isinstance(flow, str) and flow != "sys-extensions":
                yield Violation(
                    json_pointer(*path, "flow"),
                    f"an extension reference names sys-extensions, not {flow}",
                )
            key = reference.get("key")
            if not isinstance(key, str):
                continue
            if key in declared:
                yield Violation(
                    json_pointer(*path, "key"),
                    f"extension {key!r} is declared twice (extensions and features are one list)",
                )
            declared.add(key)
    for path, names in _view_extension_names(attributes):
        for index, value in enumerate(names):
            if isinstance(value, str) and value not in declared:
                yield Violation(
                    json_pointer(*path, index),
                    f"extension {value!r} is not declared in attributes.extensions or "
                    "attributes.features",
                )


def _view_extension_names(attributes: dict[str, Any]) -> Iterator[tuple[Path, list[Any]]]:
    """Every `extensions` list of a state's or transition's view (plain form, default, rules)."""
    holders: list[tuple[Path, dict[str, Any]]] = []
    for path, state in _dicts(attributes.get("states"), ("attributes", "states")):
        holders.append((path, state))
        holders.extend(_dicts(state.get("transitions"), (*path, "transitions")))
    holders.extend(_dicts(attributes.get("sharedTransitions"), ("attributes", "sharedTransitions")))
    for name in ("startTransition", "cancel", "exit", "updateData"):
        if isinstance(attributes.get(name), dict):
            holders.append((("attributes", name), attributes[name]))
    for path, holder in holders:
        view = holder.get("view")
        if not isinstance(view, dict):
            continue
        entries: list[tuple[Path, dict[str, Any]]] = [((*path, "view"), view)]
        if isinstance(view.get("default"), dict):
            entries.append(((*path, "view", "default"), view["default"]))
        entries.extend(_dicts(view.get("rules"), (*path, "view", "rules")))
        for entry_path, entry in entries:
            if isinstance(entry.get("extensions"), list):
                yield (*entry_path, "extensions"), entry["extensions"]


def _function_tasks(document: dict[str, Any]) -> Iterator[Violation]:
    """A function runs `task` or `onExecutionTasks`, not both; and its output script tells its
    tasks' outputs apart by task key, so no task runs twice."""
    attributes = _object(document.get("attributes"))
    listed = attributes.get("onExecutionTasks")
    if isinstance(listed, list) and listed and isinstance(attributes.get("task"), dict):
        yield Violation(
            json_pointer("attributes", "task"),
            "a function runs its task or its onExecutionTasks, not both",
        )
    seen: set[str] = set()
    for path, reference in _dicts(listed, ("attributes", "onExecutionTasks")):
        key = _object(reference.get("task")).get("key")
        if not isinstance(key, str):
            continue
        if key in seen:
            yield Violation(
                json_pointer(*path, "task", "key"),
                f"task {key!r} runs twice: the output script sees each task's output by key",
            )
        seen.add(key)
