"""What the engine reads and writes through its store: the instance snapshot and the pending
writes of a pipeline (one unit of work, flushed in one transaction behind one guard)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any

from instances.engine.merging import deep_merge
from instances.engine.overrides import SubflowOverrides
from instances.engine.protection import Opened
from instances.status import FlowType, InstanceStatus


def new_etag() -> str:
    """A fresh opaque ETag value."""
    return uuid.uuid4().hex


VERSION_RANK = {"None": 0, "Patch": 1, "Minor": 2, "Major": 3}


def bump_version(version: tuple[int, int, int], strategy: str) -> tuple[int, int, int]:
    """Apply a `versionStrategy` to a (major, minor, patch) data version."""
    major, minor, patch = version
    if strategy == "Major":
        return major + 1, 0, 0
    if strategy == "Minor":
        return major, minor + 1, 0
    if strategy == "Patch":
        return major, minor, patch + 1
    return version


@dataclass
class InstanceSnapshot:
    """The engine's copy of an instance row. Mutated in memory by steps; persisted by flushes."""

    id: uuid.UUID
    domain: str
    workflow_key: str
    workflow_version: str
    current_state: str
    status: str = InstanceStatus.ACTIVE
    key: str | None = None
    effective_state: str = ""
    effective_state_type: str = "initial"
    effective_state_subtype: str = "none"
    data: dict[str, Any] = field(default_factory=dict)
    data_version: tuple[int, int, int] = (1, 0, 0)
    etag: str = field(default_factory=new_etag)
    entity_etag: str = field(default_factory=new_etag)
    state_version: int = 0
    busy_owner: str = ""
    busy_since: datetime | None = None
    tags: list[str] = field(default_factory=list)
    stage: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    created_by: str = ""
    modified_by: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    completed_at: datetime | None = None
    # The correlation that started this instance as a subflow (S) or subprocess (P) child.
    parent_correlation_id: int | None = None
    # Fields encrypted at rest, as the store loaded them: path -> stored token and the clear
    # value in `data` (engine/protection.py). Reads show callers outside the exemption roles
    # the token; a flush keeps it for an unchanged value. Out of repr: it holds clear values.
    sealed: dict[tuple[str, ...], Opened] = field(default_factory=dict, repr=False, compare=False)

    @property
    def data_version_text(self) -> str:
        """The data version as semver text."""
        return ".".join(str(part) for part in self.data_version)

    @property
    def overrides(self) -> SubflowOverrides:
        """What the parent's SubFlow state that started it overrides (its views, transition
        roles and state query roles), pinned in `extra` at its start; empty otherwise."""
        return SubflowOverrides.of_extra(self.extra)


@dataclass
class TransitionRow:
    """An `InstanceTransition` row to insert or update (upsert by id)."""

    id: uuid.UUID
    transition_key: str
    from_state: str
    to_state: str
    trigger_type: int
    body: Any
    actor: str
    status: str
    started_at: datetime
    chain_depth: int = 0
    stage: str = ""
    error_code: str = ""
    error_message: str = ""
    effective_state: str = ""
    effective_state_type: str = ""
    effective_state_subtype: str = ""
    finished_at: datetime | None = None


@dataclass
class TaskRow:
    """An `InstanceTask` journal row."""

    transition_id: uuid.UUID | None
    task_key: str
    phase: str
    order: int
    status: str
    response: Any
    duration_ms: int
    error_code: str = ""
    error_message: str = ""
    attempts: int = 1


@dataclass
class HumanTaskRow:
    """A `HumanTask` row a hop opens (task type 5): the inbox entry of `state`, assigned to
    `roles` and `users`. Inserted open when the flush leaves the instance in `state`, else
    cancelled at once (a later hop of the same flush left it)."""

    id: uuid.UUID
    task_key: str
    state: str
    title: str
    instructions: str
    roles: list[str]
    users: list[str]
    form: Any = None
    context: Any = None
    due_at: datetime | None = None
    transition_id: uuid.UUID | None = None


@dataclass
class IncidentRow:
    """An `Incident` row."""

    transition_id: uuid.UUID | None
    state: str
    transition_key: str
    error_code: str
    message: str
    layer: str = "pipeline"
    task_key: str = ""
    step: str = ""
    attempt: int | None = None
    resolved: bool = False
    resolution: str = ""
    resolved_by: str = ""
    resolved_at: datetime | None = None
    # The error-boundary rule that decided (`Abort`, `Rollback`, ...) and its level
    # (`Task`, `State`, `Global`); empty when no rule matched.
    boundary_action: str = ""
    boundary_level: str = ""


@dataclass
class JobRow:
    """A `Job` row (timer, ...) inserted with the change that causes it."""

    kind: str
    run_at: datetime
    state: str = ""
    payload: dict[str, Any] = field(default_factory=dict)
    dedupe_key: str | None = None


# The Busy owner of a parent while its SubFlow child runs: `subflow:<child id>`.
SUBFLOW_OWNER_PREFIX = "subflow:"


def subflow_owner(child_id: uuid.UUID) -> str:
    """The Busy owner a parent holds for the lifetime of its SubFlow child."""
    return f"{SUBFLOW_OWNER_PREFIX}{child_id}"


# The Busy owner of an instance paused for a long-poll acknowledgement: `longpoll:<token>`.
LONG_POLL_OWNER_PREFIX = "longpoll:"


def waiting_child(instance: InstanceSnapshot) -> uuid.UUID | None:
    """The SubFlow child a Busy parent waits for (its Busy owner names it), or None."""
    owner = instance.busy_owner
    if instance.status != InstanceStatus.BUSY or not owner.startswith(SUBFLOW_OWNER_PREFIX):
        return None
    try:
        return uuid.UUID(owner[len(SUBFLOW_OWNER_PREFIX) :])
    except ValueError:
        return None


@dataclass
class ChildStart:
    """A child instance started with this flush: its row (Busy, reserved for its start job),
    the correlation to the parent (subflow or subprocess) and the start job's payload."""

    instance: InstanceSnapshot
    correlation_type: FlowType
    parent_state: str
    reservation: str
    job_payload: dict[str, Any]


@dataclass(frozen=True)
class ChildrenEnd:
    """The instance ends: its open SubFlow correlations close `status`, and each child gets a
    job running its own `transition_kind` transition (cancel, exit) so the end cascades."""

    status: str
    transition_kind: str


class GuardKind(Enum):
    """What a flush's instance UPDATE checks first (compare-and-set)."""

    INSERT = "insert"  # a new instance: the row is inserted
    OPTIMISTIC = "optimistic"  # status = 'A' and state_version unchanged since the load
    OWNER = "owner"  # status = 'B' and busy_owner = this pipeline
    LOCK_FREE = "lock_free"  # updateData: any live status; touches data only
    FAULTED = "faulted"  # an operator's retry takes a Faulted instance: status = 'F'


@dataclass(frozen=True)
class Guard:
    """The compare-and-set condition of a flush. `data_etag`, when set, also requires the data
    to be the version a script read (`entity_etag`): the instance-data write funnel. `newest`
    (INSERT only): the start asked for the newest version, and its row is inserted only while
    no newer version of the workflow is published (`DefinitionSuperseded` otherwise)."""

    kind: GuardKind
    state_version: int = 0
    owner: str = ""
    data_etag: str | None = None
    newest: bool = False


# Recomputes a data patch from the instance data as it is now (a script that read the data:
# a mapping, an output handler); pure: it runs again whenever the data changed under it.
Rederive = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass
class DataPart:
    """One patch of a run's pending data write, in the order it was made: a constant one (a
    request's attributes) or one a script derived from the data (`rederive` makes it again)."""

    patch: dict[str, Any]
    strategy: str
    rederive: Rederive | None = None


@dataclass
class PendingWrites:
    """Everything a pipeline has decided but not yet committed."""

    instance_fields: dict[str, Any] = field(default_factory=dict)
    data_patch: dict[str, Any] | None = None
    version_strategy: str = "None"
    # The patches `data_patch` merges, in order; a derived one makes the flush guard the data.
    data_parts: list[DataPart] = field(default_factory=list)
    bump_state_version: bool = False
    transitions: dict[uuid.UUID, TransitionRow] = field(default_factory=dict)
    # The states the hops of this flush entered, in order, with the transition that entered
    # each: (state, transition key). The store derives its outbound events from them
    # (instances/outbox.py); one flush may commit several hops of an automatic chain.
    states_entered: list[tuple[str, str]] = field(default_factory=list)
    tasks: list[TaskRow] = field(default_factory=list)
    incidents: list[IncidentRow] = field(default_factory=list)
    jobs: list[JobRow] = field(default_factory=list)
    cancel_timers_of: set[str] = field(default_factory=set)
    cancel_all_timers: bool = False
    # A workflow timeout that resets (`timer.reset`): its pending job's new deadline.
    reschedule_timeout: datetime | None = None
    # Terminal status reached: every resource lock the instance holds goes with this flush.
    release_locks: bool = False
    # Close the instance's open incidents: (resolution, who), e.g. ("cancelled", "ops").
    resolve_incidents: tuple[str, str] | None = None
    # Subflows: children started, the status of this instance's own correlation to its parent
    # (an S parent then gets a resume job), and the end of its open children.
    children: list[ChildStart] = field(default_factory=list)
    parent_correlation_status: str | None = None
    children_end: ChildrenEnd | None = None
    # Human tasks (type 5): rows opened, and the states whose open ones close (left), or all
    # of the instance's (it ends).
    human_tasks: list[HumanTaskRow] = field(default_factory=list)
    close_human_tasks_of: set[str] = field(default_factory=set)
    close_all_human_tasks: bool = False

    def set(self, **fields: Any) -> None:
        """Stage instance column values."""
        self.instance_fields.update(fields)

    def merge_data(
        self, patch: dict[str, Any], strategy: str, rederive: Rederive | None = None
    ) -> None:
        """Stage a data patch; the strongest version strategy of the merged patches wins.
        `rederive`: the patch was computed from the data, and is computed again from the data
        as committed if that changed before the flush (an empty patch counts then too)."""
        if not patch and rederive is None:
            return
        self.data_parts.append(DataPart(patch, strategy, rederive))
        if patch:
            self.data_patch = deep_merge(self.data_patch or {}, patch)
        if VERSION_RANK.get(strategy, 0) > VERSION_RANK.get(self.version_strategy, 0):
            self.version_strategy = strategy

    @property
    def reads_data(self) -> bool:
        """Some staged patch was derived from the data: the flush must find it unchanged."""
        return any(part.rederive is not None for part in self.data_parts)

    def rederive_data(self, data: dict[str, Any]) -> dict[str, Any]:
        """Make every staged patch again, in order, on top of `data` (the data as committed
        now): constant patches as they are, derived ones by their scripts. Returns the data
        the patches lead to; `data_patch` becomes their merge."""
        self.data_patch = None
        for part in self.data_parts:
            if part.rederive is not None:
                part.patch = part.rederive(data)
            if part.patch:
                data = deep_merge(data, part.patch)
                self.data_patch = deep_merge(self.data_patch or {}, part.patch)
        return data

    def is_empty(self) -> bool:
        """True when a flush would write nothing."""
        return not (
            self.instance_fields
            or self.data_patch
            or self.reads_data
            or self.bump_state_version
            or self.transitions
            or self.tasks
            or self.incidents
            or self.jobs
            or self.cancel_timers_of
            or self.cancel_all_timers
            or self.reschedule_timeout is not None
            or self.release_locks
            or self.resolve_incidents is not None
            or self.children
            or self.parent_correlation_status is not None
            or self.children_end is not None
            or self.touches_human_tasks
        )

    @property
    def touches_human_tasks(self) -> bool:
        """Human tasks (type 5) opened or closed by the flush."""
        return bool(self.human_tasks or self.close_human_tasks_of or self.close_all_human_tasks)


def stage_fault(writes: PendingWrites, *, state: str, incident: IncidentRow) -> None:
    """Stage what faulting an instance writes, whatever the cause (a run, the reaper): the
    Faulted status with Busy cleared, the incident, the cancelled timers of `state`, and the
    release of every resource lock the instance holds."""
    writes.incidents.append(incident)
    writes.set(status=InstanceStatus.FAULTED, busy_owner="", busy_since=None)
    writes.cancel_timers_of.add(state)
    writes.release_locks = True
