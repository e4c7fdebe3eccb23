"""Event delivery (seed 001 "Event Transition", API.md 2): `POST .../instances/events` with
`?action=start` (the workflow's `event`) or `?action=transition&transitionKey=` (a transition
with `triggerType: 3` and its `event`).

The delivery is unwrapped (a CloudEvent in structured mode gives its `data` and `id`), its
event mapping runs in the script pool — `handler(context)` with the payload as
`context.event_payload` (and `context.body`) — and answers the instance key and the body:
`ScriptResponse(key=..., data=...)`, or a dict `{"key", "body"}`; instead of a key, `"filter"`
(a filter string in any form of the list API's query language, or a JSON filter object) selects
instances. The work then goes through the job table
(an accepted start, or per matched instance an accepted transition, or, when the instance is
Busy, an `event-transition` job that waits for it), so it runs at least once and no event is
dropped. The receipt (a `Job` row of kind `event`, unique per event id, workflow and action) is
inserted with that work in one transaction, so an event id seen before is acknowledged and
changes nothing, and an event that matched nothing leaves no receipt and stays redeliverable.
"""

from __future__ import annotations

import hashlib
import json
import random
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from instances.engine.definition import WorkflowDefinition
from instances.engine.errors import Codes, Violation, VNextError
from instances.engine.records import InstanceSnapshot
from instances.engine.script_runner import response_data, script_context
from instances.engine.scripts import ScriptError, ScriptResponse
from instances.field_encryption import open_request, protection_of, seal_request
from instances.filters import parse_filter
from instances.job_payloads import EventReceipt, EventTransitionJob
from instances.models import Instance
from instances.queue import job_claimed_payload_update, job_enqueue, job_event_receipt_create
from instances.services import (
    RequestInfo,
    instance_start,
    instance_transition_accept,
    workflow_definition,
)
from instances.snapshots import sealed_paths
from instances.status import InstanceStatus, JobKind, Trigger
from instances.wiring import engine

if TYPE_CHECKING:
    from instances.job_table import Job

_NO_INSTANCE = uuid.UUID(int=0)
# How many instances one event may move (a filter that selects more is refused).
MAX_MATCHED = 100
ACTIONS = ("start", "transition")


@dataclass(frozen=True)
class Delivery:
    """An event as delivered: its id and its payload."""

    event_id: str
    payload: Any


@dataclass
class EventOutcome:
    """What an event did: the instances it started or moved (accepted as jobs)."""

    event_id: str
    matched: int = 0
    instances: list[str] = field(default_factory=list)
    duplicate: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The answer's body."""
        return {
            "eventId": self.event_id,
            "matched": self.matched,
            "instances": self.instances,
            "duplicate": self.duplicate,
        }


def unwrap(body: Any, headers: dict[str, str]) -> Delivery:
    """A CloudEvent (structured: `specversion`, `id`, `data`) gives its `data` and `id`; another
    body is the payload itself, its id from `ce-id` (binary CloudEvents) or `x-event-id`, else
    the payload's content hash (an identical redelivery is the same event)."""
    if isinstance(body, dict) and "specversion" in body and "id" in body:
        return Delivery(str(body["id"]), body.get("data"))
    event_id = headers.get("ce-id") or headers.get("x-event-id") or ""
    if not event_id:
        text = json.dumps(body, sort_keys=True, default=str).encode()
        event_id = "sha256:" + hashlib.sha256(text).hexdigest()
    return Delivery(str(event_id), body)


def event_deliver(
    *,
    domain: str,
    workflow: str,
    action: str,
    transition_key: str | None,
    body: Any,
    headers: dict[str, str],
    info: RequestInfo,
) -> EventOutcome:
    """Deliver one event: start an instance, or run an event transition on the instances its
    mapping selects (0 of them is a normal answer). A redelivered event changes nothing."""
    if action not in ACTIONS:
        raise VNextError(
            Codes.APP_INVALID_QUERY,
            "action is start or transition",
            [Violation("/action", "start or transition")],
        )
    definition = workflow_definition(domain, workflow)
    if not isinstance(body, dict):
        raise VNextError(
            Codes.APP_INVALID_REQUEST,
            "an event is a JSON object (or a CloudEvent)",
            [Violation("", f"expected an object, got {type(body).__name__}")],
        )
    delivery = unwrap(body, headers)
    mapping = _event_mapping(definition, workflow, action, transition_key)
    key, selector, data = _mapped(definition, mapping, delivery)
    receipt = f"event:{domain}:{workflow}:{action}:{transition_key or ''}:{delivery.event_id}"
    event_info = RequestInfo(actor=info.actor or "event", headers={}, query={})
    with transaction.atomic():
        # The receipt goes first: a concurrent delivery of the same id waits on its unique key
        # until this transaction ends, then finds it (duplicate) or, if this one matched
        # nothing and rolled back, does the work itself.
        if not _receipt_taken(receipt, delivery, action, workflow):
            return EventOutcome(delivery.event_id, duplicate=True)
        outcome = EventOutcome(delivery.event_id)
        if action == "start":
            started = instance_start(
                domain=domain,
                workflow=workflow,
                body={"key": key, "attributes": data} if key else {"attributes": data},
                info=event_info,
                sync=False,
            )
            # An idempotent start (the key exists) answers with that instance: receipted too.
            outcome.matched, outcome.instances = 1, [str(started.instance.id)]
            return outcome
        assert transition_key is not None
        for instance_id, version in _selected(domain, workflow, key, selector):
            accepted = _transition_accept(
                domain=domain,
                workflow=workflow,
                version=version,
                instance_id=instance_id,
                transition_key=transition_key,
                data=data,
                event_id=delivery.event_id,
                info=event_info,
            )
            if accepted:
                outcome.matched += 1
                outcome.instances.append(str(instance_id))
        if not outcome.matched:
            # Nothing took the event: no receipt either, so a redelivery is processed again.
            transaction.set_rollback(True)
    return outcome


def _event_mapping(
    definition: WorkflowDefinition, workflow: str, action: str, transition_key: str | None
) -> dict[str, Any]:
    """The event mapping that takes a `start` delivery (the workflow's `event`) or a
    `transition` one (the named transition's, an event transition); refused otherwise."""
    if action == "start":
        event = definition.attributes.get("event")
        what = "start"
    else:
        if not transition_key:
            raise VNextError(
                Codes.APP_INVALID_QUERY,
                "an event transition delivery names its transitionKey",
                [Violation("/transitionKey", "required with action=transition")],
            )
        transition = definition.find_any(transition_key)
        if transition is None:
            raise VNextError(
                Codes.TRANSITION_NOT_FOUND, f"workflow {workflow} has no {transition_key!r}"
            )
        event = transition.raw.get("event")
        if transition.trigger_type != Trigger.EVENT and not isinstance(event, dict):
            raise VNextError(
                Codes.NOT_AN_EVENT_TRANSITION,
                f"transition {transition_key!r} is not an event transition (triggerType 3)",
            )
        what = f"transition {transition_key}"
    mapping = event.get("mapping") if isinstance(event, dict) else None
    if not isinstance(mapping, dict) or not mapping.get("code"):
        raise VNextError(
            Codes.NOT_AN_EVENT_TRANSITION, f"workflow {workflow} takes no {what} event"
        )
    return mapping


def _receipt_taken(receipt: str, delivery: Delivery, action: str, workflow: str) -> bool:
    # False when another delivery of this event committed its receipt (with its work).
    try:
        job_event_receipt_create(
            dedupe_key=hashlib.sha256(receipt.encode()).hexdigest(),
            payload=EventReceipt(delivery.event_id, action, workflow).to_json(),
        )
    except IntegrityError:
        return False
    return True


def _transition_accept(
    *,
    domain: str,
    workflow: str,
    version: str,
    instance_id: uuid.UUID,
    transition_key: str,
    data: dict[str, Any],
    event_id: str,
    info: RequestInfo,
) -> bool:
    """Accept the event transition on one instance: as a transition job when the instance takes
    it now, as an `event-transition` job that waits when it is Busy in a state that takes it;
    False (not matched) when its state does not take it, or it is faulted, suspended or done."""
    try:
        with transaction.atomic():
            instance_transition_accept(
                domain=domain,
                workflow=workflow,
                ref=str(instance_id),
                transition_key=transition_key,
                body={"attributes": data},
                info=info,
                trigger=Trigger.EVENT,
            )
        return True
    except VNextError as refused:
        if refused.code != Codes.INSTANCE_BUSY.code:
            return False
    payload = EventTransitionJob(
        event_id=event_id,
        domain=domain,
        workflow=workflow,
        transition=transition_key,
        attributes=data,
        actor=info.actor,
    ).to_json()
    pinned = engine().components.workflow(domain, workflow, version)
    if pinned is not None and protection_of(pinned, engine().components) is not None:
        payload = seal_request(payload, instance_id=instance_id)  # as transition jobs are
    job_enqueue(kind=JobKind.EVENT_TRANSITION, instance_id=instance_id, payload=payload)
    return True


# --- the `event-transition` job: an event waiting for its Busy instance -----------------------

# A waiting event looks again after a quarter of the time the instance has been Busy, within
# these bounds (seconds): soon behind a short hop, rarely behind a long SubFlow wait.
WAIT_MIN_SECONDS = 0.2
WAIT_MAX_SECONDS = 30.0
# Set in the job's payload, in the transaction that admitted its transition.
_ADMITTED = "admitted"
ADMITTED, WAITING, REFUSED, LOST = "admitted", "waiting", "refused", "lost"


@dataclass(frozen=True)
class EventAdmission:
    """What an `event-transition` job's run did: `admitted` (the transition is accepted as a
    transition job), `waiting` (the instance is still Busy: look again after `delay`),
    `refused` (the instance no longer takes the event: `reason`) or `lost` (another claim of
    the job holds it now)."""

    outcome: str
    reason: str = ""
    delay: float = 0.0


class _ClaimLost(Exception):
    pass


def event_transition_admit(job: Job) -> EventAdmission:
    """Admit a waiting event's transition on its instance, as a client's async transition is
    admitted (the same checks, the Busy compare-and-set, the transition job), and mark the job
    admitted in the same transaction, fenced by its claim: a claim that finds the mark (its
    worker died before recording the job) admits nothing twice."""
    if event_job_admitted(job):
        return EventAdmission(ADMITTED, "admitted by an earlier claim")
    instance_id = job.instance_id
    if instance_id is None:
        return EventAdmission(REFUSED, "the job names no instance")
    waiting = EventTransitionJob.from_json(open_request(job.payload, instance_id=instance_id))
    try:
        with transaction.atomic():
            instance_transition_accept(
                domain=waiting.domain,
                workflow=waiting.workflow,
                ref=str(instance_id),
                transition_key=waiting.transition,
                body={"attributes": waiting.attributes},
                info=RequestInfo(actor=waiting.actor or "event", headers={}, query={}),
                trigger=Trigger.EVENT,
            )
            if not job_claimed_payload_update(job=job, payload={**job.payload, _ADMITTED: True}):
                raise _ClaimLost
    except _ClaimLost:
        return EventAdmission(LOST, "another claim holds this job now")
    except VNextError as refused:
        event = f"event {waiting.event_id!r}"
        if refused.code == Codes.INSTANCE_BUSY.code:
            return EventAdmission(
                WAITING, f"{event} waits: {refused.detail}", _wait_seconds(instance_id)
            )
        found = Instance.objects.filter(pk=instance_id).values_list("status", "current_state")
        status, state = found.first() or ("-", "-")
        return EventAdmission(
            REFUSED,
            f"{event} no longer applies (instance status {status}, state {state!r}): "
            f"{refused.code} {refused.detail}",
        )
    return EventAdmission(ADMITTED)


def event_job_admitted(job: Job) -> bool:
    """The `event-transition` job's transition was admitted (running it again changes nothing)."""
    return bool((job.payload or {}).get(_ADMITTED))


def _wait_seconds(instance_id: uuid.UUID) -> float:
    since = Instance.objects.filter(pk=instance_id).values_list("busy_since", flat=True).first()
    busy_for = (timezone.now() - since).total_seconds() if since else 0.0
    # Jitter spreads the events waiting for one instance, so they do not all look at once.
    wait = min(max(busy_for / 4, WAIT_MIN_SECONDS), WAIT_MAX_SECONDS)
    return wait * random.uniform(1.0, 1.5)


def _mapped(
    definition: Any, mapping: dict[str, Any], delivery: Delivery
) -> tuple[str | None, str | dict[str, Any] | None, dict[str, Any]]:
    # The event mapping's answer: (instance key, instance filter, body). No instance exists
    # yet for the mapping to see: `context.instance` names the workflow only.
    snapshot = InstanceSnapshot(
        id=_NO_INSTANCE,
        domain=definition.domain,
        workflow_key=definition.key,
        workflow_version=definition.version,
        current_state="",
    )
    context = script_context(
        snapshot,
        transition_key="",
        body=delivery.payload if isinstance(delivery.payload, dict) else {},
        event_payload=delivery.payload,
        configuration=engine().config.script_configuration,
    )
    try:
        returned = engine().scripts.call(mapping, definition, "handler", context)
    except ScriptError as exc:
        raise VNextError(Codes.SCRIPT_FAILED, f"the event mapping failed: {exc}") from exc
    if isinstance(returned, ScriptResponse):
        body = response_data(returned)
        return returned.key, None, body if isinstance(body, dict) else {}
    if isinstance(returned, dict):
        key, selector = returned.get("key"), returned.get("filter")
        body = returned.get("body")
        if selector and not isinstance(selector, str | dict):
            raise VNextError(
                Codes.SCRIPT_FAILED,
                "the event mapping's filter is a filter string or a JSON filter object",
            )
        return (
            str(key) if key else None,
            selector or None,
            body if isinstance(body, dict) else {},
        )
    raise VNextError(
        Codes.SCRIPT_FAILED,
        "the event mapping must return ScriptResponse(key=..., data=...) or "
        '{"key" or "filter", "body"}',
    )


def _selected(
    domain: str, workflow: str, key: str | None, selector: str | dict[str, Any] | None
) -> list[tuple[uuid.UUID, str]]:
    # The live instances an event transition goes to, with their pinned versions: the one with
    # `key`, or the filter's.
    live = Instance.objects.filter(domain=domain, workflow_key=workflow).exclude(
        status=InstanceStatus.COMPLETED
    )
    if key:
        return list(live.filter(key=key).values_list("id", "workflow_version")[:1])
    if selector:
        found = list(
            live.filter(parse_filter(selector, sealed=sealed_paths(domain, workflow))).values_list(
                "id", "workflow_version"
            )[: MAX_MATCHED + 1]
        )
        if len(found) > MAX_MATCHED:
            raise VNextError(
                Codes.APP_INVALID_REQUEST,
                f"the event's filter selects more than {MAX_MATCHED} instances",
            )
        return found
    return []
