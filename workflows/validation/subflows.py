"""Publish checks of what a SubFlow state overrides in its child (seed 001 SubFlow state,
vnext-schema `subFlowOverrides`): every key names something the child workflow version has.

- `viewOverrides` / `overrides.views`: a view key one of the child's states or transitions
  shows (plain view, a rule's or the default's);
- `overrides.transitions`: a transition of the child other than its start: a state's (any
  trigger type), a shared one, cancel, exit or updateData. As in vNext, whose `authorize`
  reads a stamped override for every transition the child's state offers, an automatic,
  scheduled or event transition's override decides what `authorize?transitionKey=` answers for
  it while the engine still fires it whatever the roles; a manual one's also gates firing and
  the offered transitions. The start is refused: the SubFlow state runs it, no state offers it,
  so its override would never be read;
- `overrides.states`: a state of the child;
- `overrides.timeout.target`: a state of the child (the timeout runs in the child).

A child that does not resolve is reported by the reference check; nothing more is said here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from instances.engine.errors import Violation
from instances.status import StateType
from workflows.documents import ComponentKind, ComponentRef, json_pointer
from workflows.validation.scripts import Resolver

Path = tuple[Any, ...]


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _dicts(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, list):
        yield from (item for item in value if isinstance(item, dict))


def _client_transitions(attributes: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every transition but the start: each state's, shared, cancel, exit, updateData."""
    for state in _dicts(attributes.get("states")):
        yield from _dicts(state.get("transitions"))
    yield from _dicts(attributes.get("sharedTransitions"))
    for name in ("cancel", "exit", "updateData"):
        if isinstance(attributes.get(name), dict):
            yield attributes[name]


def _view_keys(attributes: dict[str, Any]) -> set[str]:
    """The keys of the views the workflow's states and transitions show."""
    holders = [*_dicts(attributes.get("states")), *_client_transitions(attributes)]
    keys: set[str] = set()
    for holder in holders:
        view = _object(holder.get("view"))
        for entry in [view, _object(view.get("default")), *_dicts(view.get("rules"))]:
            key = _object(entry.get("view")).get("key")
            if isinstance(key, str):
                keys.add(key)
    return keys


def subflow_override_violations(
    document: dict[str, Any], resolver: Resolver
) -> Iterator[Violation]:
    """A violation at every override key of a SubFlow state that its child does not have."""
    for index, state in enumerate(_dicts(_object(document.get("attributes")).get("states"))):
        subflow = _object(state.get("subFlow"))
        if state.get("stateType") != StateType.SUBFLOW or not subflow:
            continue
        ref = ComponentRef.from_reference(subflow.get("process"))
        child = resolver.resolve(ref) if ref is not None else None
        if ref is None or ref.kind != ComponentKind.WORKFLOW or not isinstance(child, dict):
            continue
        base: Path = ("attributes", "states", index, "subFlow")
        yield from _child_violations(subflow, base, _object(child.get("attributes")), str(ref))


def _child_violations(
    subflow: dict[str, Any], base: Path, child: dict[str, Any], name: str
) -> Iterator[Violation]:
    states = {s.get("key") for s in _dicts(child.get("states"))}
    overridable = {t.get("key") for t in _client_transitions(child)}
    start = _object(child.get("startTransition")).get("key")
    views = _view_keys(child)
    overrides = _object(subflow.get("overrides"))
    for path, given in (
        ((*base, "viewOverrides"), _object(subflow.get("viewOverrides"))),
        ((*base, "overrides", "views"), _object(overrides.get("views"))),
    ):
        for key in given:
            if key not in views:
                yield Violation(
                    json_pointer(*path, key),
                    f"the child workflow {name} shows no view {key!r} (a view key its states "
                    "and transitions name)",
                )
    for key in _object(overrides.get("transitions")):
        if key in overridable:
            continue
        reason = (
            f"{key!r} is the start transition of the child workflow {name}: this SubFlow state "
            "runs it and no state offers it, so no caller's roles and no authorize question "
            "ever read its override (vNext checks no roles when a SubFlow state starts its child)"
            if key == start
            else f"the child workflow {name} has no transition {key!r} (vNext would keep the "
            "override and it would never apply)"
        )
        yield Violation(json_pointer(*base, "overrides", "transitions", key), reason)
    for key in _object(overrides.get("states")):
        if key not in states:
            yield Violation(
                json_pointer(*base, "overrides", "states", key),
                f"the child workflow {name} has no state {key!r}",
            )
    target = _object(overrides.get("timeout")).get("target")
    if isinstance(target, str) and target not in states:
        yield Violation(
            json_pointer(*base, "overrides", "timeout", "target"),
            f"the child workflow {name} has no state {target!r} (the timeout runs in the child)",
        )
