"""Publish checks of timeouts the JSON Schema leaves open (seed 001, the
workflow timeout and error boundary structures):

- `timer.reset` of the workflow timeout and of a SubFlow state's `overrides.timeout` names a
  strategy the runtime knows (`instances.engine.timeouts`), case-insensitively: the documents'
  values (`None`, `workflow-start`, `OnEntry`, ...) and this runtime's two re-arming ones; the
  message of any other says what vNext would do with it;
- every `errorBoundary.onTimeout` policy (workflow, state, task reference) has a valid action
  and only the fields it executes (`action`, `defaultRetryPolicy`, `transition`): Retry needs
  `defaultRetryPolicy` and nothing else has one; Rollback and Notify name a transition of the
  workflow or a state (the schema calls it "the state key to transition to on timeout"; a
  transition of that key wins), the other actions none.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from instances.engine.boundaries import BoundaryAction, iso_duration, parse_action
from instances.engine.errors import Violation
from instances.engine.timeouts import ACCEPTED, VNEXT_READING, parse_reset
from workflows.documents import json_pointer

Path = tuple[Any, ...]
POLICY_FIELDS = frozenset({"action", "defaultRetryPolicy", "transition", "_comment"})
DIVERTING = (BoundaryAction.ROLLBACK, BoundaryAction.NOTIFY)


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _dicts(value: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    if isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(item, dict):
                yield index, item


def timeout_violations(document: dict[str, Any]) -> Iterator[Violation]:
    """The timer-reset and `onTimeout` findings of a workflow document."""
    attributes = _object(document.get("attributes"))
    yield from _reset_violations(attributes)
    states = [state for _, state in _dicts(attributes.get("states"))]
    state_keys = {state.get("key") for state in states if isinstance(state.get("key"), str)}
    transition_keys = _transition_keys(attributes, states)
    for path, policy in _timeout_policies(attributes, ("attributes",)):
        yield from _policy_violations(policy, path, transition_keys, state_keys)


# --- timer.reset ----------------------------------------------------------------------------


def _reset_violations(attributes: dict[str, Any]) -> Iterator[Violation]:
    timeouts: list[tuple[Path, Any]] = [(("attributes", "timeout"), attributes.get("timeout"))]
    for index, state in _dicts(attributes.get("states")):
        overrides = _object(_object(state.get("subFlow")).get("overrides"))
        path = ("attributes", "states", index, "subFlow", "overrides", "timeout")
        timeouts.append((path, overrides.get("timeout")))
    for path, timeout in timeouts:
        reset = _object(_object(timeout).get("timer")).get("reset")
        if isinstance(reset, str) and parse_reset(reset) is None:
            yield Violation(
                json_pointer(*path, "timer", "reset"),
                f"unknown timer reset {reset!r}: use {ACCEPTED} ({VNEXT_READING})",
            )


# --- errorBoundary.onTimeout ----------------------------------------------------------------


def _transition_keys(attributes: dict[str, Any], states: list[dict[str, Any]]) -> set[Any]:
    # Any transition of the workflow: a boundary's transition runs even where it is not
    # available (as for onError rules).
    keys = {t.get("key") for state in states for _, t in _dicts(state.get("transitions"))}
    keys |= {t.get("key") for _, t in _dicts(attributes.get("sharedTransitions"))}
    for name in ("startTransition", "cancel", "exit", "updateData"):
        keys.add(_object(attributes.get(name)).get("key"))
    return keys


def _timeout_policies(node: Any, path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every `errorBoundary.onTimeout` object (global, states, task references)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "errorBoundary" and isinstance(value, dict):
                policy = value.get("onTimeout")
                if isinstance(policy, dict):
                    yield (*path, key, "onTimeout"), policy
            elif isinstance(value, dict | list):
                yield from _timeout_policies(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _timeout_policies(value, (*path, index))


def _policy_violations(
    policy: dict[str, Any], path: Path, transition_keys: set[Any], state_keys: set[Any]
) -> Iterator[Violation]:
    for name in sorted(set(policy) - POLICY_FIELDS):
        hint = " (its retry policy is defaultRetryPolicy)" if name == "retryPolicy" else ""
        yield Violation(
            json_pointer(*path, name),
            f"an onTimeout policy has only action, defaultRetryPolicy and transition{hint}",
        )
    if "action" not in policy:
        yield Violation(json_pointer(*path, "action"), "an onTimeout policy needs an action")
        return
    action = parse_action(policy.get("action"))
    if action is None or isinstance(policy.get("action"), str):
        return  # the schema reports an action that is not one of 0-5
    transition = policy.get("transition")
    if action in DIVERTING and not transition:
        yield Violation(
            json_pointer(*path, "transition"),
            "a Rollback or Notify policy names the transition (or state) to go to",
        )
    elif action in DIVERTING and transition not in transition_keys | state_keys:
        yield Violation(
            json_pointer(*path, "transition"),
            f"{transition!r} is neither a transition nor a state of this workflow",
        )
    elif action not in DIVERTING and transition:
        yield Violation(
            json_pointer(*path, "transition"), "only Rollback and Notify policies go somewhere"
        )
    retry_policy = policy.get("defaultRetryPolicy")
    if action is BoundaryAction.RETRY and not isinstance(retry_policy, dict):
        yield Violation(
            json_pointer(*path, "defaultRetryPolicy"),
            "a Retry policy needs a defaultRetryPolicy",
        )
    elif action is not BoundaryAction.RETRY and retry_policy is not None:
        yield Violation(
            json_pointer(*path, "defaultRetryPolicy"),
            "only a Retry policy has a defaultRetryPolicy",
        )
    elif isinstance(retry_policy, dict):
        yield from retry_policy_violations(retry_policy, (*path, "defaultRetryPolicy"))


def retry_policy_violations(policy: dict[str, Any], path: tuple[Any, ...]) -> Iterator[Violation]:
    """The delays of a `retryPolicy` (an error rule's, or a timeout's `defaultRetryPolicy`): the
    first longer than zero, the longest not shorter than the first."""
    initial = iso_duration(policy.get("initialDelay"))
    if initial is not None and initial <= timedelta(0):
        yield Violation(
            json_pointer(*path, "initialDelay"), "initialDelay must be longer than zero"
        )
    largest = iso_duration(policy.get("maxDelay"))
    if largest is not None and initial is not None and largest < initial:
        yield Violation(
            json_pointer(*path, "maxDelay"), "maxDelay must not be shorter than initialDelay"
        )
