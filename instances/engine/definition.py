"""A read-only, indexed view of a published workflow document: states, transitions by kind,
what is available in a state. Built once per (domain, key, version) and shared by every hop."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from instances.engine.overrides import NO_OVERRIDES, SubflowOverrides
from instances.engine.roles import all_allowed
from instances.engine.scripts import DEFAULT_ALLOWED_MODULES
from instances.status import ExecutionType, StateType, Trigger

SELF = "$self"
DEFAULT_AUTO = 10


class TransitionKind:
    """Where a transition is defined; decides admission and the pipeline profile."""

    START = "start"
    STATE = "state"
    SHARED = "shared"
    CANCEL = "cancel"
    EXIT = "exit"
    UPDATE_DATA = "updateData"
    TIMEOUT = "timeout"
    # Not in the document: the hop that resumes a parent once its SubFlow child ended, and the
    # one that continues a state paused for a long-poll acknowledgement.
    SUBFLOW_RESUME = "subflowResume"
    LONG_POLL_ACK = "longPollAck"


SUBFLOW_RESUME_KEY = "$subflow-resume"
LONG_POLL_ACK_KEY = "$longpoll-ack"
ON_TIMEOUT_MOVE_KEY = "$on-timeout"
DEFAULT_FALLBACK_SECONDS = 60


@dataclass(frozen=True)
class TransitionDef:
    """One transition of the definition, with the state it leaves (None for shared/special)."""

    raw: dict[str, Any]
    kind: str
    source_state: str | None = None

    @cached_property
    def key(self) -> str:
        """The transition key."""
        return str(self.raw.get("key", ""))

    @cached_property
    def target(self) -> str:
        """Target state key, or `$self`."""
        return str(self.raw.get("target", ""))

    @cached_property
    def trigger_type(self) -> int:
        """`triggerType` (0 manual, 1 automatic, 2 scheduled, 3 event)."""
        if self.kind == TransitionKind.TIMEOUT:
            return Trigger.SCHEDULED
        return int(self.raw.get("triggerType", Trigger.MANUAL))

    @property
    def execution_type(self) -> ExecutionType | None:
        """`executionType`: sync or async, overriding the request's choice, or None."""
        return _execution_type(self.raw.get("executionType"))

    @property
    def is_default_auto(self) -> bool:
        """An automatic transition that fires when no other rule matched (`triggerKind: 10`)."""
        return self.raw.get("triggerKind") == DEFAULT_AUTO

    @cached_property
    def version_strategy(self) -> str:
        """`None`, `Patch`, `Minor` or `Major`."""
        return str(self.raw.get("versionStrategy") or "None")

    @property
    def tasks(self) -> list[dict[str, Any]]:
        """`onExecutionTasks`."""
        return [t for t in self.raw.get("onExecutionTasks") or [] if isinstance(t, dict)]

    @property
    def is_update_data(self) -> bool:
        """The workflow's updateData transition: composes `+Self` onto its profile."""
        return self.kind == TransitionKind.UPDATE_DATA

    def resolved_target(self, current_state: str) -> str:
        """The state this transition enters from `current_state` (`$self` resolved)."""
        return current_state if self.target == SELF else self.target

    def available_in(self, state: str) -> bool:
        """True when `availableIn` is absent or names `state`."""
        entries = self.raw.get("availableIn")
        if not entries:
            return True
        for entry in entries:
            name = entry.get("state") if isinstance(entry, dict) else entry
            if name == state:
                return True
        return False

    def role_lists(self, state: str, overrides: SubflowOverrides = NO_OVERRIDES) -> list[Any]:
        """The grant lists a caller must pass to fire this transition in `state`: its `roles`
        and the `roles` of its `availableIn` entry for `state` (seed 001: AND). A parent's
        SubFlow override of the transition's roles replaces them all (replace mode)."""
        replaced = overrides.transition_roles(self.key)
        if replaced is not None:
            return [replaced]
        lists: list[Any] = [self.raw.get("roles")]
        for entry in self.raw.get("availableIn") or []:
            if isinstance(entry, dict) and entry.get("state") == state:
                lists.append(entry.get("roles"))
        return lists

    def allows(
        self, state: str, roles: frozenset[str], overrides: SubflowOverrides = NO_OVERRIDES
    ) -> bool:
        """A caller holding `roles` (instance-relative ones included) may fire it in `state`
        (under the `overrides` of the SubFlow state that started the instance)."""
        return all_allowed(self.role_lists(state, overrides), roles)


@dataclass(frozen=True)
class StateDef:
    """One state of the definition."""

    raw: dict[str, Any]
    transitions: tuple[TransitionDef, ...] = field(default=())

    @property
    def key(self) -> str:
        """The state key."""
        return str(self.raw.get("key", ""))

    @property
    def state_type(self) -> int:
        """`stateType` (1 initial ... 5 wizard)."""
        return int(self.raw.get("stateType", StateType.INTERMEDIATE))

    @property
    def sub_type(self) -> int:
        """`subType` (0 none, 1 success, 2 error, 3 terminated, 4 suspended, 5 busy, 6 human)."""
        return int(self.raw.get("subType") or 0)

    @property
    def is_final(self) -> bool:
        """A final state: reaching it completes the instance."""
        return self.state_type == StateType.FINAL

    @property
    def on_entries(self) -> list[dict[str, Any]]:
        """`onEntries` task references."""
        return [t for t in self.raw.get("onEntries") or [] if isinstance(t, dict)]

    @property
    def on_exits(self) -> list[dict[str, Any]]:
        """`onExits` task references."""
        return [t for t in self.raw.get("onExits") or [] if isinstance(t, dict)]

    @property
    def long_poll(self) -> dict[str, Any] | None:
        """`interaction.longPoll` (`terminate`, `fallbackTimeoutSeconds`, `roles`), or None."""
        interaction = self.raw.get("interaction")
        value = interaction.get("longPoll") if isinstance(interaction, dict) else None
        return value if isinstance(value, dict) else None

    @property
    def query_roles(self) -> list[Any]:
        """The state's own `queryRoles` (empty: the workflow's apply)."""
        value = self.raw.get("queryRoles")
        return value if isinstance(value, list) else []

    @property
    def alias(self) -> list[dict[str, Any]]:
        """`alias` entries: `{name, roles, labels}`."""
        value = self.raw.get("alias")
        return [a for a in value if isinstance(a, dict)] if isinstance(value, list) else []

    @property
    def subflow(self) -> dict[str, Any] | None:
        """`subFlow` of a SubFlow state (`type`, `process`, `mapping`, `overrides`), else None."""
        value = self.raw.get("subFlow")
        if self.state_type != StateType.SUBFLOW or not isinstance(value, dict):
            return None
        return value


def schema_reference(node: Any) -> dict[str, Any] | None:
    """The component reference a `schema` field holds: `{key, domain, flow, version}`, also
    written nested as `{"schema": {...}}` (the vNext runtime takes both); None when empty."""
    if isinstance(node, dict) and set(node) == {"schema"} and isinstance(node["schema"], dict):
        node = node["schema"]
    return node if isinstance(node, dict) and node else None


class WorkflowDefinition:
    """The parsed workflow. Lookups are by key; nothing here touches a database."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.domain = str(document.get("domain", ""))
        self.key = str(document.get("key", ""))
        self.version = str(document.get("version", ""))
        attributes = document.get("attributes") or {}
        self.attributes: dict[str, Any] = attributes
        # Values derived from the (immutable) document by readers, kept with it.
        self.memo: dict[str, Any] = {}
        self._available: dict[str, tuple[TransitionDef, ...]] = {}
        self.states: dict[str, StateDef] = {}
        for raw in attributes.get("states") or []:
            transitions = tuple(
                TransitionDef(t, TransitionKind.STATE, raw.get("key"))
                for t in raw.get("transitions") or []
            )
            self.states[str(raw.get("key"))] = StateDef(raw, transitions)
        self.start = TransitionDef(attributes.get("startTransition") or {}, TransitionKind.START)
        self.shared = tuple(
            TransitionDef(t, TransitionKind.SHARED)
            for t in attributes.get("sharedTransitions") or []
        )
        self.cancel = self._special("cancel", TransitionKind.CANCEL)
        self.exit = self._special("exit", TransitionKind.EXIT)
        self.update_data = self._special("updateData", TransitionKind.UPDATE_DATA)
        self.timeout = self._special("timeout", TransitionKind.TIMEOUT)

    @property
    def master_schema_reference(self) -> dict[str, Any] | None:
        """The master schema (`attributes.schema`) every write of instance data must keep to."""
        return schema_reference(self.attributes.get("schema"))

    def runs_sync(self, transition: TransitionDef | None, requested: bool) -> bool:
        """Whether a client's start or transition runs synchronously: the transition's
        `executionType`, else the workflow's, else what the request asked (`?sync`)."""
        chosen = transition.execution_type if transition is not None else None
        if chosen is None:
            chosen = _execution_type(self.attributes.get("executionType"))
        return requested if chosen is None else chosen is ExecutionType.SYNC

    def _special(self, name: str, kind: str) -> TransitionDef | None:
        raw = self.attributes.get(name)
        return TransitionDef(raw, kind) if isinstance(raw, dict) else None

    @cached_property
    def initial_state(self) -> StateDef:
        """The Initial state (validated to exist exactly once at publish time)."""
        return next(s for s in self.states.values() if s.state_type == StateType.INITIAL)

    @cached_property
    def allowed_modules(self) -> frozenset[str]:
        """Modules its scripts may import: the defaults plus `scripts.allowedModules`."""
        scripts = self.attributes.get("scripts") or {}
        extra = scripts.get("allowedModules") or [] if isinstance(scripts, dict) else []
        return DEFAULT_ALLOWED_MODULES | frozenset(m for m in extra if isinstance(m, str))

    def query_roles(self, state: str, overrides: SubflowOverrides = NO_OVERRIDES) -> list[Any]:
        """The `queryRoles` deciding reads while an instance is in `state`: the state's own
        when it has any, else the workflow's (seed 001 "Query Roles"). A parent's SubFlow
        override of the state's query roles replaces the state's own."""
        replaced = overrides.query_roles(state)
        own = self.states[state].query_roles if state in self.states else []
        if replaced is not None:
            own = replaced
        if own:
            return own
        value = self.attributes.get("queryRoles")
        return value if isinstance(value, list) else []

    def state(self, key: str) -> StateDef:
        """The state `key`; KeyError when the definition has none."""
        return self.states[key]

    def timeout_for(self, extra: dict[str, Any]) -> TransitionDef | None:
        """The workflow timeout of an instance: a parent's `subFlow.overrides.timeout`, kept in
        the child's `extra` when it started it, replaces the workflow's own."""
        override = extra.get("timeoutOverride") if isinstance(extra, dict) else None
        if isinstance(override, dict):
            return TransitionDef(override, TransitionKind.TIMEOUT)
        return self.timeout

    def subflow_resume(self, state: str) -> TransitionDef:
        """The hop that resumes this workflow in SubFlow state `state` once its child ended
        (seed 000 step 79): it stays in the state and runs the steps from 79 on."""
        version = self.states[state].raw.get("versionStrategy") if state in self.states else None
        raw = {
            "key": SUBFLOW_RESUME_KEY,
            "target": SELF,
            "triggerType": Trigger.AUTOMATIC,
            "versionStrategy": version or "None",
        }
        return TransitionDef(raw, TransitionKind.SUBFLOW_RESUME, state)

    def long_poll_ack(self, state: str) -> TransitionDef:
        """The hop that continues state `state` after its long-poll acknowledgement (or the
        fallback): it stays in the state and runs the steps from 79 on (Auto, Schedule, ...)."""
        raw = {
            "key": LONG_POLL_ACK_KEY,
            "target": SELF,
            "triggerType": Trigger.AUTOMATIC,
            "versionStrategy": "None",
        }
        return TransitionDef(raw, TransitionKind.LONG_POLL_ACK, state)

    def on_timeout_move(self, state: str, from_state: str) -> TransitionDef | None:
        """The hop an `onTimeout` policy's `transition` runs when it names a state rather than a
        transition (the schema describes it as "the state key to transition to on timeout"):
        it enters `state` with no tasks of its own. None when there is no such state."""
        if state not in self.states:
            return None
        raw = {
            "key": ON_TIMEOUT_MOVE_KEY,
            "target": state,
            "triggerType": Trigger.AUTOMATIC,
            "versionStrategy": self.states[state].raw.get("versionStrategy") or "None",
        }
        return TransitionDef(raw, TransitionKind.STATE, from_state)

    def specials(self) -> Iterator[TransitionDef]:
        """cancel, exit and updateData, where defined."""
        for transition in (self.cancel, self.exit, self.update_data):
            if transition is not None:
                yield transition

    def transition_for(self, state: str, key: str) -> TransitionDef | None:
        """The transition `key` a client may fire in `state` (state, shared or special)."""
        return next((t for t in self.available_transitions(state) if t.key == key), None)

    def find_any(self, key: str) -> TransitionDef | None:
        """A transition `key` anywhere in the definition (to tell 404 from 'not available')."""
        candidates = [self.start, *self.shared, *self.specials()]
        candidates += [t for s in self.states.values() for t in s.transitions]
        return next((t for t in candidates if t.key == key), None)

    def available_transitions(self, state: str) -> list[TransitionDef]:
        """Every transition defined for `state`: its own, shared ones whose availableIn allows
        it, then cancel/exit/updateData (worked out once per state: the document is fixed)."""
        found = self._available.get(state)
        if found is None:
            own = list(self.states[state].transitions) if state in self.states else []
            shared = [t for t in self.shared if t.available_in(state)]
            specials = [t for t in self.specials() if t.available_in(state)]
            found = self._available[state] = (*own, *shared, *specials)
        return list(found)

    def auto_transitions(self, state: str) -> list[TransitionDef]:
        """The state's automatic transitions, in definition order."""
        return [
            t
            for t in self.available_transitions(state)
            if t.trigger_type == Trigger.AUTOMATIC and t.kind != TransitionKind.UPDATE_DATA
        ]

    def scheduled_transitions(self, state: str) -> list[TransitionDef]:
        """The state's scheduled transitions (its own and available shared ones)."""
        return [
            t
            for t in self.available_transitions(state)
            if t.trigger_type == Trigger.SCHEDULED
            and t.kind in (TransitionKind.STATE, TransitionKind.SHARED)
        ]


def _execution_type(value: Any) -> ExecutionType | None:
    # A value publishing would refuse (or none) leaves the choice to the request.
    return next((member for member in ExecutionType if member == value), None)
