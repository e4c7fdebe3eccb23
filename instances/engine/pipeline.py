"""The pipeline runner: one place that runs a transition's steps in LifecycleOrder under its
profile, chains automatic transitions inline (depth limit 50), and turns failures into a faulted
instance with an incident.

Concurrency model. A run starts from the loaded instance and keeps its writes pending. A hop that
does I/O (tasks, subflows) first takes the Busy flag by compare-and-set (`status='A'` and the
loaded `state_version` -> `'B'` with this run as owner), committing what is pending in the same
transaction: from then on every flush is guarded by ownership. A run that does no I/O never holds
Busy: it commits everything once, guarded by `status='A'` and the loaded `state_version`. Either
way exactly one concurrent run wins and the others get 409 `Instance:100031`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NoReturn

from instances.engine.definition import TransitionDef, TransitionKind, WorkflowDefinition
from instances.engine.errors import Codes, VNextError
from instances.engine.outcomes import PipelineFault, Rejected
from instances.engine.ports import (
    Components,
    InstanceReader,
    Locks,
    Store,
    StoreRefused,
    utc_now,
)
from instances.engine.profiles import Order, OutcomeKind, Profile, resolve_profile
from instances.engine.records import (
    Guard,
    GuardKind,
    IncidentRow,
    InstanceSnapshot,
    PendingWrites,
    TransitionRow,
    stage_fault,
)
from instances.engine.script_runner import ScriptExecutor, ScriptRunner
from instances.engine.scripts import ScriptError
from instances.engine.steps import STEPS
from instances.engine.task_types import TaskFailure
from instances.engine.tasks import TaskRunner
from instances.status import InstanceStatus, TransitionStatus, Trigger

logger = logging.getLogger("vnext.pipeline")

MAX_CHAIN_DEPTH = 50


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


@dataclass
class EngineConfig:
    """Engine limits, injectable in tests."""

    script_timeout_seconds: float = 2.0
    max_chain_depth: int = MAX_CHAIN_DEPTH
    # Where script calls run; None is the process-wide worker pool.
    script_executor: ScriptExecutor | None = None


class Engine:
    """Runs transitions against a store. Stateless between calls; safe to share."""

    def __init__(
        self,
        store: Store,
        components: Components,
        *,
        reader: InstanceReader | None = None,
        locks: Locks | None = None,
        config: EngineConfig | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.store = store
        self.components = components
        self.locks = locks
        self.config = config or EngineConfig()
        self.clock = clock
        self.scripts = ScriptRunner(
            components, self.config.script_timeout_seconds, self.config.script_executor
        )
        self.tasks = TaskRunner(components, self.scripts, reader)
        self.steps = STEPS

    def execute(
        self,
        definition: WorkflowDefinition,
        instance: InstanceSnapshot,
        request: TransitionRequest,
        *,
        is_new: bool = False,
        owner: str | None = None,
        reserved: bool = False,
    ) -> Execution:
        """Run `request` on `instance` (a new one when `is_new`) and the automatic chain after
        it. `reserved`: the instance is already Busy with `owner` (an accepted async request).
        Raises `Rejected` (nothing written) or `PipelineFault` (instance Faulted)."""
        execution = Execution(self, definition, instance, is_new=is_new, owner=owner)
        execution.holds_busy = reserved
        execution.run(request)
        return execution


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
    completed: bool = False
    executed: list[Order] = field(default_factory=list)
    # The attempt row is in the database (steps 19/20 committed it).
    row_committed: bool = False

    @property
    def transition(self) -> TransitionDef:
        """The transition this hop runs."""
        return self.request.transition


class Execution:
    """One run: the first transition and its automatic chain, with the writes not yet flushed."""

    def __init__(
        self,
        engine: Engine,
        definition: WorkflowDefinition,
        instance: InstanceSnapshot,
        *,
        is_new: bool,
        owner: str | None = None,
    ) -> None:
        self.engine = engine
        self.definition = definition
        self.instance = instance
        self.is_new = is_new
        self.owner = owner or uuid.uuid4().hex
        self.holds_busy = False
        self.lock_free = False
        self.loaded_state_version = instance.state_version
        # The state the database holds (the in-memory one runs ahead until a flush).
        self.committed_state = instance.current_state
        # Only a run that began on a Faulted instance has incidents to close when it completes.
        self.started_faulted = instance.status == InstanceStatus.FAULTED
        self.writes = PendingWrites()
        self.committed = False
        self.task_responses: dict[str, Any] = {}
        self.hops: list[Hop] = []

    # --- the run ------------------------------------------------------------------------------

    def run(self, request: TransitionRequest) -> None:
        """Run `request`, then every automatic transition the Auto step picks, inline."""
        self.lock_free = request.transition.is_update_data
        hop = self._hop(request, depth=0)
        if request.resume_at is not None:
            hop.source_state = request.resume_from_state
            hop.target_state = self.instance.current_state
            self.transition_row(hop)
        while True:
            self._run_hop(hop)
            if hop.next_transition is None:
                return
            chained = TransitionRequest(
                transition=hop.next_transition,
                trigger=Trigger.AUTOMATIC,
                actor=request.actor,
                headers=request.headers,
                query=request.query,
            )
            chained.row_seed = request.row_seed
            hop = self._hop(chained, depth=hop.depth + 1)
            limit = self.engine.config.max_chain_depth
            if hop.depth > limit:
                self._fault(
                    hop,
                    VNextError(
                        Codes.TRANSITION_CHAIN_TOO_DEEP,
                        f"the automatic transition chain exceeded {limit} hops "
                        f"(at {hop.transition.key} in {self.instance.current_state})",
                    ),
                )

    def _hop(self, request: TransitionRequest, depth: int) -> Hop:
        profile = resolve_profile(request.trigger, is_update_data=request.transition.is_update_data)
        source = (
            None if request.transition.kind == TransitionKind.START else self.instance.current_state
        )
        hop = Hop(request=request, profile=profile, depth=depth, source_state=source)
        self.hops.append(hop)
        return hop

    def _run_hop(self, hop: Hop) -> None:
        steps = [step for step in self.engine.steps if hop.profile.runs(step.order)]
        resume_at = hop.request.resume_at if hop.depth == 0 else None
        index = 0
        if resume_at is not None:
            index = next((i for i, step in enumerate(steps) if step.order >= resume_at), 0)
        while index < len(steps):
            step = steps[index]
            hop.executed.append(step.order)
            try:
                outcome = step.run(self, hop)
            except Rejected:
                raise
            except StoreRefused as refused:
                if not self.committed:
                    # Nothing was written and nobody holds Busy: the request itself is refused.
                    raise Rejected(
                        refused.error, refused.detail, instance_id=str(self.instance.id)
                    ) from refused
                self._fault(hop, refused)
            except (VNextError, ScriptError, TaskFailure) as exc:
                self._fault(hop, exc)
            if outcome.kind is OutcomeKind.STOP:
                return
            if outcome.kind is OutcomeKind.SKIP_TO and outcome.order is not None:
                target = outcome.order
                index = next((i for i, s in enumerate(steps) if s.order >= target), len(steps))
                continue
            if outcome.kind is OutcomeKind.WITH:
                for name, value in outcome.directives.items():
                    setattr(hop, name, value)
            index += 1

    # --- persistence --------------------------------------------------------------------------

    def guard(self) -> Guard:
        """The compare-and-set the next flush is guarded by."""
        if self.is_new:
            return Guard(GuardKind.INSERT)
        if self.holds_busy:
            return Guard(GuardKind.OWNER, owner=self.owner)
        if self.lock_free:
            return Guard(GuardKind.LOCK_FREE)
        return Guard(GuardKind.OPTIMISTIC, state_version=self.loaded_state_version)

    def flush(self) -> None:
        """Commit the pending writes in one transaction; 409 when the guard no longer holds."""
        if self.writes.is_empty() and not self.is_new:
            return
        committed = self.engine.store.flush(self.instance, self.writes, self.guard())
        if committed is None:
            raise Rejected(
                Codes.INSTANCE_BUSY,
                "the instance changed or is busy with another transition",
                instance_id=str(self.instance.id),
            )
        self._refresh(committed)

    def _refresh(self, committed: InstanceSnapshot) -> None:
        self.instance.data = committed.data
        self.instance.data_version = committed.data_version
        self.instance.etag = committed.etag
        self.instance.entity_etag = committed.entity_etag
        self.instance.state_version = committed.state_version
        self.instance.status = committed.status
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

    def take_over_busy(self) -> None:
        """cancel/exit/timeout: exempt from 409, they become the Busy owner at once."""
        if self.holds_busy:
            return
        taken = self.engine.store.force_busy(self.instance.id, self.owner)
        if taken is None:
            raise Rejected(
                Codes.INSTANCE_COMPLETED,
                "the instance is no longer active",
                instance_id=str(self.instance.id),
            )
        self.instance.status = InstanceStatus.BUSY
        self.holds_busy = True
        self.committed = True

    def release(self, status: str) -> None:
        """The run is over: commit everything and leave the instance `status` (A or C)."""
        if not self.lock_free:
            self.writes.set(status=status, busy_owner="", busy_since=None)
        self.flush()
        self.instance.status = status
        self.holds_busy = False

    # --- failure ------------------------------------------------------------------------------

    def _fault(self, hop: Hop, exc: BaseException) -> NoReturn:
        """The one way a run fails after admission: in one transaction the instance becomes
        Faulted, the hop's history row and an incident say why (task, step, attempt, code), the
        state's timers are cancelled and the instance's locks released. If the database refuses
        the pending writes themselves, the fault is written without them."""
        code, http_status, message = _describe_failure(exc)
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
        )
        if isinstance(exc, StoreRefused):
            self._drop_refused_writes(row, incident)
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
            # Someone took the instance over (cancel): its run decides the outcome now.
            logger.warning("fault of %s not recorded: ownership lost", self.instance.id)
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
        except (Rejected, StoreRefused):
            if not self.committed:
                raise
            logger.error("fault of %s could not be recorded", self.instance.id)

    def transition_row(self, hop: Hop) -> TransitionRow:
        """The hop's history row, created on first use (its id is derived from a job's seed)."""
        if hop.row is not None:
            return hop.row
        seed = hop.request.row_seed
        hop.row = TransitionRow(
            id=uuid.uuid5(seed, str(hop.depth)) if seed else uuid.uuid4(),
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
