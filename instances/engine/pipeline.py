"""The pipeline runner: one place that runs a transition's steps in LifecycleOrder under its
profile, chains automatic transitions inline (depth limit 50), and turns failures into a faulted
instance with an incident (the run's state and writes: `execution.py`; a failed task's error
boundary: `recovery.py`)."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, NoReturn

from instances.engine.definition import TransitionDef, TransitionKind, WorkflowDefinition
from instances.engine.errors import Codes, VNextError
from instances.engine.execution import (
    EngineConfig,
    Execution,
    Hop,
    OwnershipLost,
    TransitionRequest,
)
from instances.engine.fan_out import Bulkhead
from instances.engine.outcomes import PipelineSuperseded, Rejected
from instances.engine.ports import (
    Components,
    InstanceReader,
    InstanceWriter,
    Locks,
    Store,
    StoreRefused,
    utc_now,
)
from instances.engine.profiles import Order, OutcomeKind, resolve_profile
from instances.engine.records import InstanceSnapshot, PendingWrites
from instances.engine.recovery import BoundaryFault, Diverted, RetryScheduled, divert
from instances.engine.script_runner import ScriptRunner, script_context
from instances.engine.scripts import ScriptError
from instances.engine.step_support import Step
from instances.engine.steps import STEPS, automatic_transition
from instances.engine.task_types import TaskFailure
from instances.engine.tasks import TaskRunner
from instances.engine.telemetry import bound, span, timed_step, transition_done
from instances.status import Trigger

logger = logging.getLogger("vnext.pipeline")


class Engine:
    """Runs transitions against a store. Stateless between calls; safe to share."""

    def __init__(
        self,
        store: Store,
        components: Components,
        *,
        reader: InstanceReader | None = None,
        writer: InstanceWriter | None = None,
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
        self.tasks = TaskRunner(
            components,
            self.scripts,
            reader,
            self.config.script_configuration,
            writer,
            Bulkhead(self.config.fan_out_max_concurrent_items),
        )

    def master_schema(self, definition: WorkflowDefinition) -> dict[str, Any] | None:
        """The JSON Schema of the workflow's master schema component, or None (memoised on the
        definition: published versions are immutable)."""
        if "master_json_schema" not in definition.memo:
            reference = definition.master_schema_reference
            document = self.components.component("schema", reference) if reference else None
            schema = ((document or {}).get("attributes") or {}).get("schema")
            definition.memo["master_json_schema"] = schema if isinstance(schema, dict) else None
        found: dict[str, Any] | None = definition.memo["master_json_schema"]
        return found

    def automatic_transition(
        self, definition: WorkflowDefinition, instance: InstanceSnapshot
    ) -> TransitionDef | None:
        """The automatic transition of the instance's state whose rule holds now (else its
        default one), or None: what the Auto step (80) would pick after a hop."""
        return automatic_transition(
            self,
            definition,
            instance,
            lambda: script_context(
                instance, transition_key="", configuration=self.config.script_configuration
            ),
        )

    def execute(
        self,
        definition: WorkflowDefinition,
        instance: InstanceSnapshot,
        request: TransitionRequest,
        *,
        is_new: bool = False,
        on_newest: bool = False,
        owner: str | None = None,
        reserved: bool = False,
        defer_chain: bool = False,
    ) -> Execution:
        """Run `request` on `instance` (a new one when `is_new`) and the automatic chain after
        it. `on_newest`: a new instance of the version looked up as the newest (its insert is
        refused with `DefinitionSuperseded` once a newer one is published). `reserved`: the
        instance is already Busy with `owner` (an accepted async request).
        `defer_chain`: an updateData applied in its instance's write lane leaves the automatic
        chain after it to an `automatic` job committed with it (run once the lane is free).
        Raises `Rejected` (nothing written) or `PipelineFault` (instance Faulted)."""
        execution = Execution(
            self, definition, instance, is_new=is_new, on_newest=on_newest, owner=owner
        )
        execution.holds_busy = reserved
        execution.defer_chain = defer_chain
        _run(execution, request)
        return execution


def _run(execution: Execution, request: TransitionRequest) -> None:
    """Run `request`, then every automatic transition the Auto step picks, inline. Raises
    `PipelineSuperseded` when another run took the instance over meanwhile."""
    try:
        _run_chain(execution, request)
    except OwnershipLost:
        _superseded(execution)


def _run_chain(execution: Execution, request: TransitionRequest) -> None:
    execution.lock_free = request.transition.is_update_data
    hop = _hop(execution, request, depth=0)
    if request.resume_at is not None:
        hop.source_state = request.resume_from_state
        hop.target_state = execution.instance.current_state
        execution.transition_row(hop)
    while True:
        if hop.depth and execution.chained_after_update:
            try:
                _run_hop(execution, hop)
            except Rejected:
                # The updateData is committed; the automatic transition it made possible
                # could not be admitted (another run holds the instance): a job evaluates
                # the state's automatic transitions again once the instance is free. The
                # answer is the update's: a 409 only when nothing was written.
                _defer_automatic(execution, hop)
                return
        else:
            _run_hop(execution, hop)
        if hop.next_transition is None or execution.awaiting_retry is not None:
            return
        chained = TransitionRequest(
            transition=hop.next_transition,
            trigger=hop.next_trigger,
            actor=request.actor,
            headers=request.headers,
            query=request.query,
        )
        chained.row_seed = request.row_seed
        hop = _hop(execution, chained, depth=hop.depth + 1)
        limit = execution.engine.config.max_chain_depth
        if hop.depth > limit:
            execution.fault(
                hop,
                VNextError(
                    Codes.TRANSITION_CHAIN_TOO_DEEP,
                    f"the automatic transition chain exceeded {limit} hops "
                    f"(at {hop.transition.key} in {execution.instance.current_state})",
                ),
            )


def _hop(execution: Execution, request: TransitionRequest, depth: int) -> Hop:
    profile = resolve_profile(request.trigger, is_update_data=request.transition.is_update_data)
    source = (
        None
        if request.transition.kind == TransitionKind.START
        else execution.instance.current_state
    )
    hop = Hop(request=request, profile=profile, depth=depth, source_state=source)
    execution.hops.append(hop)
    return hop


def _run_hop(execution: Execution, hop: Hop) -> None:
    """Run one hop, counted and timed by outcome (`vnext_transitions`), inside a
    `transition` span, its log lines bound to the instance and the transition."""
    key = hop.transition.key
    instance = execution.instance
    execution.current_hop = hop
    started = time.perf_counter()
    outcome = "faulted"
    with (
        bound(instance_id=str(instance.id), transition=key),
        span(
            f"transition {key}",
            domain=instance.domain,
            workflow=instance.workflow_key,
            instance_id=str(instance.id),
            transition=key,
            trigger=int(hop.request.trigger),
        ),
    ):
        try:
            _run_steps(execution, hop)
            if execution.awaiting_retry is not None:
                outcome = "retry_scheduled"
            elif hop.next_trigger == Trigger.ERROR_BOUNDARY:
                outcome = "diverted"
            else:
                outcome = "completed"
        except Rejected:
            outcome = "rejected"
            raise
        finally:
            transition_done(
                domain=instance.domain,
                workflow=instance.workflow_key,
                transition=key,
                outcome=outcome,
                seconds=time.perf_counter() - started,
            )


@functools.cache
def _profile_steps(excluded: frozenset[Order]) -> tuple[Step, ...]:
    # The steps a profile runs, in order: the same few tuples for every hop of the process.
    return tuple(step for step in STEPS if step.order not in excluded)


def _run_steps(execution: Execution, hop: Hop) -> None:
    steps = _profile_steps(hop.profile.excluded)
    resume_at = hop.request.resume_at if hop.depth == 0 else None
    index = 0
    if resume_at is not None:
        index = next((i for i, step in enumerate(steps) if step.order >= resume_at), 0)
    while index < len(steps):
        step = steps[index]
        hop.executed.append(step.order)
        try:
            with timed_step(type(step).__name__):
                outcome = step.run(execution, hop)
        except Rejected:
            raise
        except Diverted as diverted:
            divert(execution, hop, diverted.failure, diverted.decision)
            return
        except RetryScheduled:
            return
        except BoundaryFault as unhandled:
            execution.fault(hop, unhandled.failure, unhandled.decision, unhandled.note)
        except StoreRefused as refused:
            if not execution.committed:
                # Nothing was written and nobody holds Busy: the request itself is refused.
                raise Rejected(
                    refused.error, refused.detail, instance_id=str(execution.instance.id)
                ) from refused
            execution.fault(hop, refused)
        except (VNextError, ScriptError, TaskFailure) as exc:
            execution.fault(hop, exc)
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


def _defer_automatic(execution: Execution, hop: Hop) -> None:
    execution.hops.remove(hop)
    execution.writes = PendingWrites()
    execution.stage_automatic(hop.source_state or execution.instance.current_state, hop.transition)
    execution.lock_free, execution.holds_busy = True, False
    execution.flush()


def _superseded(execution: Execution) -> NoReturn:
    """This run lost the instance (cancel, exit, timeout, the reaper): its running history
    rows close `cancelled`, naming who took over; nothing else of it is written."""
    rows = [hop.row.id for hop in execution.hops if hop.row is not None]
    code = Codes.TRANSITION_SUPERSEDED.code
    taker = execution.engine.store.supersede(execution.instance.id, rows=rows, code=code)
    execution.holds_busy = False
    first = execution.hops[0].transition.key if execution.hops else "the transition"
    message = f"{first} was superseded by {taker}, which took the instance over; "
    message += "the results that came after were dropped"
    logger.warning("instance %s: %s", execution.instance.id, message)
    raise PipelineSuperseded(code, message, execution.instance.id)
