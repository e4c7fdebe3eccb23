"""The engine's requests for the runs the services and the jobs start: a client's start or
transition (run now, or by the job it was accepted as), an operator's retry, an error boundary's
retry, the continuation of a long-poll pause. Each is built here once, for both callers."""

from __future__ import annotations

import uuid
from typing import Any

from instances.engine.definition import (
    LONG_POLL_ACK_KEY,
    SUBFLOW_RESUME_KEY,
    TransitionDef,
    TransitionKind,
    WorkflowDefinition,
)
from instances.engine.errors import Codes, VNextError
from instances.engine.execution import TaskResume, TransitionRequest
from instances.engine.profiles import Order
from instances.job_payloads import BoundaryRetryJob, FaultToRetry, TransitionJob
from instances.orm_store import ended_subflow_child_get
from instances.status import Trigger


def transition_request(
    transition: TransitionDef,
    call: TransitionJob,
    *,
    row_seed: uuid.UUID | None = None,
    attempt: int | None = None,
) -> TransitionRequest:
    """The engine's request for a client's start or transition `call`, run now (a sync
    request) or by the job it was accepted as (`row_seed`, `attempt`: that job's)."""
    return TransitionRequest(
        transition=transition,
        trigger=Trigger.EVENT if call.trigger == Trigger.EVENT else Trigger.MANUAL,
        attributes=call.attributes,
        body=call.body,
        headers=call.headers,
        query=call.query,
        actor=call.actor,
        stage=call.stage,
        row_seed=row_seed,
        attempt=attempt,
    )


def retry_request(
    definition: WorkflowDefinition,
    fault: FaultToRetry | None,
    *,
    actor: str,
    headers: dict[str, str],
    query: dict[str, Any],
    instance_id: uuid.UUID | None = None,
) -> TransitionRequest:
    """The request that re-runs `fault`'s transition from its failed step (a sync retry, or the
    job of an async one) on instance `instance_id`."""
    transition = faulted_transition(definition, fault) if fault else None
    if fault is None or transition is None:
        raise VNextError(
            Codes.INSTANCE_FAULTED,
            "no faulted transition of this instance can be run again; cancel it instead",
        )
    step = Order[fault.step] if fault.step in Order.__members__ else None
    request = _rerun_request(
        transition,
        fault,
        actor=actor,
        headers=headers,
        query=query,
        resume_at=step if step is not None and step > Order.CREATE_TRANSITION else None,
        resolves_incidents="retried",
    )
    if transition.kind == TransitionKind.SUBFLOW_RESUME and instance_id is not None:
        # A resume that faulted (its output handler, say) runs again with the child's data.
        child = ended_subflow_child_get(parent_id=instance_id, state=fault.from_state)
        request.subflow_result = dict(child.data) if child is not None else {}
        request.resume_at = Order.CLEAR_BUSY_ON_RESUME
    return request


def _rerun_request(
    transition: TransitionDef,
    fault: FaultToRetry,
    *,
    actor: str,
    headers: dict[str, str],
    query: dict[str, Any],
    resume_at: Order | None,
    resolves_incidents: str,
) -> TransitionRequest:
    # What an operator's retry and an error boundary's retry both re-run: `fault`'s transition,
    # as it was triggered, resumed at `resume_at` in the state it faulted in.
    return TransitionRequest(
        transition=transition,
        trigger=Trigger.of(fault.trigger),
        headers=headers,
        query=query,
        actor=actor,
        resume_at=resume_at,
        resume_from_state=fault.from_state or None,
        resolves_incidents=resolves_incidents,
    )


def boundary_retry_request(
    definition: WorkflowDefinition, job: BoundaryRetryJob
) -> TransitionRequest:
    """The request of an error-boundary retry job: the hop it continues, re-entered at the task
    that failed (`job.boundary_retry`, written by the engine when it scheduled it)."""
    retry = job.boundary_retry
    fault = retry.fault
    transition = faulted_transition(definition, fault)
    if transition is None or fault.step not in Order.__members__:
        raise VNextError(
            Codes.TRANSITION_NOT_FOUND,
            f"transition {fault.transition_key!r} of an error-boundary retry vanished",
        )
    request = _rerun_request(
        transition,
        fault,
        actor=job.actor,
        headers=job.headers,
        query=job.query,
        resume_at=Order[fault.step],
        resolves_incidents=retry.resolves_incidents,
    )
    request.resume_tasks = TaskResume(phase=retry.phase, order=retry.order, keys=tuple(retry.tasks))
    request.boundary_retries = retry.retry
    request.resume_row = uuid.UUID(retry.row_id)
    return request


def faulted_transition(definition: WorkflowDefinition, fault: FaultToRetry) -> TransitionDef | None:
    """The transition a retry of `fault` re-runs (None: the definition has it no more)."""
    if fault.transition_key == definition.start.key and not fault.from_state:
        return definition.start
    found = definition.transition_for(fault.from_state, fault.transition_key)
    if found is not None:
        return found
    if fault.transition_key == SUBFLOW_RESUME_KEY:
        return definition.subflow_resume(fault.from_state)
    if fault.transition_key == LONG_POLL_ACK_KEY:
        return definition.long_poll_ack(fault.from_state)
    specials = [*definition.specials(), definition.timeout]
    special = next((t for t in specials if t is not None and t.key == fault.transition_key), None)
    # An error boundary's rollback/notify transition runs even where it is not available.
    return special or definition.find_any(fault.transition_key)


def long_poll_continue_request(
    definition: WorkflowDefinition, state: str, *, actor: str
) -> TransitionRequest:
    """The request that continues a run paused at step 75 in `state` (an ack, or the
    fallback job)."""
    return TransitionRequest(
        transition=definition.long_poll_ack(state),
        trigger=Trigger.AUTOMATIC,
        actor=actor,
        resume_at=Order.CLEAR_BUSY_ON_RESUME,
        resume_from_state=state,
    )
