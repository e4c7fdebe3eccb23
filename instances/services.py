"""Instance writes: start an instance (now or as a job), run or accept a transition, retry a
Faulted instance, the subflow relay, the long-poll acknowledgement, a SubProcess start. Views,
jobs, events and the operators' actions call these; these call the engine with the ORM store."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from django.db import transaction
from django.utils import timezone

from instances.archive import archived_instance_get
from instances.engine.definition import (
    TransitionDef,
    TransitionKind,
    WorkflowDefinition,
    schema_reference,
)
from instances.engine.errors import Codes, ErrorCode, VNextError
from instances.engine.execution import MAX_CHAIN_DEPTH, Execution
from instances.engine.outcomes import (
    BUSY_EXEMPT,
    ForwardToSubflow,
)
from instances.engine.overrides import NO_OVERRIDES
from instances.engine.payload import Payload, split_payload, validate_attributes
from instances.engine.ports import BusinessKeyTaken, DefinitionSuperseded
from instances.engine.records import (
    LONG_POLL_OWNER_PREFIX,
    Guard,
    GuardKind,
    InstanceSnapshot,
    PendingWrites,
    waiting_child,
)
from instances.engine.roles import INSTANCE_STARTER, Caller, allowed
from instances.engine.subflows import forward_target
from instances.field_encryption import protection_of, seal_request
from instances.job_payloads import RetryJob, TransitionJob
from instances.orm_store import OrmStore, subprocess_correlation_create
from instances.queue import job_enqueue, lane_ticket, long_poll_fallback_cancel
from instances.run_requests import long_poll_continue_request, retry_request, transition_request
from instances.status import InstanceStatus, JobKind, Trigger
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


def transition_payload_check(
    *, definition: WorkflowDefinition, transition: TransitionDef, body: Any, info: RequestInfo
) -> Payload:
    """A request body for `transition`, split and checked against its schema as the API checks
    it (400 `App:900002`, a violation with its pointer each)."""
    return _checked_payload(definition, transition, body, info)


def instance_start(
    *,
    domain: str,
    workflow: str,
    body: Any,
    info: RequestInfo,
    version: str | None = None,
    sync: bool = True,
) -> InstanceOutcome:
    """Start an instance; with a business key a live instance already has, return that one.

    `sync=False` (`?sync=false`): validate, then in one transaction insert the instance (Busy,
    reserved for its job) and the job that runs the start pipeline; answer right away.

    Without a `version` the start takes the newest this process knows; its INSERT checks no
    newer one was published meanwhile, else the start runs again on the newer one."""
    for _ in range(_SUPERSEDED_RETRIES):
        try:
            return _instance_start(
                domain=domain, workflow=workflow, body=body, info=info, version=version, sync=sync
            )
        except DefinitionSuperseded:
            continue  # the store forgot the superseded version: the next run looks it up
    raise VNextError(
        Codes.INSTANCE_BUSY, f"workflow {domain}/{workflow} was published again while starting"
    )


# A start on the newest version runs again when a newer one is published meanwhile: at most
# this often (each publish is one more run; more than this in a start's lifetime is a storm).
_SUPERSEDED_RETRIES = 3


def _instance_start(
    *,
    domain: str,
    workflow: str,
    body: Any,
    info: RequestInfo,
    version: str | None,
    sync: bool,
) -> InstanceOutcome:
    definition = workflow_definition(domain, workflow, version)
    _check_transition_roles(definition, definition.start, "", None, info)
    payload = _checked_payload(definition, definition.start, body, info)
    if payload.key:
        existing = _store.live_by_key(domain, workflow, payload.key)
        if existing is not None:
            return InstanceOutcome(existing, created=False)
    initial = definition.initial_state.key
    snapshot = InstanceSnapshot(
        id=uuid.uuid4(),
        domain=domain,
        workflow_key=definition.key,
        workflow_version=definition.version,
        current_state=initial,
        effective_state=initial,
        key=payload.key,
        tags=payload.tags,
        stage=payload.stage,
        created_by=info.actor,
        modified_by=info.actor,
        created_at=timezone.now(),
    )
    call = _call(definition.start, payload, body, info)
    try:
        if not sync:
            reservation = f"res:{uuid.uuid4().hex}"
            job = replace(call, start=True, reservation=reservation)
            created = _store.create_reserved(
                snapshot, reservation, _job_json(definition, job), on_newest=version is None
            )
            return InstanceOutcome(created, created=True)
        execution = engine().execute(
            definition,
            snapshot,
            transition_request(definition.start, call),
            is_new=True,
            on_newest=version is None,
        )
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
    definition, transition = _named_transition(addressed, transition_key)
    if definition is None:
        return requested, addressed
    return definition.runs_sync(transition, requested), addressed


def _named_transition(
    addressed: InstanceSnapshot, key: str
) -> tuple[WorkflowDefinition | None, TransitionDef | None]:
    # The instance's pinned definition (None: no longer published) and the transition `key`
    # names there: in its current state, else anywhere in the workflow.
    definition = engine().components.workflow(
        addressed.domain, addressed.workflow_key, addressed.workflow_version
    )
    if definition is None:
        return None, None
    found = definition.transition_for(addressed.current_state, key) or definition.find_any(key)
    return definition, found


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
        request = transition_request(transition, _call(transition, payload, body, info))
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
            job = RetryJob(
                fault=fault,
                transition=request.transition.key,
                reservation=owner,
                actor=info.actor,
                headers=headers,
                query=request.query,
            )
            job_enqueue(kind=JobKind.TRANSITION, instance_id=instance.id, payload=job.to_json())
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


def _correction(body: Any) -> dict[str, Any]:
    # `{"attributes": {...}}` or the attributes themselves; nothing else is data.
    if isinstance(body, dict) and isinstance(body.get("attributes"), dict):
        return dict(body["attributes"])
    if isinstance(body, dict) and "attributes" not in body:
        return dict(body)
    raise VNextError(Codes.APP_INVALID_REQUEST, "the correction must be a JSON object")


def _job_json(definition: WorkflowDefinition, job: TransitionJob) -> dict[str, Any]:
    # The accepted request as its job row holds it.
    built = job.to_json()
    if protection_of(definition, engine().components) is not None:
        # The workflow encrypts fields at rest: the request may carry them, so the job row
        # holds it sealed (the job handler opens it).
        return seal_request(built)
    return built


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
    request = transition_request(transition, _call(transition, payload, body, info))
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
    long_poll_fallback_cancel(
        instance_id=instance.id, token=paused_by.removeprefix(LONG_POLL_OWNER_PREFIX)
    )
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
        outcome = instance_start(
            domain=domain, workflow=workflow, body=body, info=info, version=version, sync=False
        )
        if outcome.created:
            subprocess_correlation_create(
                parent_id=parent_id, parent_state=parent_state, child_id=outcome.instance.id
            )
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
    forwarded = instance.id != addressed.id
    job = replace(
        _call(transition, payload, body, info),
        from_state=instance.current_state,
        reservation=f"res:{uuid.uuid4().hex}",
        trigger=int(Trigger.EVENT) if trigger == Trigger.EVENT else None,
        # Chain reserve (seed 000): the ancestors are Busy for their correlations already; the
        # leaf is reserved for this job before the 202, and the job claims exactly that.
        chain_reserved=str(addressed.id) if forwarded else None,
    )
    if transition.is_update_data:
        # No lock, no duplicate guard: a ticket in the instance's write lane (seed 000).
        ticket = replace(job, lock_free=True)
        with transaction.atomic():
            lane_ticket(instance_id=instance.id, payload=_job_json(definition, ticket))
        return InstanceOutcome(instance, created=False)
    if not forwarded and transition.kind not in BUSY_EXEMPT and waiting_child(instance):
        # The parent's own `$self` shared transition while its SubFlow child runs: a job runs
        # it under the Busy the correlation holds and hands it back, as the sync path does.
        waiting = replace(job, reservation=None, waiting_parent=True)
        with transaction.atomic():
            job_enqueue(
                kind=JobKind.TRANSITION,
                instance_id=instance.id,
                payload=_job_json(definition, waiting),
            )
        return InstanceOutcome(instance, created=False)
    statuses: list[str] = [InstanceStatus.ACTIVE]
    if transition.kind in BUSY_EXEMPT:
        statuses += [InstanceStatus.BUSY, InstanceStatus.FAULTED, InstanceStatus.PASSIVE]
    reservation = str(job.reservation)
    if not _store.reserve_with_job(instance.id, statuses, reservation, _job_json(definition, job)):
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
    transition = _named_transition(addressed, transition_key)[1]
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


def _call(
    transition: TransitionDef, payload: Payload, body: Any, info: RequestInfo
) -> TransitionJob:
    # What a client's start or transition carries, for a run now or for its job: scripts see
    # the caller's headers but never its credentials (which jobs never store either).
    return TransitionJob(
        transition=transition.key,
        attributes=payload.attributes,
        body=body,
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
        tombstone = archived_instance_get(domain=domain, workflow=workflow, ref=ref)
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
