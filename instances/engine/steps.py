"""The twenty pipeline steps, one small class each, named after seed 000's step table (what they
share: `step_support.py`; timer due times: `timers.py`).

Steps whose capability belongs to a later feature (subflows, resource locks, long-poll, the
timeout trigger) keep their order and profile membership and do the minimal correct thing.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from instances.engine.definition import DEFAULT_FALLBACK_SECONDS, TransitionDef, TransitionKind
from instances.engine.errors import Codes, VNextError
from instances.engine.outcomes import BUSY_EXEMPT, ForwardToSubflow, Rejected
from instances.engine.ports import LockRelease
from instances.engine.profiles import Order, Outcome
from instances.engine.records import (
    LONG_POLL_OWNER_PREFIX,
    ChildrenEnd,
    JobRow,
    Rederive,
    TransitionRow,
    subflow_owner,
    waiting_child,
)
from instances.engine.script_runner import response_data
from instances.engine.scripts import ScriptResponse
from instances.engine.step_support import (
    Step,
    hop_context,
    hop_does_io,
    merge_data,
    resumes_phase,
    run_tasks,
)
from instances.engine.subflows import child_start, forward_target, resume_patch
from instances.engine.task_types.human import human_states
from instances.engine.timers import (
    rearm_workflow_timeout,
    scheduled_timer_job,
    workflow_timeout_job,
)
from instances.job_payloads import LongPollFallbackJob, NotificationJob
from instances.status import (
    STATE_SUBTYPE_NAMES,
    STATE_TYPE_NAMES,
    CorrelationStatus,
    InstanceStatus,
    JobKind,
    StateType,
    TransitionStatus,
)

if TYPE_CHECKING:
    from instances.engine.definition import WorkflowDefinition
    from instances.engine.execution import Execution, Hop, RunEngine
    from instances.engine.records import InstanceSnapshot

logger = logging.getLogger("vnext.pipeline")


class PreflightStep(Step):
    """5: refuse transitions on completed, faulted or (unless exempt) busy instances."""

    order = Order.PREFLIGHT

    def run(self, execution: Execution, hop: Hop) -> Outcome:
        instance = execution.instance
        status, kind = instance.status, hop.transition.kind
        if execution.is_new:
            return Outcome.proceed()
        if status == InstanceStatus.COMPLETED:
            raise Rejected(
                Codes.INSTANCE_COMPLETED,
                f"instance is completed (state {instance.current_state})",
                instance_id=str(instance.id),
            )
        if status == InstanceStatus.FAULTED and kind not in BUSY_EXEMPT:
            raise Rejected(
                Codes.INSTANCE_FAULTED,
                "instance is faulted; retry it or cancel it",
                instance_id=str(instance.id),
            )
        if status == InstanceStatus.PASSIVE and kind not in BUSY_EXEMPT:
            raise Rejected(
                Codes.INSTANCE_PASSIVE, "instance is suspended", instance_id=str(instance.id)
            )
        busy_blocks = kind not in BUSY_EXEMPT and kind != TransitionKind.UPDATE_DATA
        if status == InstanceStatus.BUSY and busy_blocks and not execution.holds_busy:
            if waiting_child(instance) is not None:
                if forward_target(execution.definition, instance, hop.transition.key):
                    return Outcome.proceed()  # step 10 sends it to the child
                # A `$self` shared transition of the parent itself: it runs under the Busy
                # the correlation holds, and hands it back at the end.
                execution.reenter_subflow_wait()
                return Outcome.proceed()
            raise Rejected(
                Codes.INSTANCE_BUSY,
                "instance is busy with another transition",
                instance_id=str(instance.id),
            )
        return Outcome.proceed()


class ForwardToActiveSubflowStep(Step):
    """10: a transition sent to a parent waiting for its SubFlow child goes to the child, unless
    it is the parent's own (updateData, cancel/exit, a `$self` shared transition)."""

    order = Order.FORWARD_TO_ACTIVE_SUBFLOW

    def run(self, execution: Execution, hop: Hop) -> Outcome:
        if execution.is_new or execution.holds_busy:
            return Outcome.proceed()
        child = forward_target(execution.definition, execution.instance, hop.transition.key)
        if child is not None:
            raise ForwardToSubflow(child)
        return Outcome.proceed()


class SetBusyStep(Step):
    """19: cancel/exit/timeout take Busy over; a hop that does I/O takes it by CAS; a hop without
    I/O commits once at the end, guarded by the state it loaded."""

    order = Order.SET_BUSY

    def run(self, execution: Execution, hop: Hop) -> Outcome:
        if hop.transition.kind in BUSY_EXEMPT and not execution.is_new:
            execution.take_over_busy(hop)
        elif hop_does_io(execution, hop) and not execution.holds_busy:
            # The attempt row (step 20) goes with the Busy compare-and-set: one transaction.
            row = execution.transition_row(hop)
            execution.writes.transitions[row.id] = row
            execution.ensure_busy()
            hop.row_committed = True
        return Outcome.proceed()


class CreateTransitionStep(Step):
    """20: record the attempt (`running`). A hop that holds Busy commits it now, so history shows
    the running transition while its I/O runs; a hop without I/O commits it with everything
    else at the end."""

    order = Order.CREATE_TRANSITION

    def run(self, execution: Execution, hop: Hop) -> Outcome:
        row: TransitionRow = execution.transition_row(hop)
        if hop.row_committed:
            return Outcome.proceed()
        execution.writes.transitions[row.id] = row
        if execution.holds_busy and not execution.lock_free:
            execution.flush()
            hop.row_committed = True
        return Outcome.proceed()


class ParentUpdateDataDataOnlyStep(Step):
    """21: updateData on a parent waiting for its SubFlow child persists its data and nothing
    else: no automatic transition may move the parent while the child runs."""

    order = Order.PARENT_UPDATE_DATA_DATA_ONLY

    def run(self, execution: Execution, hop: Hop) -> Outcome:
        if not hop.transition.is_update_data or waiting_child(execution.instance) is None:
            return Outcome.proceed()
        # Seed 000: the payload is persisted as sent; the transition's own mapping and tasks,
        # the state lifecycle and the epilogue are skipped (the child is running its part).
        patch = hop.request.attributes
        if isinstance(patch, dict) and patch:
            merge_data(execution, patch, execution.strategy_for(hop))
        hop.data_only = True
        return Outcome.skip_to_finalize()


class ResourceLockStep(Step):
    """25: Acquire, Release or Extend the business lock the transition names (seed 003).

    Runs in the Manual, AutoChain, Scheduled and Event profiles (seed 000; the ErrorBoundary
    profile has no step 25). The owner is the instance; an acquired key is recorded in
    `resource.locks` and released with every other lock of the instance when it reaches a
    terminal status.
    """

    order = Order.RESOURCE_LOCK
    DEFAULT_TTL_SECONDS = 300

    def run(self, execution: Execution, hop: Hop) -> Outcome:
        config = hop.transition.raw.get("resourceLock")
        # Every profile with this step runs it (Manual, AutoChain, Scheduled, Event); the
        # ErrorBoundary profile has no such step, and publish refuses a lock there.
        if not isinstance(config, dict):
            return Outcome.proceed()
        locks = execution.engine.locks
        if locks is None:
            raise VNextError(
                Codes.RESOURCE_LOCK_NOT_AVAILABLE, "this engine has no resource-lock store"
            )
        key = self._key(execution, hop, config)
        owner = execution.instance.id
        ttl = int(config.get("ttlSeconds") or self.DEFAULT_TTL_SECONDS)
        action = str(config.get("action"))
        held = list(execution.instance.extra.get("resource.locks", []))
        if action == "Acquire":
            if not locks.acquire(key, owner, hop.transition.key, ttl):
                raise VNextError(
                    Codes.RESOURCE_LOCK_CONFLICT,
                    f"resource {key!r} is locked by another instance",
                    instance_id=str(owner),
                )
            if key not in held:
                held.append(key)
        elif action == "Release":
            if locks.release(key, owner) is LockRelease.HELD_BY_OTHER:
                logger.warning("lock %s is held by another instance, not %s", key, owner)
            held = [k for k in held if k != key]
        elif action == "Extend" and not locks.extend(key, owner, ttl):
            raise VNextError(
                Codes.RESOURCE_LOCK_CONFLICT,
                f"resource lock {key!r} is not held by this instance (expired or taken over)",
                instance_id=str(owner),
            )
        execution.instance.extra = {**execution.instance.extra, "resource.locks": held}
        execution.writes.set(extra=execution.instance.extra)
        return Outcome.proceed()

    def _key(self, execution: Execution, hop: Hop, config: dict[str, Any]) -> str:
        expression = config.get("keyExpression")
        if not isinstance(expression, dict):
            raise VNextError(Codes.RESOURCE_LOCK_KEY_INVALID, "resourceLock has no keyExpression")
        value = response_data(
            execution.engine.scripts.call(
                expression, execution.definition, "handler", hop_context(execution, hop)
            )
        )
        if not isinstance(value, str) or not value.strip():
            raise VNextError(
                Codes.RESOURCE_LOCK_KEY_INVALID,
                f"the lock key script {expression.get('location', '')} returned "
                f"{type(value).__name__} {value!r}; it must return a non-empty string",
            )
        return value


class OnExecuteStep(Step):
    """30: the transition mapping (or the body itself) into the data, then onExecutionTasks."""

    order = Order.ON_EXECUTE

    def run(self, execution: Execution, hop: Hop) -> Outcome:
        transition = hop.transition
        mapping = transition.raw.get("mapping")
        if resumes_phase(hop, "onExecute"):
            # A retry of a failed task: the mapping already ran (and was committed).
            run_tasks(execution, hop, transition.tasks, "onExecute")
            return Outcome.proceed()
        if isinstance(mapping, dict) and mapping.get("code"):
            returned = execution.engine.scripts.call(
                mapping, execution.definition, "handler", hop_context(execution, hop)
            )
            if isinstance(returned, ScriptResponse) and returned.key and not execution.instance.key:
                execution.instance.key = returned.key
                execution.writes.set(key=returned.key)
            patch = response_data(returned)
            merge_data(
                execution,
                patch if isinstance(patch, dict) else {},
                execution.strategy_for(hop),
                _mapping_rederive(execution, hop, mapping),
            )
        else:
            patch = hop.request.attributes
            if isinstance(patch, dict) and patch:
                merge_data(execution, patch, execution.strategy_for(hop))
        run_tasks(execution, hop, transition.tasks, "onExecute")
        return Outcome.proceed()


def _mapping_rederive(execution: Execution, hop: Hop, mapping: dict[str, Any]) -> Rederive:
    """The transition mapping's patch made again on other data (the same request)."""
    task_responses = dict(execution.task_responses)

    def rederive(data: dict[str, Any]) -> dict[str, Any]:
        context = hop_context(execution, hop, data)
        context.task_responses = dict(task_responses)
        returned = execution.engine.scripts.call(mapping, execution.definition, "handler", context)
        patch = response_data(returned)
        return patch if isinstance(patch, dict) else {}

    return rederive


class ApplyTimeoutStateStep(Step):
    """38: the timeout target is the transition's own target here; nothing else to apply."""

    order = Order.APPLY_TIMEOUT_STATE

    def run(self, execution: Execution, hop: Hop) -> Outcome:
        return Outcome.proceed()


class CancelScheduledJobsStep(Step):
    """39: cancel the timers of the state being left."""

    order = Order.CANCEL_SCHEDULED_JOBS

    def run(self, execution: Execution, hop: Hop) -> Outcome:
        # Only a state with scheduled transitions can have armed timers: skip the write otherwise.
        source = hop.source_state
        if source and execution.definition.scheduled_transitions(source):
            execution.writes.cancel_timers_of.add(source)
        components = execution.engine.tasks.components
        if source and source in human_states(components, execution.definition):
            # Its open human tasks close with it (completing one ran this transition first).
            execution.writes.close_human_tasks_of.add(source)
        return Outcome.proceed()


class OnExitStep(Step):
    """40: the onExits tasks of the state being left."""

    order = Order.ON_EXIT

    def run(self, execution: Execution, hop: Hop) -> Outcome:
        source = execution.definition.states.get(hop.source_state or "")
        if source is not None:
            run_tasks(execution, hop, source.on_exits, "onExit")
        return Outcome.proceed()


class ChangeStateStep(Step):
    """50: enter the target state. Committed before any onEntry work (partial commit)."""

    order = Order.CHANGE_STATE

    def run(self, execution: Execution, hop: Hop) -> Outcome:
        instance = execution.instance
        target = hop.transition.resolved_target(instance.current_state)
        hop.target_state = target
        if hop.row is not None:
            hop.row.to_state = target
        if hop.transition.is_update_data:
            # No state is entered; writing the state columns without holding Busy could
            # overwrite a concurrent transition's state.
            return Outcome.proceed()
        state = execution.definition.state(target)
        instance.current_state = instance.effective_state = target
        instance.effective_state_type = STATE_TYPE_NAMES.get(state.state_type, "intermediate")
        instance.effective_state_subtype = STATE_SUBTYPE_NAMES.get(state.sub_type, "none")
        execution.writes.set(
            current_state=target,
            effective_state=target,
            effective_state_type=instance.effective_state_type,
            effective_state_subtype=instance.effective_state_subtype,
            modified_by=hop.request.actor,
        )
        execution.writes.bump_state_version = True
        execution.writes.states_entered.append((target, hop.transition.key))
        rearm_workflow_timeout(execution, hop, state)
        if execution.holds_busy and (state.on_entries or state.state_type == StateType.SUBFLOW):
            # Seed 000's commit point: the new state (still Busy) is durable before OnEntry's
            # I/O. Readers see it; a run that dies in OnEntry resumes there, never re-running
            # OnExecute or OnExit.
            row = execution.transition_row(hop)
            execution.writes.transitions[row.id] = row
            execution.flush()
        return Outcome.proceed()


class OnEntryStep(Step):
    """60: the onEntries tasks of the state entered."""

    order = Order.ON_ENTRY

    def run(self, execution: Execution, hop: Hop) -> Outcome:
        state = execution.definition.state(hop.target_state)
        run_tasks(execution, hop, state.on_entries, "onEntry")
        # The state's notifications commit with the hop that entered it (after its onEntries
        # succeeded): one job each, run once the hop is committed (seed 001).
        entered = execution.engine.clock()
        for index, entry in enumerate(state.raw.get("notifications") or []):
            if isinstance(entry, dict):
                execution.writes.jobs.append(
                    JobRow(
                        kind=JobKind.NOTIFICATION,
                        run_at=entered,
                        payload=NotificationJob(
                            state=state.key,
                            index=index,
                            transition=hop.transition.key,
                            entered_at=entered.isoformat(),
                        ).to_json(),
                    )
                )
        return Outcome.proceed()


class SubFlowStep(Step):
    """70: entering a SubFlow state starts its child (in the transaction of the parent's final
    flush) and the parent waits, Busy, without running automatic or scheduled transitions."""

    order = Order.SUB_FLOW

    def run(self, execution: Execution, hop: Hop) -> Outcome:
        if hop.transition.is_update_data:
            return Outcome.proceed()
        state = execution.definition.state(hop.target_state)
        if state.subflow is None:
            return Outcome.proceed()
        if execution.waiting_owner is not None:
            # A `$self` transition re-entered the state while its child runs: one child only.
            return Outcome.skip_to_finalize()
        execution.ensure_busy()
        child = child_start(execution, hop, state, hop_context(execution, hop))
        execution.writes.children.append(child)
        execution.waiting_owner = subflow_owner(child.instance.id)
        return Outcome.skip_to_finalize()


class LongPollTerminationStep(Step):
    """75: a state entered with `interaction.longPoll.terminate` pauses the run after OnEntry:
    the instance stays Busy until the client's acknowledgement or the fallback job (due after
    `fallbackTimeoutSeconds`) continues it with the steps from 79 on."""

    order = Order.LONG_POLL_TERMINATION

    def run(self, execution: Execution, hop: Hop) -> Outcome:
        if hop.transition.is_update_data or execution.lock_free:
            return Outcome.proceed()
        if execution.waiting_owner is not None:
            return Outcome.proceed()  # a parent re-entered while its child runs keeps waiting
        state = execution.definition.state(hop.target_state)
        long_poll = state.long_poll
        if long_poll is None or not long_poll.get("terminate"):
            return Outcome.proceed()
        execution.ensure_busy()
        row = execution.transition_row(hop)
        token = uuid.uuid5(row.id, "longpoll")
        seconds = int(long_poll.get("fallbackTimeoutSeconds") or DEFAULT_FALLBACK_SECONDS)
        execution.writes.jobs.append(
            JobRow(
                kind="longpoll-fallback",
                run_at=execution.engine.clock() + timedelta(seconds=seconds),
                state=state.key,
                payload=LongPollFallbackJob(token=str(token), state=state.key).to_json(),
            )
        )
        execution.waiting_owner = f"{LONG_POLL_OWNER_PREFIX}{token}"
        return Outcome.skip_to_finalize()


class ClearBusyOnResumeStep(Step):
    """79: a parent resumed by its ended SubFlow child merges what the mapping's output handler
    makes of the child's data; the run then goes on (Auto) and releases Busy at the end."""

    order = Order.CLEAR_BUSY_ON_RESUME

    def run(self, execution: Execution, hop: Hop) -> Outcome:
        result = hop.request.subflow_result
        if result is None or hop.depth != 0:
            return Outcome.proceed()
        state = execution.definition.state(execution.instance.current_state)

        def derive(data: dict[str, Any] | None = None) -> dict[str, Any]:
            context = hop_context(execution, hop, data)
            context.body = result
            return resume_patch(execution, state, context)

        mapping = (state.subflow or {}).get("mapping")
        reads = isinstance(mapping, dict) and bool(mapping.get("code"))
        merge_data(execution, derive(), execution.strategy_for(hop), derive if reads else None)
        return Outcome.proceed()


class RunAutomaticTransitionsStep(Step):
    """80: pick the next automatic transition: the first whose rule holds, else a default
    (`triggerKind: 10`) one."""

    order = Order.AUTO

    def run(self, execution: Execution, hop: Hop) -> Outcome:
        if not hop.profile.allow_auto_chain or hop.data_only:
            return Outcome.proceed()
        picked = automatic_transition(
            execution.engine,
            execution.definition,
            execution.instance,
            lambda: hop_context(execution, hop),
        )
        if picked is None:
            return Outcome.proceed()
        return Outcome.with_directives(next_transition=picked)


def automatic_transition(
    engine: RunEngine,
    definition: WorkflowDefinition,
    instance: InstanceSnapshot,
    context: Callable[[], Any],
) -> TransitionDef | None:
    """The automatic transition of the instance's state that fires now: the first whose rule
    holds, else a default (`triggerKind: 10`) one; None in a final state or when none does.
    `context()` makes the context the rules share (each gets its own copy in the worker)."""
    state = definition.state(instance.current_state)
    if state.is_final:
        return None
    candidates = definition.auto_transitions(state.key)
    ordered = [t for t in candidates if not t.is_default_auto]
    ordered += [t for t in candidates if t.is_default_auto]
    # Each one's rule, or without one whether it is a default; the rules in one round trip.
    checks = [
        rule
        if isinstance(rule := t.raw.get("rule"), dict) and rule.get("code")
        else t.is_default_auto
        for t in ordered
    ]
    picked = engine.scripts.first_holding(checks, definition, context())
    return None if picked is None else ordered[picked]


class ScheduleTransitionsStep(Step):
    """90: arm the state's scheduled transitions as timer jobs, unless Auto already picked.
    The start hop also arms the workflow `timeout` (from the start; ChangeState re-arms it
    when its `timer.reset` says so)."""

    order = Order.SCHEDULE

    def run(self, execution: Execution, hop: Hop) -> Outcome:
        timeout = execution.definition.timeout_for(execution.instance.extra)
        if hop.transition.kind == TransitionKind.START and timeout is not None:
            self._arm_workflow_timeout(execution, hop)
        if hop.next_transition is not None:
            return Outcome.proceed()
        state = execution.definition.state(execution.instance.current_state)
        if state.is_final:
            return Outcome.proceed()
        for transition in execution.definition.scheduled_transitions(state.key):
            # A cron timer's own firing re-arms it from its job's payload (`timers.py`).
            job = scheduled_timer_job(execution, hop, state, transition)
            if job is not None:
                execution.writes.jobs.append(job)
        return Outcome.proceed()

    def _arm_workflow_timeout(self, execution: Execution, hop: Hop) -> None:
        timeout = execution.definition.timeout_for(execution.instance.extra)
        assert timeout is not None
        job = workflow_timeout_job(execution, hop, timeout)
        if job is not None:
            execution.writes.jobs.append(job)


class FinishStep(Step):
    """100: a final state completes the instance (cancel/timeout report their own sub-type)."""

    order = Order.FINISH

    def run(self, execution: Execution, hop: Hop) -> Outcome:
        state = execution.definition.state(execution.instance.current_state)
        if not state.is_final:
            return Outcome.proceed()
        instance = execution.instance
        kind = hop.transition.kind
        if kind == TransitionKind.CANCEL:
            instance.effective_state_subtype = "cancelled"
        elif kind == TransitionKind.TIMEOUT:
            instance.effective_state_subtype = "timeout"
        instance.completed_at = execution.engine.clock()
        execution.writes.set(
            effective_state_subtype=instance.effective_state_subtype,
            completed_at=instance.completed_at,
        )
        execution.writes.cancel_all_timers = True
        execution.writes.release_locks = True
        if human_states(execution.engine.tasks.components, execution.definition):
            execution.writes.close_all_human_tasks = True
        if instance.parent_correlation_id is not None:
            # A child's end closes its correlation; an S parent gets its resume job.
            cancelled = kind in (TransitionKind.CANCEL, TransitionKind.TIMEOUT)
            execution.writes.parent_correlation_status = (
                CorrelationStatus.CANCELLED if cancelled else CorrelationStatus.COMPLETED
            )
        if kind in BUSY_EXEMPT:
            # Ending a parent ends its SubFlow children, each with its own cancel (or exit).
            execution.writes.children_end = ChildrenEnd(
                CorrelationStatus.CANCELLED,
                TransitionKind.EXIT if kind == TransitionKind.EXIT else TransitionKind.CANCEL,
            )
        if execution.started_faulted:
            # Cancel, exit or the timeout ended a faulted instance: nothing is left to repair.
            resolution = _RESOLUTIONS.get(kind, "completed")
            execution.writes.resolve_incidents = (resolution, hop.request.actor)
        hop.completed = True
        return Outcome.proceed()


_RESOLUTIONS = {
    TransitionKind.CANCEL: "cancelled",
    TransitionKind.EXIT: "exited",
    TransitionKind.TIMEOUT: "timed out",
}


class FinalizeStep(Step):
    """110: close the transition record."""

    order = Order.FINALIZE

    def run(self, execution: Execution, hop: Hop) -> Outcome:
        row = hop.row or execution.transition_row(hop)
        instance = execution.instance
        row.status = TransitionStatus.COMPLETED
        row.finished_at = execution.engine.clock()
        row.to_state = instance.current_state
        row.effective_state = instance.effective_state
        row.effective_state_type = instance.effective_state_type
        row.effective_state_subtype = instance.effective_state_subtype
        execution.writes.transitions[row.id] = row
        return Outcome.proceed()


class ResolveAvailableStep(Step):
    """112: unless the chain goes on, commit and leave the instance Active (or Completed)."""

    order = Order.RESOLVE_AVAILABLE

    def run(self, execution: Execution, hop: Hop) -> Outcome:
        if hop.next_transition is not None and execution.lock_free and execution.defer_chain:
            # Applied in its write lane: the chain must not run while the lane is held.
            execution.stage_automatic(execution.instance.current_state, hop.next_transition)
            hop.next_transition = None
        if hop.next_transition is not None:
            if execution.lock_free:
                # updateData commits its own data first; the chain after it is an ordinary run.
                execution.flush()
                execution.lock_free = False
                execution.chained_after_update = True
            return Outcome.proceed()
        completed = hop.completed or execution.instance.status == InstanceStatus.COMPLETED
        first = execution.hops[0].request
        if first.resolves_incidents:
            # The retried run ended without a fault: what it repaired is closed with it.
            execution.writes.resolve_incidents = (first.resolves_incidents, first.actor)
        if not completed and execution.waiting_owner is not None:
            execution.leave_waiting()
            return Outcome.proceed()
        execution.release(InstanceStatus.COMPLETED if completed else InstanceStatus.ACTIVE)
        return Outcome.proceed()


STEPS: tuple[Step, ...] = (
    PreflightStep(),
    ForwardToActiveSubflowStep(),
    SetBusyStep(),
    CreateTransitionStep(),
    ParentUpdateDataDataOnlyStep(),
    ResourceLockStep(),
    OnExecuteStep(),
    ApplyTimeoutStateStep(),
    CancelScheduledJobsStep(),
    OnExitStep(),
    ChangeStateStep(),
    OnEntryStep(),
    SubFlowStep(),
    LongPollTerminationStep(),
    ClearBusyOnResumeStep(),
    RunAutomaticTransitionsStep(),
    ScheduleTransitionsStep(),
    FinishStep(),
    FinalizeStep(),
    ResolveAvailableStep(),
)
