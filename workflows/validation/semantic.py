"""Semantic checks the JSON Schema cannot express (API.md section 4, seed 001, seed 002).

Each check reads the document defensively: a structurally broken document still gets every
semantic finding that can be made, never an exception.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from instances.engine.boundaries import BoundaryAction, parse_action
from instances.engine.definition import DEFAULT_AUTO, SELF
from instances.engine.errors import Violation
from instances.status import FlowType, StateType, TaskType, Trigger
from workflows.documents import KIND_BY_FLOW, ComponentKind, ComponentRef, json_pointer
from workflows.validation.field_rules import field_rule_violations
from workflows.validation.functions import function_and_extension_violations
from workflows.validation.notifications import (
    fan_out_notification_violations,
    notification_reference_violations,
)
from workflows.validation.scripts import Resolver
from workflows.validation.subflows import subflow_override_violations
from workflows.validation.targets import named_target_violations
from workflows.validation.timeouts import retry_policy_violations, timeout_violations

DIVERTING = (BoundaryAction.ROLLBACK, BoundaryAction.NOTIFY)
# The triggers a state's own transition may have (an error-boundary run is the engine's).
STATE_TRIGGERS = (Trigger.MANUAL, Trigger.AUTOMATIC, Trigger.SCHEDULED, Trigger.EVENT)


def _dicts(value: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    if isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(item, dict):
                yield index, item


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def semantic_violations(document: Any, kind: str, resolver: Resolver) -> list[Violation]:
    """Every semantic violation of a component document."""
    if not isinstance(document, dict):
        return []
    violations = list(_reference_violations(document, resolver))
    violations.extend(function_and_extension_violations(document, kind))
    if kind == ComponentKind.WORKFLOW:
        violations.extend(_workflow_violations(document))
        violations.extend(subflow_override_violations(document, resolver))
        violations.extend(timeout_violations(document))
        violations.extend(notification_reference_violations(document, resolver))
    elif kind == ComponentKind.TASK:
        violations.extend(_fan_out_violations(document, resolver))
        violations.extend(fan_out_notification_violations(document, resolver))
        violations.extend(named_target_violations(document))
    elif kind == ComponentKind.SCHEMA:
        violations.extend(field_rule_violations(document))
    return violations


# --- references --------------------------------------------------------------------------------


def _reference_violations(document: dict[str, Any], resolver: Resolver) -> Iterator[Violation]:
    """Every explicit `{key, domain, flow, version}` reference resolves; `ref` forms are resolved
    by `import_components` before publishing."""

    def walk(node: Any, path: tuple[Any, ...]) -> Iterator[Violation]:
        if isinstance(node, dict):
            if path and set(node) == {"ref"} and isinstance(node["ref"], str):
                yield Violation(
                    json_pointer(*path, "ref"),
                    f"file reference {node['ref']!r} is not resolved; publish with "
                    "import_components, which turns it into key/domain/flow/version",
                )
                return
            flow = node.get("flow")
            if path and isinstance(flow, str) and flow in KIND_BY_FLOW and "key" in node:
                ref = ComponentRef.from_reference(node)
                if ref is not None and resolver.resolve(ref) is None:
                    yield Violation(json_pointer(*path), f"referenced {ref} does not exist")
                return
            for key, value in node.items():
                if key == "code" and node.get("encoding") == "REF":
                    continue  # checked with the script
                yield from walk(value, (*path, key))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                yield from walk(value, (*path, index))

    attributes = document.get("attributes")
    if isinstance(attributes, dict):
        for key, value in attributes.items():
            if key == "schema" and document.get("flow") == "sys-schemas":
                continue  # a schema component's body is a JSON Schema, not references
            yield from walk(value, ("attributes", key))


# --- workflows ---------------------------------------------------------------------------------


def _workflow_violations(document: dict[str, Any]) -> Iterator[Violation]:
    attributes = document.get("attributes")
    if not isinstance(attributes, dict):
        return
    states = list(_dicts(attributes.get("states")))
    state_types = {state.get("key"): state.get("stateType") for _, state in states}
    state_keys = set(state_types)

    yield from _state_violations(states, state_types)
    yield from _start_violations(attributes.get("startTransition"), state_types)

    for index, state in states:
        base: tuple[Any, ...] = ("attributes", "states", index)
        transitions = list(_dicts(state.get("transitions")))
        yield from _state_transition_violations(transitions, base, state_keys)
        yield from _state_type_violations(state, transitions, base)

    for s_index, shared in _dicts(attributes.get("sharedTransitions")):
        path = ("attributes", "sharedTransitions", s_index)
        yield from _target_violations(shared, path, state_keys, allow_self=True)
        yield from _trigger_violations(
            shared, path, allowed=(Trigger.MANUAL, Trigger.SCHEDULED, Trigger.EVENT)
        )
        yield from _available_in_violations(shared, path, state_keys)

    yield from _special_transition_violations(attributes, state_keys)
    timeout = attributes.get("timeout")
    if isinstance(timeout, dict):
        yield from _target_violations(timeout, ("attributes", "timeout"), state_keys, False)
    transition_keys = _transition_keys(attributes, states)
    for path, boundary in _boundaries(attributes, ("attributes",)):
        yield from _error_boundary_violations(boundary, path, transition_keys)
    yield from _boundary_lock_violations(attributes, states)


def _state_transition_violations(
    transitions: list[tuple[int, dict[str, Any]]], base: tuple[Any, ...], state_keys: set[Any]
) -> Iterator[Violation]:
    """A state's own transitions: unique keys, a target that exists, a valid trigger."""
    seen: set[Any] = set()
    for t_index, transition in transitions:
        path: tuple[Any, ...] = (*base, "transitions", t_index)
        if transition.get("key") in seen:
            yield Violation(
                json_pointer(*path, "key"),
                f"duplicate transition key {transition.get('key')!r} in this state",
            )
        seen.add(transition.get("key"))
        yield from _target_violations(transition, path, state_keys, allow_self=True)
        yield from _trigger_violations(transition, path, allowed=STATE_TRIGGERS)


def _state_type_violations(
    state: dict[str, Any], transitions: list[tuple[int, dict[str, Any]]], base: tuple[Any, ...]
) -> Iterator[Violation]:
    """What a state's `stateType` asks of it: a wizard's one manual transition, a final state's
    none, a subflow state's `subFlow` (of type S)."""
    state_type = state.get("stateType")
    if state_type == StateType.WIZARD:
        manual = [t for _, t in transitions if t.get("triggerType") == Trigger.MANUAL]
        if len(manual) != 1:
            yield Violation(
                json_pointer(*base, "transitions"),
                f"a wizard state (stateType 5) has exactly one manual transition, "
                f"found {len(manual)}",
            )
    if state_type == StateType.FINAL and transitions:
        yield Violation(
            json_pointer(*base, "transitions"), "a final state (stateType 3) has no transitions"
        )
    if state_type == StateType.SUBFLOW and not isinstance(state.get("subFlow"), dict):
        yield Violation(
            json_pointer(*base, "subFlow"), "a subflow state (stateType 4) needs subFlow"
        )
    subflow = _object(state.get("subFlow"))
    if subflow and state_type != StateType.SUBFLOW:
        yield Violation(
            json_pointer(*base, "subFlow"),
            "only a subflow state (stateType 4) starts a subFlow; set stateType 4 or remove it",
        )
    if subflow.get("type") == FlowType.SUBPROCESS:
        yield Violation(
            json_pointer(*base, "subFlow", "type"),
            "a state starts subflows of type 'S'; a SubProcess ('P') is started by a task of "
            "type 14",
        )


def _special_transition_violations(
    attributes: dict[str, Any], state_keys: set[Any]
) -> Iterator[Violation]:
    """cancel, exit and updateData: manual only, available where they say; updateData's
    target is `$self`."""
    for name in ("cancel", "exit", "updateData"):
        special = attributes.get(name)
        if not isinstance(special, dict):
            continue
        path = ("attributes", name)
        if name == "updateData":
            if special.get("target") != SELF:
                yield Violation(
                    json_pointer(*path, "target"), "updateData's target is always '$self'"
                )
        else:
            yield from _target_violations(special, path, state_keys, allow_self=False)
        yield from _trigger_violations(special, path, allowed=(Trigger.MANUAL,), name=name)
        yield from _available_in_violations(special, path, state_keys)


def _transition_keys(
    attributes: dict[str, Any], states: list[tuple[int, dict[str, Any]]]
) -> set[Any]:
    """What a rollback/notify rule may name: any transition of the workflow (it runs even
    where it is not available)."""
    transition_keys = {
        t.get("key") for _, state in states for _, t in _dicts(state.get("transitions"))
    }
    transition_keys |= {t.get("key") for _, t in _dicts(attributes.get("sharedTransitions"))}
    for name in ("startTransition", "cancel", "exit", "updateData"):
        transition_keys.add(_object(attributes.get(name)).get("key"))
    return transition_keys


def _boundary_lock_violations(
    attributes: dict[str, Any], states: list[tuple[int, dict[str, Any]]]
) -> Iterator[Violation]:
    """A transition an error boundary's rule runs (Rollback, Notify) runs under the
    ErrorBoundary profile, which has no ResourceLock step (seed 000): its `resourceLock` would
    not run there, so it is refused at publish."""
    diverted = {
        rule.get("transition")
        for _, boundary in _boundaries(attributes, ("attributes",))
        if isinstance(boundary, dict)
        for _, rule in _dicts(boundary.get("onError"))
        if rule.get("action") in DIVERTING
    }
    located: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        (("attributes", "states", index, "transitions", t_index), transition)
        for index, state in states
        for t_index, transition in _dicts(state.get("transitions"))
    ]
    located += [
        (("attributes", "sharedTransitions", index), shared)
        for index, shared in _dicts(attributes.get("sharedTransitions"))
    ]
    for path, transition in located:
        if transition.get("key") in diverted and transition.get("resourceLock") is not None:
            yield Violation(
                json_pointer(*path, "resourceLock"),
                f"an error boundary runs {transition.get('key')!r} (Rollback/Notify) under the "
                "ErrorBoundary profile, which takes no resource lock (seed 000): the lock "
                "would not run; move it to a transition of its own",
            )


def _state_violations(
    states: list[tuple[int, dict[str, Any]]], state_types: dict[Any, Any]
) -> Iterator[Violation]:
    initial = [index for index, state in states if state.get("stateType") == StateType.INITIAL]
    if not initial:
        yield Violation(
            json_pointer("attributes", "states"),
            "the workflow has no Initial state (stateType 1); exactly one is required",
        )
    for index in initial[1:]:
        yield Violation(
            json_pointer("attributes", "states", index, "stateType"),
            "a second Initial state; exactly one state has stateType 1",
        )
    seen: set[Any] = set()
    for index, state in states:
        if state.get("key") in seen:
            yield Violation(
                json_pointer("attributes", "states", index, "key"),
                f"duplicate state key {state.get('key')!r}",
            )
        seen.add(state.get("key"))


def _start_violations(start: Any, state_types: dict[Any, Any]) -> Iterator[Violation]:
    if not isinstance(start, dict):
        return
    path = ("attributes", "startTransition")
    yield from _trigger_violations(start, path, allowed=(Trigger.MANUAL,), name="startTransition")
    target = start.get("target")
    if isinstance(target, str) and target not in state_types:
        yield Violation(json_pointer(*path, "target"), f"target state {target!r} does not exist")
    elif isinstance(target, str) and state_types.get(target) != StateType.INITIAL:
        yield Violation(
            json_pointer(*path, "target"),
            f"the start transition must target the Initial state, not {target!r}",
        )


def _target_violations(
    transition: dict[str, Any], path: tuple[Any, ...], state_keys: set[Any], allow_self: bool
) -> Iterator[Violation]:
    target = transition.get("target")
    if not isinstance(target, str):
        return
    if target == SELF:
        if not allow_self:
            yield Violation(json_pointer(*path, "target"), "'$self' is not allowed here")
    elif target not in state_keys:
        yield Violation(json_pointer(*path, "target"), f"target state {target!r} does not exist")


def _trigger_violations(
    transition: dict[str, Any], path: tuple[Any, ...], allowed: tuple[int, ...], name: str = ""
) -> Iterator[Violation]:
    trigger = transition.get("triggerType")
    if not isinstance(trigger, int):
        return
    if trigger not in allowed:
        if allowed == (Trigger.MANUAL,):
            message = f"{name} is manual only (triggerType 0), got {trigger}"
        elif Trigger.AUTOMATIC not in allowed:
            message = f"a shared transition has triggerType 0, 2 or 3 (no automatic), got {trigger}"
        else:
            message = f"triggerType must be 0, 1, 2 or 3, got {trigger}"
        yield Violation(json_pointer(*path, "triggerType"), message)
        return
    if "executionType" in transition and trigger != Trigger.MANUAL:
        yield Violation(
            json_pointer(*path, "executionType"),
            "executionType chooses how a client's request runs: only a manual transition "
            f"(triggerType 0) takes it, not triggerType {trigger}",
        )
    if (
        trigger == Trigger.AUTOMATIC
        and transition.get("triggerKind") != DEFAULT_AUTO
        and transition.get("rule") is None
    ):
        yield Violation(
            json_pointer(*path, "rule"),
            "an automatic transition (triggerType 1) needs a rule unless triggerKind is 10",
        )
    # A rule or timer object without code (`{}` too) is the script check's "script missing".
    if trigger == Trigger.SCHEDULED and transition.get("timer") is None:
        yield Violation(
            json_pointer(*path, "timer"), "a scheduled transition (triggerType 2) needs a timer"
        )
    if trigger == Trigger.EVENT and not transition.get("event"):
        yield Violation(
            json_pointer(*path, "event"), "an event transition (triggerType 3) needs an event"
        )


def _available_in_violations(
    transition: dict[str, Any], path: tuple[Any, ...], state_keys: set[Any]
) -> Iterator[Violation]:
    available = transition.get("availableIn")
    if not isinstance(available, list):
        return
    for index, entry in enumerate(available):
        key = entry.get("state") if isinstance(entry, dict) else entry
        if isinstance(key, str) and key not in state_keys:
            yield Violation(
                json_pointer(*path, "availableIn", index), f"state {key!r} does not exist"
            )


def _boundaries(node: Any, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every `errorBoundary` in the workflow (global, states, task references), with its path."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "errorBoundary":
                yield (*path, key), value
            elif isinstance(value, dict | list):
                yield from _boundaries(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _boundaries(value, (*path, index))


def _error_boundary_violations(
    boundary: Any, path: tuple[Any, ...], transition_keys: set[Any]
) -> Iterator[Violation]:
    if not isinstance(boundary, dict):
        return
    for index, rule in _dicts(boundary.get("onError")):
        rule_path = (*path, "onError", index)
        action = rule.get("action")
        transition = rule.get("transition")
        if action in DIVERTING and not transition:
            yield Violation(
                json_pointer(*rule_path, "transition"),
                "Rollback and Notify rules name the transition to trigger",
            )
        elif action in DIVERTING and transition not in transition_keys:
            yield Violation(
                json_pointer(*rule_path, "transition"),
                f"transition {transition!r} does not exist in this workflow",
            )
        elif action not in (BoundaryAction.ABORT, *DIVERTING) and transition:
            # Accepted, it would be ignored: only Rollback and Notify run a transition.
            yield Violation(
                json_pointer(*rule_path, "transition"),
                "only Rollback and Notify rules run a transition",
            )
        policy = rule.get("retryPolicy")
        if action == BoundaryAction.RETRY and isinstance(policy, dict):
            yield from retry_policy_violations(policy, (*rule_path, "retryPolicy"))
        elif action != BoundaryAction.RETRY and policy is not None:
            yield Violation(
                json_pointer(*rule_path, "retryPolicy"), "only a Retry rule has a retryPolicy"
            )
        if action == BoundaryAction.ABORT and rule.get("transition"):
            yield Violation(
                json_pointer(*rule_path, "transition"), "an Abort rule names no transition"
            )
        if action == BoundaryAction.RETRY and not isinstance(rule.get("retryPolicy"), dict):
            yield Violation(
                json_pointer(*rule_path, "retryPolicy"), "a Retry rule needs a retryPolicy"
            )


# --- fan-out tasks (seed 002, "Doğrulama") --------------------------------------------------------


def _fan_out_violations(document: dict[str, Any], resolver: Resolver) -> Iterator[Violation]:
    attributes = document.get("attributes")
    if not isinstance(attributes, dict) or str(attributes.get("type")) != TaskType.FAN_OUT:
        return
    config = attributes.get("config")
    if not isinstance(config, dict):
        return
    base = ("attributes", "config")
    if config.get("mode", "inline") != "inline":
        yield Violation(
            json_pointer(*base, "mode"),
            f"mode {config.get('mode')!r} is not supported: only 'inline' ('durable' is reserved)",
        )
    items_path = config.get("itemsPath")
    if isinstance(items_path, str) and not items_path.startswith("$."):
        yield Violation(json_pointer(*base, "itemsPath"), "itemsPath must start with '$.'")
    execution = _object(config.get("execution"))
    item_timeout = execution.get("itemTimeoutSeconds", 30)
    batch_timeout = execution.get("batchTimeoutSeconds", 120)
    if (
        isinstance(item_timeout, int)
        and isinstance(batch_timeout, int)
        and item_timeout > batch_timeout
    ):
        yield Violation(
            json_pointer(*base, "execution", "itemTimeoutSeconds"),
            f"itemTimeoutSeconds ({item_timeout}) exceeds batchTimeoutSeconds ({batch_timeout})",
        )
    join = _object(config.get("join"))
    if join.get("policy") == "quorum":
        min_success = join.get("minSuccess")
        if not isinstance(min_success, int) or min_success < 1:
            yield Violation(
                json_pointer(*base, "join", "minSuccess"),
                "the quorum policy needs minSuccess >= 1",
            )
    boundary = _object(config.get("errorBoundary"))
    for index, rule in _dicts(boundary.get("onError")):
        action = parse_action(rule.get("action"))
        if action in (BoundaryAction.ROLLBACK, BoundaryAction.NOTIFY):
            yield Violation(
                json_pointer(*base, "errorBoundary", "onError", index, "action"),
                f"an item error boundary cannot {action.name.lower()}: an item has no "
                "transition to divert to (use abort, retry, ignore or log)",
            )
        if isinstance(rule.get("retryPolicy"), dict):
            yield from retry_policy_violations(
                rule["retryPolicy"], (*base, "errorBoundary", "onError", index, "retryPolicy")
            )
    inner_ref = ComponentRef.from_reference(config.get("task"))
    inner = resolver.resolve(inner_ref) if inner_ref else None
    if inner is not None and str(inner.get("attributes", {}).get("type")) == TaskType.FAN_OUT:
        yield Violation(
            json_pointer(*base, "task"),
            f"nested fan-out: the inner task {inner_ref} is itself a Fan-Out task (type 21)",
        )
