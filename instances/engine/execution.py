"""One run of the pipeline: what was asked (`TransitionRequest`), each hop of it (`Hop`), and the
`Execution` that holds its pending writes, flushes them under the run's guard, takes and leaves
Busy, and faults the instance when a step fails.

Concurrency model. A run starts from the loaded instance and keeps its writes pending. A hop that
does I/O (tasks other than script and condition tasks, subflows) first takes the Busy flag by
compare-and-set (`status='A'` and the loaded `state_version` -> `'B'` with this run as owner),
committing what is pending in the same transaction: from then on every flush is guarded by
ownership. A run that does no I/O never holds Busy: it commits everything once, guarded by
`status='A'` and the loaded `state_version`. Either way exactly one concurrent run wins and the
others get 409 `Instance:100031`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, NoReturn, Protocol

from instances.engine.boundaries import Decision
from instances.engine.definition import TransitionDef, WorkflowDefinition
from instances.engine.errors import Codes, Violation, VNextError
from instances.engine.fan_out import DEFAULT_MAX_CONCURRENT_ITEMS
from instances.engine.outcomes import PipelineFault, Rejected
from instances.engine.payload import schema_violations
from instances.engine.ports import (
    Components,
    DataChanged,
    Locks,
    Store,
    StoreRefused,
    describe_taker,
)
from instances.engine.profiles import Order, Profile
from instances.engine.records import (
    Guard,
    GuardKind,
    IncidentRow,
    InstanceSnapshot,
    JobRow,
    PendingWrites,
    TransitionRow,
    stage_fault,
)
from instances.engine.script_runner import ScriptExecutor, ScriptRunner
from instances.engine.scripts import ScriptError
from instances.engine.task_types import TaskFailure
from instances.engine.tasks import TaskRunner
from instances.job_payloads import AutomaticJob, TimerJob
from instances.status import InstanceStatus, JobKind, TransitionStatus, Trigger

logger = logging.getLogger("vnext.pipeline")

MAX_CHAIN_DEPTH = 50
# How often a flush derives its patches again because other writes changed the data under it:
# each time another write committed, so a run gives up only under an endless stream of them.
MAX_DATA_REDERIVES = 50


@dataclass(frozen=True)
class TaskResume:
    """Where an error-boundary retry picks a hop up: the task group (`phase`, `order`) whose
    tasks `keys` failed; the groups after it run as usual, the ones before it are done."""

    phase: str
    order: int
    keys: tuple[str, ...]

    def selects(self, reference: dict[str, Any]) -> bool:
        """True when `reference` runs in the resumed hop: a failed task of the group, or a
        task of a later group."""
        order = int(reference.get("order") or 1)
        key = str((reference.get("task") or {}).get("key", "?"))
        return order > self.order or (order == self.order and key in self.keys)


@dataclass
class TransitionRequest:
    """What the caller asked for: a transition, how it was triggered, and its payload."""

    transition: TransitionDef
    trigger: Trigger = Trigger.MANUAL
    attributes: Any = None
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    query: dict[str, Any] = field(default_factory=dict)
    actor: str = ""
    stage: str = ""
    # A job's run records its hops under ids derived from this seed, so a re-run after a crash
    # updates the same history rows instead of adding new ones.
    row_seed: uuid.UUID | None = None
    # The job attempt running this request (incidents record it); None for a client's call.
    attempt: int | None = None
    # An operator's retry: when the run ends without a fault, the open incidents are closed
    # with this resolution (`retried`).
    resolves_incidents: str = ""
    # Resume a hop whose ChangeState was committed by an earlier, interrupted run.
    resume_at: Order | None = None
    resume_from_state: str | None = None
    # An error-boundary retry: the tasks it re-runs, how many retries came before, and the
    # history row of the hop it continues.
    resume_tasks: TaskResume | None = None
    boundary_retries: int = 0
    resume_row: uuid.UUID | None = None
    # A parent resumed by its ended SubFlow child: the child's data (step 79).
    subflow_result: dict[str, Any] | None = None
    # A timer or workflow-timeout job's run: its payload (a cron timer's schedule and the
    # occurrence it fired for, from which the next one is armed).
    fired_timer: TimerJob | None = None


@dataclass
class EngineConfig:
    """Engine limits, injectable in tests."""

    script_timeout_seconds: float = 2.0
    max_chain_depth: int = MAX_CHAIN_DEPTH
    # Where script calls run; None is the process-wide worker pool.
    script_executor: ScriptExecutor | None = None
    # `context.configuration`: the values an operator chose to show scripts.
    script_configuration: dict[str, Any] = field(default_factory=dict)
    # The process-wide limit on running fan-out items (seed 002's MaxConcurrentItems).
    fan_out_max_concurrent_items: int = DEFAULT_MAX_CONCURRENT_ITEMS


class RunEngine(Protocol):
    """What a run uses of the engine that runs it (`pipeline.Engine`)."""

    store: Store
    components: Components
    locks: Locks | None
    config: EngineConfig
    clock: Callable[[], datetime]
    scripts: ScriptRunner
    tasks: TaskRunner

    def master_schema(self, definition: WorkflowDefinition) -> dict[str, Any] | None:
        """The JSON Schema of the workflow's master schema component, or None."""
        ...


@dataclass
class Hop:
    """One transition of a run: the request, its profile, where it goes, what steps decided."""

    request: TransitionRequest
    profile: Profile
    depth: int
    source_state: str | None
    row: TransitionRow | None = None
    target_state: str = ""
    next_transition: TransitionDef | None = None
    # How the next hop is triggered: automatic, or an error boundary's rollback/notify.
    next_trigger: Trigger = Trigger.AUTOMATIC
    completed: bool = False
    executed: list[Order] = field(default_factory=list)
    # The attempt row is in the database (steps 19/20 committed it).
    row_committed: bool = False
    # updateData on a parent waiting for its child: data only, no automatic transition (21).
    data_only: bool = False
    # The notification tasks' messages this hop staged (jobs), dropped if the hop faults.
    notification_jobs: list[JobRow] = field(default_factory=list)

    @property
    def transition(self) -> TransitionDef:
        """The transition this hop runs."""
        return self.request.transition


class Execution:
    """One run: the first transition and its automatic chain, with the writes not yet flushed."""

    def __init__(
        self,
        engine: RunEngine,
        definition: WorkflowDefinition,
        instance: InstanceSnapshot,
        *,
        is_new: bool,
        on_newest: bool = False,
        owner: str | None = None,
    ) -> None:
        self.engine = engine
        self.definition = definition
        self.instance = instance
        self.is_new = is_new
        # A start on the version looked up as the newest: its INSERT checks it still is.
        self.on_newest = on_newest
        self.owner = owner or uuid.uuid4().hex
        self.holds_busy = False
        self.lock_free = False
        # An updateData applied in its write lane: its automatic chain goes to a job.
        self.defer_chain = False
        self.loaded_state_version = instance.state_version
        # The state the database holds (the in-memory one runs ahead until a flush).
        self.committed_state = instance.current_state
        # Only a run that began on a Faulted instance has incidents to close when it completes.
        self.started_faulted = instance.status == InstanceStatus.FAULTED
        self.writes = PendingWrites()
        self.committed = False
        self.task_responses: dict[str, Any] = {}
        self.hops: list[Hop] = []
        # When an error-boundary retry is due: the run stopped, Busy, and a job resumes it.
        self.awaiting_retry: datetime | None = None
        # The run ends with the instance waiting, Busy, owned by this: its SubFlow child
        # (`subflow:<child id>`, step 70, or handed back after a `$self` transition of a waiting
        # parent) or a long-poll acknowledgement (`longpoll:<token>`, step 75).
        self.waiting_owner: str | None = None
        # A flush started children, ended them, or closed this instance's own correlation:
        # the caller runs the hand-off jobs that follow (child starts, parent resumes).
        self.relays = False
        # The hops (by id) whose data a commit has versioned already (`strategy_for`).
        self.versioned_hops: set[int] = set()
        self.current_hop: Hop | None = None
        # An updateData committed and the automatic chain after it continues as a plain run.
        self.chained_after_update = False
        # The state whose automatic transitions a job evaluates again (set when the chain
        # after an updateData could not be admitted).
        self.deferred_automatic: str | None = None

    def strategy_for(self, hop: Hop) -> str:
        """The version strategy a data write of `hop` is staged with: the transition's, once
        per hop — a hop whose data an earlier commit already versioned (a Busy hop commits at
        ChangeState and again at its end) adds to that version instead of bumping twice."""
        if id(hop) in self.versioned_hops:
            return "None"
        return hop.transition.version_strategy

    # --- persistence --------------------------------------------------------------------------

    def guard(self) -> Guard:
        """The compare-and-set the next flush is guarded by."""
        if self.is_new:
            return Guard(GuardKind.INSERT, newest=self.on_newest)
        if self.holds_busy:
            return Guard(GuardKind.OWNER, owner=self.owner)
        if self.lock_free:
            return Guard(GuardKind.LOCK_FREE)
        return Guard(GuardKind.OPTIMISTIC, state_version=self.loaded_state_version)

    def guard_for_flush(self) -> Guard:
        """`guard()`, and the data version the staged patches were derived from when a script
        computed one of them from the data (the write funnel: a patch made from data another
        write has changed since is made again, never written stale)."""
        guard = self.guard()
        if self.writes.reads_data and guard.kind is not GuardKind.INSERT:
            guard = replace(guard, data_etag=self.instance.entity_etag)
        return guard

    def flush(self) -> None:
        """Commit the pending writes in one transaction; 409 when the guard no longer holds.

        The instance-data write funnel: a flush whose patches scripts derived from the data is
        guarded by the data version they read; when another write (an updateData, a child's
        update of its parent) committed meanwhile, the patches are derived again from the data
        as committed, in the order they were made, and the flush is tried again. So every
        write reads what the previous one committed and none is lost."""
        if self.writes.is_empty() and not self.is_new:
            return
        writes = self.writes
        relays = bool(
            writes.children
            or writes.children_end is not None
            or writes.parent_correlation_status is not None
        )
        for _ in range(MAX_DATA_REDERIVES):
            self._check_master_schema()
            try:
                committed = self.engine.store.flush(self.instance, writes, self.guard_for_flush())
                break
            except DataChanged as changed:
                self._rederive(changed.current)
        else:
            raise Rejected(
                Codes.INSTANCE_BUSY,
                f"the instance's data changed {MAX_DATA_REDERIVES} times while this run wrote it",
                instance_id=str(self.instance.id),
            )
        self.relays = self.relays or (relays and committed is not None)
        if committed is None:
            raise self._refusal()
        if (
            self.current_hop is not None
            and writes.data_patch
            and committed.data_version != self.instance.data_version
        ):
            self.versioned_hops.add(id(self.current_hop))
        self._refresh(committed)

    def stage_automatic(self, state: str, picked: TransitionDef) -> None:
        """Leave the automatic transitions of `state` (where `picked` fires now) to a job
        committed with the pending writes: it evaluates them again once the instance is free
        and runs the one that fires."""
        self.writes.jobs.append(
            JobRow(
                kind=JobKind.AUTOMATIC,
                run_at=self.engine.clock(),
                state=state,
                payload=AutomaticJob(state=state, after=picked.key).to_json(),
            )
        )
        self.deferred_automatic = state
        logger.info(
            "instance %s: the automatic transitions of %s (%s fires) run after this update",
            self.instance.id,
            state,
            picked.key,
        )

    def _check_master_schema(self) -> None:
        """Every write of instance data keeps to the workflow's master schema (vNext
        `flow/schema.md`): the data it leads to is checked before it is written, and a write
        that breaks it faults the instance (with the pointers) instead."""
        if not self.writes.data_patch:
            return
        schema = self.engine.master_schema(self.definition)
        if schema is None:
            return
        violations = schema_violations(schema, self.instance.data)
        if violations:
            listed = "; ".join(f"{v.pointer or '/'}: {v.message}" for v in violations[:10])
            raise DataSchemaViolation(
                f"the instance data does not match the workflow's master schema "
                f"({len(violations)} problem(s)): {listed}",
                violations,
            )

    def _refusal(self) -> Rejected | OwnershipLost:
        """Why a flush's guard failed (nothing was written)."""
        if self.holds_busy:
            return OwnershipLost()
        if self.lock_free:
            # updateData's own guard fails only when the instance ended meanwhile.
            return Rejected(
                Codes.INSTANCE_COMPLETED,
                "the instance completed before this update was applied",
                instance_id=str(self.instance.id),
            )
        return self._busy_refusal()

    def _busy_refusal(self) -> Rejected:
        return Rejected(
            Codes.INSTANCE_BUSY,
            "the instance changed or is busy with another transition",
            instance_id=str(self.instance.id),
        )

    def _rederive(self, current: InstanceSnapshot) -> None:
        """Another write changed the data since this run's patches were derived: derive them
        again from `current`'s data (the run's view of the data follows)."""
        logger.info(
            "instance %s: data changed under the run; deriving %d patch(es) again",
            self.instance.id,
            sum(part.rederive is not None for part in self.writes.data_parts),
        )
        self.instance.data = self.writes.rederive_data(current.data)
        self.instance.entity_etag = current.entity_etag
        self.instance.data_version = current.data_version
        self.instance.sealed = current.sealed

    def _refresh(self, committed: InstanceSnapshot) -> None:
        self.instance.data = committed.data
        self.instance.data_version = committed.data_version
        self.instance.etag = committed.etag
        self.instance.entity_etag = committed.entity_etag
        self.instance.state_version = committed.state_version
        self.instance.status = committed.status
        self.instance.created_at, self.instance.updated_at = (
            committed.created_at,
            committed.updated_at,
        )
        self.committed_state = self.instance.current_state
        self.loaded_state_version = committed.state_version
        self.writes = PendingWrites()
        self.is_new = False
        self.committed = True

    def ensure_busy(self) -> None:
        """Take the Busy flag before I/O, committing what is pending in the same transaction.
        updateData never takes it."""
        if self.holds_busy or self.lock_free:
            return
        self.writes.set(
            status=InstanceStatus.BUSY, busy_owner=self.owner, busy_since=self.engine.clock()
        )
        self.flush()
        self.instance.status = InstanceStatus.BUSY
        self.holds_busy = True

    def reenter_subflow_wait(self) -> None:
        """A `$self` transition of a parent waiting for its SubFlow child: take the Busy owner
        over from the correlation (compare-and-set) and hand it back when the run ends."""
        waited_by = self.instance.busy_owner
        taken = self.engine.store.hand_over(self.instance.id, waited_by, self.owner)
        if taken is None:
            raise self._busy_refusal()
        self.waiting_owner = waited_by
        self.holds_busy = True
        self.committed = True

    def leave_waiting(self) -> None:
        """The run is over but the instance waits (`waiting_owner`): commit everything and leave
        it Busy, owned by what it waits for, until the child ends or the acknowledgement (or its
        fallback) comes."""
        owner = str(self.waiting_owner)
        self.writes.set(
            status=InstanceStatus.BUSY, busy_owner=owner, busy_since=self.engine.clock()
        )
        self.flush()
        self.instance.status = InstanceStatus.BUSY
        self.instance.busy_owner = owner
        self.holds_busy = False

    def take_over_busy(self, hop: Hop) -> None:
        """cancel/exit/timeout: exempt from 409, they become the Busy owner at once; a run
        they take the instance from is superseded: its running history rows close now."""
        if self.holds_busy:
            return
        taken = self.engine.store.force_busy(self.instance.id, self.owner)
        if taken is None:
            raise Rejected(
                Codes.INSTANCE_COMPLETED,
                "the instance is no longer active",
                instance_id=str(self.instance.id),
            )
        self.engine.store.supersede(
            self.instance.id,
            rows=None,
            code=Codes.TRANSITION_SUPERSEDED.code,
            taker=describe_taker(hop.transition.key, hop.request.actor),
        )
        self.instance.status = InstanceStatus.BUSY
        self.holds_busy = True
        self.committed = True

    def release(self, status: str) -> None:
        """The run is over: commit everything and leave the instance `status` (A or C)."""
        if not self.lock_free:
            self.writes.set(status=status, busy_owner="", busy_since=None)
        self.flush()
        if not self.lock_free:
            # updateData leaves the status as it is (its flush returned the committed one).
            self.instance.status = status
        self.holds_busy = False

    # --- failure ------------------------------------------------------------------------------

    def fault(
        self, hop: Hop, exc: BaseException, decision: Decision | None = None, note: str = ""
    ) -> NoReturn:
        """The one way a run fails after admission: in one transaction the instance becomes
        Faulted, the hop's history row and an incident say why (task, step, attempt, code), the
        state's timers are cancelled and the instance's locks released. If the database refuses
        the pending writes themselves, the fault is written without them."""
        if isinstance(exc, DataSchemaViolation) and self.lock_free and not self.committed:
            # An updateData holds no Busy and has written nothing: refused (422, the pointers),
            # never a fault a concurrent transition's run would be stomped by.
            raise Rejected(
                exc.error, exc.detail, violations=exc.violations, instance_id=str(self.instance.id)
            )
        code, http_status, message = _describe_failure(exc)
        message += note
        now = self.engine.clock()
        row = hop.row or self.transition_row(hop)
        row.status = TransitionStatus.FAULTED
        row.error_code, row.error_message, row.finished_at = code, message, now
        incident = IncidentRow(
            transition_id=row.id,
            state=self.instance.current_state,
            transition_key=hop.transition.key,
            error_code=code,
            message=message,
            layer="task" if isinstance(exc, TaskFailure) else "pipeline",
            task_key=getattr(exc, "task_key", "") or "",
            step=hop.executed[-1].name if hop.executed else "",
            attempt=hop.request.attempt,
            boundary_action=decision.rule.action.title if decision else "",
            boundary_level=str(decision.level) if decision else "",
        )
        if isinstance(exc, StoreRefused | DataSchemaViolation):
            # Nothing of what was refused is written: the fault alone, at the data as it was.
            self._drop_refused_writes(row, incident)
        # What the faulting hop's notification tasks staged is not sent: a retry runs them
        # again (messages of an earlier hop, or committed at ChangeState, stand).
        staged = {id(job) for job in hop.notification_jobs}
        self.writes.jobs = [job for job in self.writes.jobs if id(job) not in staged]
        self._stage_fault(row, incident)
        try:
            self.flush()
        except StoreRefused:
            self._drop_refused_writes(row, incident)
            incident.message = row.error_message = _printable(incident.message)
            self._stage_fault(row, incident)
            self._flush_fault()
        except Rejected:
            if not self.committed:
                raise
        if not self.lock_free:
            self.instance.status = InstanceStatus.FAULTED
        self.holds_busy = False
        logger.info("instance %s faulted: %s %s", self.instance.id, code, message)
        raise PipelineFault(code, message, http_status, self.instance.id)

    def _drop_refused_writes(self, row: TransitionRow, incident: IncidentRow) -> None:
        # Keep nothing of what the database refused, only the fault itself, in the state the
        # database last saw (a ChangeState still pending was refused with the rest).
        self.writes = PendingWrites()
        row.body = {}
        self.instance.current_state = incident.state = self.committed_state

    def _stage_fault(self, row: TransitionRow, incident: IncidentRow) -> None:
        self.writes.transitions[row.id] = row
        if self.lock_free:
            self.writes.incidents.append(incident)
            return
        stage_fault(self.writes, state=self.instance.current_state, incident=incident)

    def _flush_fault(self) -> None:
        try:
            self.flush()
        except OwnershipLost:
            raise
        except (Rejected, StoreRefused):
            if not self.committed:
                raise
            logger.error("fault of %s could not be recorded", self.instance.id)

    def transition_row(self, hop: Hop) -> TransitionRow:
        """The hop's history row, created on first use (its id is derived from a job's seed)."""
        if hop.row is not None:
            return hop.row
        seed = hop.request.row_seed
        if hop.depth == 0 and hop.request.resume_row is not None:
            row_id = hop.request.resume_row
        else:
            row_id = uuid.uuid5(seed, str(hop.depth)) if seed else uuid.uuid4()
        hop.row = TransitionRow(
            id=row_id,
            transition_key=hop.transition.key,
            from_state=hop.source_state or "",
            to_state=hop.target_state,
            trigger_type=int(hop.request.trigger),
            body=hop.request.body if hop.depth == 0 and hop.request.body is not None else {},
            actor=hop.request.actor,
            status=TransitionStatus.RUNNING,
            started_at=self.engine.clock(),
            chain_depth=hop.depth,
            stage=hop.request.stage,
        )
        return hop.row


class DataSchemaViolation(VNextError):
    """A write would leave the instance data breaking its master schema: nothing of it is
    written and the instance faults, the incident naming the pointers."""

    def __init__(self, detail: str, violations: list[Violation]) -> None:
        super().__init__(Codes.DATA_SCHEMA_VIOLATION, detail, violations=violations)


class OwnershipLost(Exception):
    """A flush of a run that held Busy found another owner: the run was superseded."""


def _printable(text: str) -> str:
    # What the database refused in a message (NUL, lone surrogates) is shown escaped instead.
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def _describe_failure(exc: BaseException) -> tuple[str, int, str]:
    if isinstance(exc, VNextError):
        return exc.code, exc.http_status, exc.detail
    if isinstance(exc, TaskFailure):
        return exc.error.code, exc.error.http_status, exc.message
    if isinstance(exc, ScriptError):
        error = Codes.script(exc.code)
        return error.code, error.http_status, str(exc)
    return Codes.APP_INTERNAL.code, 500, "internal error"
