"""Which view an instance shows (seed 001 "Wizard State" and state/transition `view`,
vnext-schema `viewDefinition`, vNext "Rule-Based View Selection").

A state's or transition's `view` is either plain, `{view, loadData}`, or conditional,
`{rules: [{rule, view, loadData}], default: {view, loadData}}`: the rules are evaluated in order
in the script workers (a rule is a condition script, `handler(context) -> bool`, like a
transition's `rule`), the first that holds chooses its view, else `default`, else there is no
view. A rule that fails is logged and counts as not holding (the next one is tried, as vNext
does); no worker to run it is the platform's failure, raised (`Script:Unavailable`, 503).
A parent's SubFlow view override then replaces the chosen view by its key.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from instances.engine.definition import StateDef, TransitionDef, WorkflowDefinition
from instances.engine.errors import Codes, VNextError
from instances.engine.records import InstanceSnapshot
from instances.engine.script_runner import ScriptRunner, script_context
from instances.engine.scripts import ScriptError, ScriptUnavailable
from instances.status import StateType, Trigger

logger = logging.getLogger("vnext.views")


@dataclass(frozen=True)
class ViewChoice:
    """The view to serve: its component reference (after the SubFlow override) and whether the
    client should load the instance data with it."""

    reference: dict[str, Any]
    load_data: bool


@dataclass(frozen=True)
class ViewSlot:
    """Where a view is read from: a `view` definition and the transition it belongs to (its key
    is the rules' `context.transition.key`; empty for the state's own view)."""

    definition: Any
    transition_key: str = ""


def is_conditional(view: Any) -> bool:
    """The conditional form: a non-empty `rules` list."""
    return isinstance(view, dict) and isinstance(view.get("rules"), list) and bool(view["rules"])


def names_a_view(view: Any) -> bool:
    """The definition names some view (its own, a rule's or the default's): the state
    function's `hasView` without running any rule."""
    if not isinstance(view, dict):
        return False
    entries = [view, view.get("default"), *(view.get("rules") or [])]
    return any(isinstance(e, dict) and isinstance(e.get("view"), dict) for e in entries)


def _entry_choice(entry: Any) -> ViewChoice | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("view"), dict):
        return None
    return ViewChoice(entry["view"], bool(entry.get("loadData")))


def choose_view(view: Any, holds: Callable[[dict[str, Any]], bool]) -> ViewChoice | None:
    """The entry `view` serves: the plain form's, else the first rule entry whose `rule`
    `holds` (an entry without a rule always matches), else `default`; None when none does."""
    if not isinstance(view, dict):
        return None
    if not is_conditional(view):
        return _entry_choice(view)
    for entry in view["rules"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("view"), dict):
            continue
        rule = entry.get("rule")
        if isinstance(rule, dict) and not holds(rule):
            continue
        return _entry_choice(entry)
    return _entry_choice(view.get("default"))


def view_slot(
    definition: WorkflowDefinition,
    instance: InstanceSnapshot,
    transition: TransitionDef | None,
    roles: frozenset[str] | None,
) -> ViewSlot:
    """The view definition the view function reads for `instance`: `transition`'s when it has
    one (else the state's); with no transition asked, a wizard state's manual transition the
    caller may fire (roles None: any), else the state's own (seed 001)."""
    state: StateDef | None = definition.states.get(instance.current_state)
    own = state.raw.get("view") if state is not None else None
    if transition is None and state is not None and state.state_type == StateType.WIZARD:
        overrides = instance.overrides
        transition = next(
            (
                t
                for t in state.transitions
                if t.trigger_type == Trigger.MANUAL
                and (roles is None or t.allows(state.key, roles, overrides))
            ),
            None,
        )
    if transition is not None and transition.raw.get("view"):
        return ViewSlot(transition.raw["view"], transition.key)
    return ViewSlot(own, transition.key if transition is not None else "")


def select_view(
    scripts: ScriptRunner,
    definition: WorkflowDefinition,
    instance: InstanceSnapshot,
    slot: ViewSlot,
    *,
    headers: dict[str, str] | None = None,
    query: dict[str, Any] | None = None,
    configuration: dict[str, Any] | None = None,
) -> ViewChoice | None:
    """The view `slot` serves `instance` for a request with `headers` and `query` (what its
    rules' `context.headers` / `context.query` hold), the instance's SubFlow view override
    applied; None when it has no view (no rule held and no default)."""
    context: Any = None

    def holds(rule: dict[str, Any]) -> bool:
        nonlocal context
        if context is None:
            context = script_context(
                instance,
                transition_key=slot.transition_key,
                headers=headers,
                query=query,
                configuration=configuration,
            )
        try:
            return bool(scripts.call(rule, definition, "handler", context))
        except ScriptUnavailable as exc:
            raise VNextError(
                Codes.script(exc.code),
                f"no script worker could evaluate a view rule: {exc}",
                instance_id=str(instance.id),
            ) from exc
        except (ScriptError, VNextError) as exc:
            logger.warning(
                "a view rule of %s %s (state %s) failed; the next rule is tried: %s",
                instance.workflow_key,
                instance.id,
                instance.current_state,
                exc,
            )
            return False

    choice = choose_view(slot.definition, holds)
    if choice is None:
        return None
    reference = instance.overrides.view(choice.reference)
    return ViewChoice(reference, choice.load_data)
