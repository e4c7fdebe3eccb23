"""Instance writes: start an instance, run a transition. Views, tasks and commands call these;
these call the engine with the ORM store."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from instances.archive import archived_instance
from instances.engine.definition import (
    LONG_POLL_ACK_KEY,
    SUBFLOW_RESUME_KEY,
    TransitionDef,
    TransitionKind,
    WorkflowDefinition,
    schema_reference,
)
from instances.engine.errors import Codes, ErrorCode, VNextError
from instances.engine.execution import MAX_CHAIN_DEPTH, Execution, TaskResume, TransitionRequest
from instances.engine.outcomes import (
    BUSY_EXEMPT,
    ForwardToSubflow,
    PipelineFault,
    PipelineSuperseded,
)
from instances.engine.overrides import NO_OVERRIDES
from instances.engine.payload import Payload, split_payload, validate_attributes
from instances.engine.ports import BusinessKeyTaken
from instances.engine.profiles import Order
from instances.engine.records import (
    LONG_POLL_OWNER_PREFIX,
    Guard,
    GuardKind,
    InstanceSnapshot,
    PendingWrites,
    new_etag,
    waiting_child,
)
from instances.engine.roles import INSTANCE_STARTER, Caller, allowed
from instances.engine.script_runner import script_context
from instances.engine.scripts import ScriptError, ScriptResponse
from instances.engine.subflows import forward_target
from instances.field_encryption import protection_of, seal_request
from instances.models import Correlation, Incident, Instance, Job, OperatorAction
from instances.orm_store import (
    FaultToRetry,
    OrmStore,
    snapshot_of,
)
from instances.queue import job_enqueue, lane_ticket
from instances.status import CorrelationStatus, InstanceStatus, JobKind, JobStatus, Trigger
from instances.wiring import engine
from vnext.conf import header_deny_list

logger = logging.getLogger(__name__)

_store = OrmStore()


@dataclass(frozen=True)
class RequestInfo:
    """What a caller sent besides the body: who, headers (lower-case), query parameters."""

    actor: str = ""
    headers: dict[str, str] | None = None
    query: dict[str, Any] | None = None
    # The caller the definition's role rules judge, built on first use (a query for the
    # groups); None for the platform's own calls (jobs, operators' tools), which no role binds.
    caller: Callable[[], Caller] | None = None

    def roles_on(self, instance: InstanceSnapshot | None) -> frozenset[str] | None:
        """The caller's roles on `instance` (a start: the starter's own), or None when no
        caller is judged."""
        if self.caller is None:
            return None
        caller = self.caller()
        if instance is None:
            return caller.roles | {INSTANCE_STARTER}
        return caller.on(instance.created_by, instance.modified_by)

    @property
    def payload_mode(self) -> str | None:
        """The `x-vnext-payload-mode` header."""
        return (self.headers or {}).get("x-vnext-payload-mode")


@dataclass(frozen=True)
class InstanceOutcome:
    """The instance after a start or transition; `created` is False for an idempotent start.
    `addressed` is the instance the caller named when the transition was forwarded to its
    active subflow (the answer describes that one). `queued`: accepted but not run yet."""

    instance: InstanceSnapshot
    created: bool = True
    execution: Execution | None = None
    addressed: uuid.UUID | None = None
    # A sync updateData that did not get its turn in time: accepted, left to the workers.
    queued: bool = False


def workflow_definition(
    domain: str, workflow: str, version: str | None = None
) -> WorkflowDefinition:
    """The published workflow, or 404 `Instance:100015`."""
    definition = engine().components.workflow(domain, workflow, version)
    if definition is None:
        wanted = f"{domain}/{workflow}" + (f"@{version}" if version else "")
        raise VNextError(Codes.WORKFLOW_NOT_FOUND, f"workflow {wanted} is not published")
    return definition


def _checked_payload(
    definition: WorkflowDefinition, transition: TransitionDef, body: Any, info: RequestInfo
) -> Payload:
    payload = split_payload(body, info.payload_mode)
    reference = schema_reference(transition.raw.get("schema"))
    if reference is not None:
        component = engine().components.component("schema", reference)
        if component is None:
            raise VNextError(
                Codes.APP_INTERNAL, f"schema {reference.get('key')} of {transition.key} is missing"
            )
        schema = (component.get("attributes") or {}).get("schema")
        if isinstance(schema, dict):
            prefix = "/attributes" if payload.envelope else ""
            validate_attributes(schema, payload.attributes, prefix=prefix)
    return payload


def instance_start(
    *,
    domain: str,
    workflow: str,
    body: Any,
    info: RequestInfo,
    version: str | None = None,
) -> InstanceOutcome:
    """Start an instance; with a business key a live instance already has, return that one."""
    definition = workflow_definition(domain, workflow, version)
    _check_transition_roles(definition, definition.start, "", None, info)
    payload = _checked_payload(definition, definition.start, body, info)
    if payload.key:
        existing = _store.live_by_key(domain, workflow, payload.key)
        if existing is not None:
            return InstanceOutcome(existing, created=False)
    now = timezone.now()
    snapshot = InstanceSnapshot(
        id=uuid.uuid4(),
        domain=domain,
        workflow_key=definition.key,
        workflow_version=definition.version,
        current_state=definition.initial_state.key,
        effective_state=definition.initial_state.key,
        key=payload.key,
        tags=payload.tags,
        stage=payload.stage,
        created_by=info.actor,
        modified_by=info.actor,
        created_at=now,
    )
    request = _request(definition.start, payload, body, info)
    try:
        execution = engine().execute(definition, snapshot, request, is_new=True)
    except BusinessKeyTaken:
        existing = _store.live_by_key(domain, workflow, str(payload.key))
        if existing is None:
            raise
        return InstanceOutcome(existing, created=False)
    return InstanceOutcome(execution.instance, created=True, execution=execution)


def start_runs_sync(domain: str, workflow: str, version: str | None, requested: bool) -> bool:
    """Whether a start runs synchronously: the start transition's or the workflow's
    `executionType`, else the request's `?sync` (404 when the workflow is not published)."""
    definition = workflow_definition(domain, workflow, version)
    return definition.runs_sync(definition.start, requested)


def transition_runs_sync(
    *, domain: str, workflow: str, ref: str, transition_key: str, requested: bool
) -> tuple[bool, InstanceSnapshot]:
    """Whether a transition runs synchronously (the transition's `executionType`, else its
    workflow's, on the instance's pinned version; else `?sync`), and the instance it was read
    from, for the run to start from. A transition forwarded to an active subflow follows the
    addressed instance's workflow."""
    addressed = instance_snapshot(domain=domain, workflow=workflow, ref=ref)
    definition = engine().components.workflow(
        addressed.domain, addressed.workflow_key, addressed.workflow_version
    )
    if definition is None:
        return requested, addressed
    transition = definition.transition_for(
        addressed.current_state, transition_key
    ) or definition.find_any(transition_key)
    return definition.runs_sync(transition, requested), addressed


def instance_transition(
    *,
    domain: str,
    workflow: str,
    ref: str,
    transition_key: str,
    body: Any,
    info: RequestInfo,
    addressed: InstanceSnapshot | None = None,
    defer_chain: bool = False,
) -> InstanceOutcome:
    """Run a client-triggered transition on an instance (by id or business key; `addressed`
    when the caller has just read it). `defer_chain`: an updateData applied in its instance's
    write lane leaves its automatic chain to a job (the caller runs it after the lane)."""
    if addressed is None:
        addressed = instance_snapshot(domain=domain, workflow=workflow, ref=ref)
    for _ in range(2):
        instance, definition, transition, payload = _admissible(
            addressed, transition_key, body, info
        )
        request = _request(transition, payload, body, info)
        try:
            execution = engine().execute(definition, instance, request, defer_chain=defer_chain)
        except ForwardToSubflow:
            # The instance began waiting for a child since it was read: forward again.
            addressed = instance_snapshot(domain=domain, workflow=workflow, ref=ref)
            continue
        forwarded = addressed.id if instance.id != addressed.id else None
        return InstanceOutcome(
            execution.instance, created=False, execution=execution, addressed=forwarded
        )
    raise VNextError(
        Codes.INSTANCE_BUSY,
        "the instance's subflow chain keeps changing; send the transition again",
        instance_id=str(addressed.id),
    )


def instance_retry(
    *, domain: str, workflow: str, ref: str, body: Any, info: RequestInfo, sync: bool = True
) -> InstanceOutcome:
    """An operator retries a Faulted instance: the body's attributes are merged first (the
    correction), then the faulting transition runs again from the step that failed (a fault in
    OnEntry re-runs OnEntry, not OnExecute). The instance goes from Faulted to Busy by
    compare-and-set, so of two concurrent retries one runs and the other gets 409. A run that
    ends without a fault closes the open incidents (`retried`); one that faults again opens a
    new incident and the instance stays retryable. With `sync=False` a job runs it (202)."""
    instance = instance_snapshot(domain=domain, workflow=workflow, ref=ref)
    if instance.status != InstanceStatus.FAULTED:
        raise VNextError(
            Codes.INSTANCE_NOT_FAULTED,
            f"instance is not faulted (status {instance.status}); only a faulted one is retried",
            instance_id=str(instance.id),
        )
    definition = workflow_definition(domain, instance.workflow_key, instance.workflow_version)
    fault = _store.fault_to_retry(instance)
    headers = header_deny_list().strip(info.headers)
    request = retry_request(
        definition,
        fault,
        actor=info.actor,
        headers=headers,
        query=dict(info.query or {}),
        instance_id=instance.id,
    )
    owner = f"retry:{uuid.uuid4().hex}"
    writes = PendingWrites()
    writes.set(status=InstanceStatus.BUSY, busy_owner=owner, busy_since=timezone.now())
    writes.merge_data(_correction(body), request.transition.version_strategy)
    with transaction.atomic():
        taken = _store.flush(instance, writes, Guard(GuardKind.FAULTED))
        if taken is not None and not sync and fault is not None:
            payload = {
                "retry": asdict(fault),
                "transition": request.transition.key,
                "reservation": owner,
                "actor": info.actor,
                "headers": headers,
                "query": request.query,
            }
            job_enqueue(kind=JobKind.TRANSITION, instance_id=instance.id, payload=payload)
    if taken is None:
        raise VNextError(
            Codes.INSTANCE_BUSY,
            "the instance is no longer faulted: another retry or a cancel took it",
            instance_id=str(instance.id),
        )
    if not sync:
        return InstanceOutcome(taken, created=False)
    execution = engine().execute(definition, taken, request, owner=owner, reserved=True)
    return InstanceOutcome(execution.instance, created=False, execution=execution)


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
    transition = _faulted_transition(definition, fault) if fault else None
    if fault is None or transition is None:
        raise VNextError(
            Codes.INSTANCE_FAULTED,
            "no faulted transition of this instance can be run again; cancel it instead",
        )
    step = Order[fault.step] if fault.step in Order.__members__ else None
    request = TransitionRequest(
        transition=transition,
        trigger=Trigger.of(fault.trigger),
        headers=headers,
        query=query,
        actor=actor,
        resume_at=step if step is not None and step > Order.CREATE_TRANSITION else None,
        resume_from_state=fault.from_state or None,
        resolves_incidents="retried",
    )
    if transition.kind == TransitionKind.SUBFLOW_RESUME and instance_id is not None:
        # A resume that faulted (its output handler, say) runs again with the child's data.
        request.subflow_result = _ended_child_data(instance_id, fault.from_state)
        request.resume_at = Order.CLEAR_BUSY_ON_RESUME
    return request


def _ended_child_data(parent_id: uuid.UUID, state: str) -> dict[str, Any]:
    correlation = (
        Correlation.objects.filter(
            parent_id=parent_id, parent_state=state, type=Correlation.Type.SUBFLOW
        )
        .exclude(status=CorrelationStatus.ACTIVE)
        .order_by("-completed_at", "-pk")
        .first()
    )
    child = _store.load(correlation.child_id) if correlation and correlation.child_id else None
    return dict(child.data) if child is not None else {}


def boundary_retry_request(
    definition: WorkflowDefinition, payload: dict[str, Any]
) -> TransitionRequest:
    """The request of an error-boundary retry job: the hop it continues, re-entered at the task
    that failed (`payload["boundaryRetry"]`, written by the engine when it scheduled it)."""
    retry = payload["boundaryRetry"]
    fault = FaultToRetry(
        transition_key=str(retry["transition"]),
        from_state=str(retry.get("fromState") or ""),
        trigger=int(retry.get("trigger") or 0),
        step=str(retry.get("step") or ""),
    )
    transition = _faulted_transition(definition, fault)
    if transition is None or fault.step not in Order.__members__:
        raise VNextError(
            Codes.TRANSITION_NOT_FOUND,
            f"transition {fault.transition_key!r} of an error-boundary retry vanished",
        )
    return TransitionRequest(
        transition=transition,
        trigger=Trigger.of(fault.trigger),
        headers=payload.get("headers") or {},
        query=payload.get("query") or {},
        actor=payload.get("actor") or "",
        resume_at=Order[fault.step],
        resume_from_state=fault.from_state or None,
        resume_tasks=TaskResume(
            phase=str(retry["phase"]),
            order=int(retry["order"]),
            keys=tuple(str(key) for key in retry.get("tasks") or []),
        ),
        boundary_retries=int(retry["retry"]),
        resume_row=uuid.UUID(str(retry["rowId"])),
        resolves_incidents=str(retry.get("resolvesIncidents") or ""),
    )


def _faulted_transition(
    definition: WorkflowDefinition, fault: FaultToRetry
) -> TransitionDef | None:
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


def _correction(body: Any) -> dict[str, Any]:
    # `{"attributes": {...}}` or the attributes themselves; nothing else is data.
    if isinstance(body, dict) and isinstance(body.get("attributes"), dict):
        return dict(body["attributes"])
    if isinstance(body, dict) and "attributes" not in body:
        return dict(body)
    raise VNextError(Codes.APP_INVALID_REQUEST, "the correction must be a JSON object")


def _job_payload(
    definition: WorkflowDefinition,
    transition: TransitionDef,
    payload: Payload,
    body: Any,
    info: RequestInfo,
    **extra: Any,
) -> dict[str, Any]:
    headers = header_deny_list().strip(info.headers)
    built = {
        "transition": transition.key,
        "attributes": payload.attributes,
        "body": body,
        "headers": headers,
        "query": dict(info.query or {}),
        "actor": info.actor,
        "stage": payload.stage,
        **extra,
    }
    if protection_of(definition, engine().components) is not None:
        # The workflow encrypts fields at rest: the request may carry them, so the job row
        # holds it sealed (the job handler opens it).
        return seal_request(built)
    return built


def instance_start_accept(
    *,
    domain: str,
    workflow: str,
    body: Any,
    info: RequestInfo,
    version: str | None = None,
) -> InstanceOutcome:
    """`sync=false` start: validate, then in one transaction insert the instance (Busy, reserved
    for its job) and the job that runs the start pipeline; answer right away."""
    definition = workflow_definition(domain, workflow, version)
    _check_transition_roles(definition, definition.start, "", None, info)
    payload = _checked_payload(definition, definition.start, body, info)
    if payload.key:
        existing = _store.live_by_key(domain, workflow, payload.key)
        if existing is not None:
            return InstanceOutcome(existing, created=False)
    reservation = f"res:{uuid.uuid4().hex}"
    initial = definition.initial_state.key
    snapshot = InstanceSnapshot(
        id=uuid.uuid4(),
        domain=domain,
        workflow_key=definition.key,
        workflow_version=definition.version,
        key=payload.key,
        current_state=initial,
        effective_state=initial,
        etag=new_etag(),
        entity_etag=new_etag(),
        tags=payload.tags,
        stage=payload.stage,
        created_by=info.actor,
        modified_by=info.actor,
    )
    job_payload = _job_payload(
        definition, definition.start, payload, body, info, start=True, reservation=reservation
    )
    try:
        created = _store.create_reserved(snapshot, reservation, job_payload)
    except BusinessKeyTaken:
        existing = _store.live_by_key(domain, workflow, str(payload.key))
        if existing is None:
            raise
        return InstanceOutcome(existing, created=False)
    return InstanceOutcome(created, created=True)


def instance_relay(
    *,
    domain: str,
    ref: str,
    transition_key: str,
    reservation: str,
    body: Any,
    info: RequestInfo,
) -> InstanceOutcome:
    """The internal subflow relay (API.md 5): run `transition_key` on the instance an async
    accept reserved with the chain-reserve claim `reservation`, taking exactly that claim over.
    A claim the instance does not hold (forged, spent, or Busy for its own reasons) is 409."""
    try:
        instance_id = uuid.UUID(ref)
    except ValueError:
        raise VNextError(Codes.INSTANCE_NOT_FOUND, f"no instance {ref!r}") from None
    instance = _store.load(instance_id)
    if instance is None or instance.domain != domain:
        raise VNextError(Codes.INSTANCE_NOT_FOUND, f"domain {domain} has no instance {ref!r}")
    definition = workflow_definition(domain, instance.workflow_key, instance.workflow_version)
    transition = _client_transition(definition, instance, transition_key)
    payload = _checked_payload(definition, transition, body, info)
    owner = f"relay:{uuid.uuid4().hex}"
    # Only an accept's claim: never a correlation's or a job's ownership.
    taken = (
        _store.hand_over(instance.id, reservation, owner)
        if reservation.startswith("res:")
        else None
    )
    if taken is None:
        raise VNextError(
            Codes.INSTANCE_BUSY,
            "the instance is not reserved for this claim",
            instance_id=str(instance.id),
        )
    request = _request(transition, payload, body, info)
    execution = engine().execute(definition, taken, request, owner=owner, reserved=True)
    return InstanceOutcome(execution.instance, created=False, execution=execution)


def instance_long_poll_ack(
    *, domain: str, workflow: str, ref: str, info: RequestInfo
) -> InstanceOutcome:
    """The client rendered the state its long-poll stopped at (`interaction.longPoll.terminate`):
    the paused run goes on (step 79 on: automatic transitions, timers). The instance's Busy moves
    from the pause to this run by compare-and-set, so of two acks (or an ack and the fallback)
    one continues it and the other gets 409 `Instance:NoAckPending`."""
    instance = instance_snapshot(domain=domain, workflow=workflow, ref=ref)
    paused_by = instance.busy_owner
    refused = VNextError(
        Codes.NO_ACK_PENDING,
        f"instance is not paused for a long-poll acknowledgement (status {instance.status})",
        instance_id=str(instance.id),
    )
    if instance.status != InstanceStatus.BUSY or not paused_by.startswith(LONG_POLL_OWNER_PREFIX):
        raise refused
    definition = workflow_definition(domain, instance.workflow_key, instance.workflow_version)
    if not may_acknowledge(definition, instance, info):
        raise VNextError(
            Codes.AUTHORIZATION_DENIED,
            f"your roles may not acknowledge the long-poll of state {instance.current_state!r}",
            instance_id=str(instance.id),
        )
    owner = f"ack:{uuid.uuid4().hex}"
    taken = _store.hand_over(instance.id, paused_by, owner)
    if taken is None:
        raise refused
    Job.objects.filter(
        instance_id=instance.id,
        kind=JobKind.LONG_POLL_FALLBACK,
        status=JobStatus.PENDING,
        payload__token=paused_by.removeprefix(LONG_POLL_OWNER_PREFIX),
    ).update(status=JobStatus.CANCELLED, updated_at=timezone.now())
    request = long_poll_continue_request(definition, taken.current_state, actor=info.actor)
    execution = engine().execute(definition, taken, request, owner=owner, reserved=True)
    return InstanceOutcome(execution.instance, created=False, execution=execution)


def may_acknowledge(
    definition: WorkflowDefinition, instance: InstanceSnapshot, info: RequestInfo
) -> bool:
    """The caller's roles pass the current state's `interaction.longPoll.roles`."""
    state = definition.states.get(instance.current_state)
    long_poll = state.long_poll if state is not None else None
    roles = info.roles_on(instance)
    return long_poll is None or roles is None or allowed(long_poll.get("roles"), roles)


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


def instance_subprocess_start(
    *,
    domain: str,
    workflow: str,
    body: Any,
    info: RequestInfo,
    version: str | None,
    parent_id: uuid.UUID,
    parent_state: str,
) -> InstanceOutcome:
    """Start a SubProcess (type P) child of `parent_id`, fire-and-forget: the child row, its
    start job and the `P` correlation in one transaction; the parent does not wait for it."""
    with transaction.atomic():
        outcome = instance_start_accept(
            domain=domain, workflow=workflow, body=body, info=info, version=version
        )
        if outcome.created:
            correlation = Correlation.objects.create(
                parent_id=parent_id,
                parent_state=parent_state,
                child_id=outcome.instance.id,
                type=Correlation.Type.SUBPROCESS,
            )
            Instance.objects.filter(pk=outcome.instance.id).update(parent_correlation=correlation)
    return outcome


def instance_transition_accept(
    *,
    domain: str,
    workflow: str,
    ref: str,
    transition_key: str,
    body: Any,
    info: RequestInfo,
    addressed: InstanceSnapshot | None = None,
    trigger: Trigger = Trigger.MANUAL,
) -> InstanceOutcome:
    """`sync=false` transition: admission now (409 when Busy), the pipeline in a job.

    The admission CAS and the job row commit together; cancel/exit take Busy over, updateData
    takes no lock at all. `trigger=Trigger.EVENT` delivers an event to an event transition."""
    if addressed is None:
        addressed = instance_snapshot(domain=domain, workflow=workflow, ref=ref)
    instance, definition, transition, payload = _admissible(
        addressed, transition_key, body, info, trigger=trigger
    )
    reservation = f"res:{uuid.uuid4().hex}"
    job_payload = _job_payload(
        definition,
        transition,
        payload,
        body,
        info,
        fromState=instance.current_state,
        reservation=reservation,
    )
    if trigger == Trigger.EVENT:
        job_payload["trigger"] = int(Trigger.EVENT)
    forwarded = instance.id != addressed.id
    if forwarded:
        # Chain reserve (seed 000): the ancestors are Busy for their correlations already; the
        # leaf is reserved for this job before the 202, and the job claims exactly that.
        job_payload["chainReserved"] = str(addressed.id)
    if transition.is_update_data:
        # No lock, no duplicate guard: a ticket in the instance's write lane (seed 000).
        job_payload["lockFree"] = True
        with transaction.atomic():
            lane_ticket(instance_id=instance.id, payload=job_payload)
        return InstanceOutcome(instance, created=False)
    if not forwarded and transition.kind not in BUSY_EXEMPT and waiting_child(instance):
        # The parent's own `$self` shared transition while its SubFlow child runs: a job runs
        # it under the Busy the correlation holds and hands it back, as the sync path does.
        del job_payload["reservation"]
        job_payload["waitingParent"] = True
        with transaction.atomic():
            job_enqueue(kind=JobKind.TRANSITION, instance_id=instance.id, payload=job_payload)
        return InstanceOutcome(instance, created=False)
    statuses: list[str] = [InstanceStatus.ACTIVE]
    if transition.kind in BUSY_EXEMPT:
        statuses += [InstanceStatus.BUSY, InstanceStatus.FAULTED]
    if not _store.reserve_with_job(instance.id, statuses, reservation, job_payload):
        current = _store.status_of(instance.id)
        refusals: dict[str, ErrorCode] = {
            InstanceStatus.FAULTED: Codes.INSTANCE_FAULTED,
            InstanceStatus.COMPLETED: Codes.INSTANCE_COMPLETED,
            InstanceStatus.PASSIVE: Codes.INSTANCE_PASSIVE,
        }
        raise VNextError(
            refusals.get(str(current), Codes.INSTANCE_BUSY),
            "the instance cannot accept this transition now",
            instance_id=str(instance.id),
        )
    if forwarded:
        return InstanceOutcome(addressed, created=False, addressed=addressed.id)
    instance.status = InstanceStatus.BUSY
    return InstanceOutcome(instance, created=False)


def is_update_data(addressed: InstanceSnapshot, transition_key: str) -> bool:
    """Whether `transition_key` names the updateData transition of the instance's workflow."""
    definition = engine().components.workflow(
        addressed.domain, addressed.workflow_key, addressed.workflow_version
    )
    if definition is None:
        return False
    transition = definition.transition_for(
        addressed.current_state, transition_key
    ) or definition.find_any(transition_key)
    return transition is not None and transition.is_update_data


def _admissible(
    addressed: InstanceSnapshot,
    transition_key: str,
    body: Any,
    info: RequestInfo,
    *,
    trigger: Trigger = Trigger.MANUAL,
) -> tuple[InstanceSnapshot, WorkflowDefinition, TransitionDef, Payload]:
    """The instance the transition runs on (the addressed one, or its active subflow leaf when
    it is forwarded), its definition, the client transition and the checked payload, or the
    error a client gets before anything is written (404, 400)."""
    if addressed.status == InstanceStatus.COMPLETED:
        raise VNextError(
            Codes.INSTANCE_COMPLETED,
            f"instance is completed (state {addressed.current_state})",
            instance_id=str(addressed.id),
        )
    definition = workflow_definition(
        addressed.domain, addressed.workflow_key, addressed.workflow_version
    )
    instance, definition = _forwarded(addressed, definition, transition_key)
    transition = _client_transition(definition, instance, transition_key, trigger)
    _check_transition_roles(definition, transition, instance.current_state, instance, info)
    return instance, definition, transition, _checked_payload(definition, transition, body, info)


def _check_transition_roles(
    definition: WorkflowDefinition,
    transition: TransitionDef,
    state: str,
    instance: InstanceSnapshot | None,
    info: RequestInfo,
) -> None:
    """403 `Transition:100010` when the caller's roles do not allow `transition` in `state`
    (its `roles` and its `availableIn` entry's, or what the parent's SubFlow state overrides
    them with; `$InstanceStarter`, `$PreviousUser`)."""
    overrides = instance.overrides if instance is not None else NO_OVERRIDES
    if not any(transition.role_lists(state, overrides)):
        return
    roles = info.roles_on(instance)
    if roles is None or transition.allows(state, roles, overrides):
        return
    raise VNextError(
        Codes.TRANSITION_FORBIDDEN,
        f"your roles do not allow transition {transition.key!r}"
        + (f" in state {state!r}" if state else ""),
        instance_id=str(instance.id) if instance is not None else None,
    )


def _forwarded(
    instance: InstanceSnapshot, definition: WorkflowDefinition, key: str
) -> tuple[InstanceSnapshot, WorkflowDefinition]:
    """Follow step 10 down the chain: the deepest active subflow the transition goes to."""
    for _ in range(MAX_CHAIN_DEPTH):
        child_id = forward_target(definition, instance, key)
        if child_id is None:
            return instance, definition
        child = _store.load(child_id)
        if child is None or child.status == InstanceStatus.COMPLETED:
            raise VNextError(
                Codes.INSTANCE_BUSY,
                "the instance is resuming from its ended subflow; send the transition again",
                instance_id=str(instance.id),
            )
        instance = child
        definition = workflow_definition(child.domain, child.workflow_key, child.workflow_version)
    return instance, definition


def _client_transition(
    definition: WorkflowDefinition,
    instance: InstanceSnapshot,
    key: str,
    trigger: Trigger = Trigger.MANUAL,
) -> TransitionDef:
    transition = definition.transition_for(instance.current_state, key)
    if transition is None:
        if definition.find_any(key) is None:
            raise VNextError(
                Codes.TRANSITION_NOT_FOUND,
                f"workflow {definition.key} has no transition {key!r}",
                instance_id=str(instance.id),
            )
        raise VNextError(
            Codes.TRANSITION_NOT_AVAILABLE,
            f"transition {key!r} is not available in state {instance.current_state!r}",
            instance_id=str(instance.id),
        )
    if trigger == Trigger.EVENT:
        # An event fires a triggerType 3 transition, or a manual one that also has an `event`.
        if transition.trigger_type != Trigger.EVENT and not isinstance(
            transition.raw.get("event"), dict
        ):
            raise VNextError(
                Codes.NOT_AN_EVENT_TRANSITION,
                f"transition {key!r} is not an event transition (triggerType 3)",
                instance_id=str(instance.id),
            )
        return transition
    if transition.trigger_type == Trigger.EVENT:
        raise VNextError(
            Codes.NOT_AN_EVENT_TRANSITION,
            f"transition {key!r} is triggered by events only",
            instance_id=str(instance.id),
        )
    if transition.trigger_type != Trigger.MANUAL or transition.kind == TransitionKind.START:
        raise VNextError(
            Codes.TRANSITION_NOT_AVAILABLE,
            f"transition {key!r} is not triggered by clients (triggerType "
            f"{transition.trigger_type})",
            instance_id=str(instance.id),
        )
    return transition


def _request(
    transition: TransitionDef, payload: Payload, body: Any, info: RequestInfo
) -> TransitionRequest:
    return TransitionRequest(
        transition=transition,
        trigger=Trigger.MANUAL,
        attributes=payload.attributes,
        body=body,
        # Scripts see the caller's headers but never its credentials (as jobs never store them).
        headers=header_deny_list().strip(info.headers),
        query=dict(info.query or {}),
        actor=info.actor,
        stage=payload.stage,
    )


def instance_snapshot(*, domain: str, workflow: str, ref: str) -> InstanceSnapshot:
    """The instance `ref` (UUID or business key) of a workflow, 410 `Instance:Archived` when
    it was archived (the error block says where it went), or 404 `Instance:100017`."""
    found = _store.find(domain, workflow, ref)
    if found is None:
        tombstone = archived_instance(domain, workflow, ref)
        if tombstone is not None:
            raise VNextError(
                Codes.INSTANCE_ARCHIVED,
                f"instance {ref!r} of {domain}/{workflow} was archived on "
                f"{tombstone.archived_at:%Y-%m-%d} after its retention; an operator can restore "
                f"it with manage.py instances_restore {tombstone.instance_id}",
                instance_id=str(tombstone.instance_id),
                extra={
                    "archive": {
                        "archivedAt": tombstone.archived_at.isoformat(),
                        "completedAt": (
                            tombstone.completed_at.isoformat() if tombstone.completed_at else None
                        ),
                        "location": tombstone.location,
                    }
                },
            )
        raise VNextError(
            Codes.INSTANCE_NOT_FOUND, f"workflow {domain}/{workflow} has no instance {ref!r}"
        )
    return found


# --- Operators' tools: the admin actions and `instances_retry` call these, nothing else ---------

RETRIED, FAULTED_AGAIN, REFUSED, SKIPPED = "retried", "faulted again", "refused", "skipped"
CANCELLED, RESOLVED = "cancelled", "resolved"
RESOLVED_BY_OPERATOR = "resolved by operator"


@dataclass(frozen=True)
class RetryPlan:
    """What a retry of `instance` would do: the transition and step it re-runs (None: nothing
    to re-run) and the open incident it resolves (None: no open one)."""

    instance: Instance
    fault: FaultToRetry | None
    incident: Incident | None

    @property
    def faulted(self) -> bool:
        """Only a Faulted instance is retried; the others are skipped."""
        return self.instance.status == InstanceStatus.FAULTED

    @property
    def reruns(self) -> str:
        """`transition (from state) from STEP`, for confirmation pages and --dry-run."""
        if self.fault is None:
            return "nothing to re-run"
        origin = f" from state {self.fault.from_state}" if self.fault.from_state else ""
        return f"{self.fault.transition_key}{origin} at step {self.fault.step or 'the start'}"


@dataclass(frozen=True)
class OperatorResult:
    """How one operator action on one instance ended: `retried`, `faulted again`, `refused`,
    `skipped`, `cancelled` or `resolved`; `detail` says the new status, the code or why."""

    instance_id: uuid.UUID
    outcome: str
    detail: str = ""

    @property
    def failed(self) -> bool:
        """Faulted again or refused (a skipped instance was never meant to run)."""
        return self.outcome in (FAULTED_AGAIN, REFUSED)

    def __str__(self) -> str:
        return f"{self.instance_id}: {self.outcome}" + (f" ({self.detail})" if self.detail else "")


def operator_action_record(
    *,
    actor: str,
    action: str,
    instance_id: uuid.UUID | None,
    target: str = "",
    outcome: str = "",
) -> OperatorAction:
    """One audit row for an operator's action; an instance that does not exist (any more) is
    recorded by the target text only."""
    if instance_id is not None and not Instance.objects.filter(pk=instance_id).exists():
        target = f"{target} (instance {instance_id})".strip()
        instance_id = None
    return OperatorAction.objects.create(
        actor=actor,
        action=action,
        instance_id=instance_id,
        target=target[:200],
        outcome=outcome,
    )


def retry_plan(*, instance: Instance) -> RetryPlan:
    """What `operator_retry` would re-run for `instance` (read-only)."""
    fault = None
    if instance.status == InstanceStatus.FAULTED:
        fault = _store.fault_to_retry(snapshot_of(instance))
    incident = (
        Incident.objects.filter(instance_id=instance.id, resolved=False)
        .order_by("-created_at")
        .first()
    )
    return RetryPlan(instance, fault, incident)


def operator_retry(*, instance: Instance, actor: str) -> OperatorResult:
    """Retry one instance for an operator through `instance_retry` (no correction), and audit
    it: retried (the new status), faulted again (the code), refused (why); an instance that is
    not faulted is skipped and not audited."""
    if instance.status != InstanceStatus.FAULTED:
        return OperatorResult(instance.id, SKIPPED, "not faulted")
    plan = retry_plan(instance=instance)
    try:
        outcome = instance_retry(
            domain=instance.domain,
            workflow=instance.workflow_key,
            ref=str(instance.id),
            body={},
            info=RequestInfo(actor=actor),
        )
        detail = f"status {outcome.instance.status}"
        due = outcome.execution.awaiting_retry if outcome.execution else None
        if due is not None:
            # Its error boundary retries a task again later: a job runs it when due.
            detail += f", error-boundary retry due {due:%Y-%m-%d %H:%M:%S} UTC"
        result = OperatorResult(instance.id, RETRIED, detail)
    except (PipelineFault, PipelineSuperseded, VNextError) as failure:
        result = _failed(instance, failure)
    return _audited(result, actor, OperatorAction.Action.RETRY, plan.reruns)


def operator_cancel(*, instance: Instance, actor: str, reason: str) -> OperatorResult:
    """Cancel one instance for an operator: its workflow's cancel transition with body
    `{"reason": reason}` (which closes its open incidents); refused when the workflow defines
    no cancel or the instance cannot take it. Audited with the reason."""
    try:
        definition = workflow_definition(
            instance.domain, instance.workflow_key, instance.workflow_version
        )
        if definition.cancel is None:
            raise VNextError(
                Codes.TRANSITION_NOT_FOUND,
                f"workflow {definition.key} defines no cancel transition",
                instance_id=str(instance.id),
            )
        outcome = instance_transition(
            domain=instance.domain,
            workflow=instance.workflow_key,
            ref=str(instance.id),
            transition_key=definition.cancel.key,
            body={"reason": reason},
            info=RequestInfo(actor=actor),
        )
        result = OperatorResult(
            instance.id,
            CANCELLED,
            f"status {outcome.instance.status}, state {outcome.instance.current_state}",
        )
    except (PipelineFault, PipelineSuperseded, VNextError) as failure:
        result = _failed(instance, failure)
    target = f"reason: {reason}" if reason else "no reason given"
    return _audited(result, actor, OperatorAction.Action.CANCEL, target)


def _failed(
    instance: Instance, failure: PipelineFault | PipelineSuperseded | VNextError
) -> OperatorResult:
    # A run that faulted the instance again, one another run took over, or a request refused
    # before anything ran.
    if isinstance(failure, PipelineFault):
        return OperatorResult(instance.id, FAULTED_AGAIN, failure.code)
    if isinstance(failure, PipelineSuperseded):
        return OperatorResult(instance.id, REFUSED, f"{failure.code}: {failure.message}")
    return OperatorResult(instance.id, REFUSED, f"{failure.code}: {failure.detail}")


def _audited(result: OperatorResult, actor: str, action: str, target: str) -> OperatorResult:
    operator_action_record(
        actor=actor,
        action=action,
        instance_id=result.instance_id,
        target=target,
        outcome=str(result.outcome) + (f" ({result.detail})" if result.detail else ""),
    )
    return result


def incident_resolve(*, instance: Instance, actor: str) -> OperatorResult:
    """An operator repaired the cause outside and closes the instance's open incidents without a
    retry: resolution `resolved by operator`, who and when. The instance status does not change
    (a Faulted one stays Faulted until retried or cancelled). Skipped when nothing is open;
    audited otherwise."""
    open_incidents = Incident.objects.filter(instance_id=instance.id, resolved=False)
    codes = sorted(set(open_incidents.values_list("error_code", flat=True)))
    count = open_incidents.update(
        resolved=True,
        resolved_at=timezone.now(),
        resolution=RESOLVED_BY_OPERATOR,
        resolved_by=actor,
    )
    if not count:
        return OperatorResult(instance.id, SKIPPED, "no open incident")
    result = OperatorResult(instance.id, RESOLVED, f"{count} incident(s); status unchanged")
    operator_action_record(
        actor=actor,
        action=OperatorAction.Action.RESOLVE,
        instance_id=instance.id,
        target=", ".join(codes),
        outcome=f"{result.outcome} ({result.detail})",
    )
    return result


# --- output mapping (seed 001 "Output Mapping") ---------------------------------------------------

# Headers an output mapping may not set: the server frames the answer and owns its cookies.
_FRAMING_HEADERS = frozenset(
    {"content-length", "transfer-encoding", "connection", "content-type", "set-cookie"}
)
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")


@dataclass(frozen=True)
class ShapedAnswer:
    """What a workflow's output mapping made of a sync answer."""

    status: int
    headers: dict[str, str]
    body: Any


def output_answer(
    instance: InstanceSnapshot, standard: dict[str, Any], *, transition_key: str = ""
) -> ShapedAnswer | None:
    """The workflow's `attributes.output` applied to a sync start or transition answer: its
    handler gets the standard envelope as `context.body` and returns the body (a plain value,
    200) or a `ScriptResponse(data=..., status_code=..., headers=...)`. None — the standard
    answer stands — when the workflow has no output mapping, the instance is a SubFlow child
    (the parent/child model relies on the standard answer), or the script failed (logged: an
    output mapping never breaks the request)."""
    definition = workflow_definition(
        instance.domain, instance.workflow_key, instance.workflow_version
    )
    node = definition.attributes.get("output")
    if not isinstance(node, dict) or not node.get("code"):
        return None
    if (
        instance.parent_correlation_id is not None
        and Correlation.objects.filter(
            pk=instance.parent_correlation_id, type=Correlation.Type.SUBFLOW
        ).exists()
    ):
        return None
    scripts = engine().scripts
    try:
        handle = scripts.load(node, definition)
        name = "output_handler" if handle.has("output_handler") else "handler"
        context = script_context(
            instance,
            transition_key=transition_key,
            body=standard,
            configuration=engine().config.script_configuration,
        )
        returned = handle.call(name, context)
        return _shaped(returned)
    except (ScriptError, VNextError, ValueError) as exc:
        logger.warning(
            "output mapping of %s %s failed, the standard answer is sent: %s",
            instance.workflow_key,
            instance.id,
            exc,
        )
        return None


def _shaped(returned: Any) -> ShapedAnswer:
    if not isinstance(returned, ScriptResponse):
        return ShapedAnswer(200, {}, returned)
    status = returned.status_code if returned.status_code is not None else 200
    if not isinstance(status, int) or isinstance(status, bool) or not 200 <= status <= 599:
        raise ValueError(f"status_code {status!r} is not an HTTP status from 200 to 599")
    headers: dict[str, str] = {}
    for name, value in (returned.headers or {}).items():
        text = str(value)
        if not _HEADER_NAME.match(str(name)) or "\r" in text or "\n" in text:
            raise ValueError(f"header {name!r} is not a valid HTTP header")
        if str(name).lower() in _FRAMING_HEADERS:
            raise ValueError(f"header {name!r} is set by the server, not by an output mapping")
        headers[str(name)] = text
    return ShapedAnswer(status, headers, returned.data)


def shaped_answer(returned: Any) -> ShapedAnswer:
    """A script's answer as an HTTP answer (an output mapping's, a raw custom function's): a
    plain value is a 200 body; a `ScriptResponse` gives its status (200-599) and headers (no
    framing ones). ValueError when they are unusable."""
    return _shaped(returned)
