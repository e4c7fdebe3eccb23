"""A failed task's error boundary carried out on its run (seed 001 `errorBoundary`): a retry job
that resumes the hop under the run's reservation, a diverted hop (Rollback, Notify), the rest of
the task list skipped (Ignore, Log), or the fault (Abort, no rule, retries exhausted)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from instances.engine.boundaries import (
    BoundaryAction,
    Decision,
    TaskError,
    boundary_levels,
    error_type_of,
)
from instances.engine.execution import Execution, Hop
from instances.engine.records import IncidentRow, JobRow
from instances.engine.task_types import TaskFailure
from instances.engine.tasks import TaskOutcome
from instances.job_payloads import BoundaryRetry, BoundaryRetryJob
from instances.status import JobKind, TransitionStatus, Trigger

logger = logging.getLogger("vnext.pipeline")


class Diverted(Exception):
    """A Rollback or Notify rule handled a task failure."""

    def __init__(self, failure: TaskFailure, decision: Decision) -> None:
        super().__init__(failure.code)
        self.failure, self.decision = failure, decision


class RetryScheduled(Exception):
    """A Retry rule scheduled the next attempt: the run stops here, Busy."""


class BoundaryFault(Exception):
    """An Abort rule, no matching rule, or exhausted retries: the instance faults."""

    def __init__(self, failure: TaskFailure, decision: Decision | None, note: str) -> None:
        super().__init__(failure.code)
        self.failure, self.decision, self.note = failure, decision, note


def task_failed(
    execution: Execution, hop: Hop, outcome: TaskOutcome, reference: dict[str, Any], phase: str
) -> bool:
    """A task of `hop` failed: its error boundary decides. Returns True to skip the rest of
    the task list (Ignore, Log), False to go on (no boundary anywhere and the task got an
    answer); raises to fault (Abort, no matching rule), divert (Rollback, Notify) or stop
    until a retry job is due (Retry)."""
    failure = outcome.failure
    assert failure is not None
    state = execution.definition.states.get(execution.instance.current_state)
    levels = boundary_levels(
        reference,
        state.raw.get("errorBoundary") if state is not None else None,
        execution.definition.attributes.get("errorBoundary"),
    )
    error = TaskError(failure.code, failure.status, error_type_of(failure.code))
    if not levels.defined_for(error):
        if failure.answered:
            logger.warning(
                "task %s of %s failed (%s) with no error boundary; its output handler had "
                "the answer, the run goes on",
                outcome.key,
                execution.instance.id,
                failure.code,
            )
            return False
        raise failure
    if not execution.holds_busy and not execution.lock_free:
        # A hop of script tasks runs without Busy; what a boundary does next (a retry job
        # under the reservation, a diverted transition in OwnerReentry) needs it.
        execution.ensure_busy()
    decision = levels.decide(error)
    note = ""
    if decision is not None and decision.action is BoundaryAction.RETRY:
        retries = _retries_before(hop, outcome, phase)
        outcome.row.attempts = retries + 1
        policy = decision.rule.retry_policy
        if policy is not None and policy.allows(retries + 1) and not execution.lock_free:
            due = execution.engine.clock() + policy.delay(retries + 1)
            _schedule_retry(execution, hop, outcome, phase, retries + 1, due)
            raise RetryScheduled()
        note = f" (after {retries} {'retry' if retries == 1 else 'retries'})"
        exhausted, decision = decision, levels.decide(error, without_retry=True)
        if decision is None:
            raise BoundaryFault(failure, exhausted, note)
    if decision is None:
        raise BoundaryFault(failure, None, "")
    action = decision.action
    if action is BoundaryAction.ABORT:
        raise BoundaryFault(failure, decision, note)
    if action in (BoundaryAction.ROLLBACK, BoundaryAction.NOTIFY):
        raise Diverted(failure, decision)
    logger.log(
        logging.WARNING if action is BoundaryAction.LOG else logging.INFO,
        "task %s of %s failed (%s): %s by its %s error boundary (%s); the rest of %s is skipped",
        outcome.key,
        execution.instance.id,
        failure.code,
        action.title.lower() + "d" if action is BoundaryAction.IGNORE else "logged",
        decision.level,
        decision.rule.source,
        phase,
    )
    return True


def _retries_before(hop: Hop, outcome: TaskOutcome, phase: str) -> int:
    # A resumed retry counts on from the retries before it, for the tasks it re-runs.
    resume = hop.request.resume_tasks if hop.depth == 0 else None
    if resume is None or resume.phase != phase or outcome.key not in resume.keys:
        return 0
    return hop.request.boundary_retries


def _schedule_retry(
    execution: Execution, hop: Hop, outcome: TaskOutcome, phase: str, retry: int, due: datetime
) -> None:
    """Stop the run with the instance still Busy: commit what it did (the failed attempt's
    journal row and the data its output handler wrote) with a job, due at `due`, that
    resumes the hop at the failed task under the same reservation."""
    row = execution.transition_row(hop)
    execution.writes.transitions[row.id] = row
    step = hop.executed[-1]
    execution.writes.jobs.append(
        JobRow(
            kind=JobKind.TRANSITION,
            run_at=due,
            payload=BoundaryRetryJob(
                boundary_retry=BoundaryRetry(
                    transition=hop.transition.key,
                    from_state=hop.source_state or "",
                    trigger=int(hop.request.trigger),
                    step=step.name,
                    phase=phase,
                    order=outcome.row.order,
                    tasks=[outcome.key],
                    retry=retry,
                    row_id=str(row.id),
                    resolves_incidents=execution.hops[0].request.resolves_incidents,
                ),
                reservation=execution.owner,
                actor=hop.request.actor,
                headers=hop.request.headers,
                query=hop.request.query,
            ).to_json(),
        )
    )
    execution.flush()
    execution.awaiting_retry = due
    logger.info(
        "task %s of %s failed; error-boundary retry %s due at %s",
        outcome.key,
        execution.instance.id,
        retry,
        due.isoformat(),
    )


def divert(execution: Execution, hop: Hop, failure: TaskFailure, decision: Decision) -> None:
    """Rollback or Notify: the hop ends `diverted`, a resolved incident records why, and
    the rule's transition runs next under the ErrorBoundary profile, inside the Busy
    ownership this run holds (OwnerReentry). An `onTimeout` policy may name a state instead
    of a transition (a transition of that key wins): the next hop then just enters it."""
    key = decision.rule.transition
    current = execution.instance.current_state
    definition = execution.definition
    transition = definition.transition_for(current, key) or definition.find_any(key)
    if transition is None and decision.rule.on_timeout:
        transition = definition.on_timeout_move(key, current)
    if transition is None:
        execution.fault(hop, failure, decision, f" (its transition {key!r} does not exist)")
    now = execution.engine.clock()
    row = execution.transition_row(hop)
    row.status = TransitionStatus.DIVERTED
    row.error_code, row.error_message, row.finished_at = failure.code, failure.message, now
    row.to_state = current
    execution.writes.transitions[row.id] = row
    action = decision.action.title
    execution.writes.incidents.append(
        IncidentRow(
            transition_id=row.id,
            state=current,
            transition_key=hop.transition.key,
            error_code=failure.code,
            message=failure.message,
            layer="task",
            task_key=failure.task_key,
            step=hop.executed[-1].name if hop.executed else "",
            attempt=hop.request.attempt,
            resolved=True,
            resolved_at=now,
            resolution=f"{action.lower()} to {key}",
            resolved_by="error boundary",
            boundary_action=action,
            boundary_level=str(decision.level),
        )
    )
    if execution.lock_free:
        # updateData committed nothing under Busy: its writes go first, then an ordinary run.
        execution.flush()
        execution.lock_free = False
        execution.chained_after_update = True
    logger.warning(
        "task %s of %s failed (%s): %s by its %s error boundary (%s) to %s",
        failure.task_key,
        execution.instance.id,
        failure.code,
        action.lower(),
        decision.level,
        decision.rule.source,
        key,
    )
    hop.next_transition = transition
    hop.next_trigger = Trigger.ERROR_BOUNDARY
