"""Event delivery (seed 001 "Event Transition", API.md 2): `POST .../instances/events` with
`?action=start` (the workflow's `event`) or `?action=transition&transitionKey=` (a transition
with `triggerType: 3` and its `event`).

The delivery is unwrapped (a CloudEvent in structured mode gives its `data` and `id`), its
event mapping runs in the script pool — `handler(context)` with the payload as
`context.event_payload` (and `context.body`) — and answers the instance key and the body:
`ScriptResponse(key=..., data=...)`, or a dict `{"key", "body"}`; instead of a key, `"filter"`
(a filter string in any form of the list API's query language, or a JSON filter object) selects
instances. The work then goes through the job table
(an accepted start, or an accepted transition per matched instance), so it runs at least once;
an event id seen before for the same workflow and action is acknowledged and changes nothing
(the receipt is a `Job` row of kind `event`, inserted with the work in one transaction).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction

from instances.engine.errors import Codes, Violation, VNextError
from instances.engine.records import InstanceSnapshot
from instances.engine.script_runner import response_data, script_context
from instances.engine.scripts import ScriptError, ScriptResponse
from instances.filters import parse_filter
from instances.models import Instance, Job
from instances.orm_store import sealed_paths
from instances.services import (
    RequestInfo,
    instance_start_accept,
    instance_transition_accept,
    workflow_definition,
)
from instances.status import InstanceStatus, JobStatus, Trigger
from instances.wiring import engine

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
    key, selector, data = _mapped(definition, mapping, delivery)
    outcome = EventOutcome(delivery.event_id)
    receipt = f"event:{domain}:{workflow}:{action}:{transition_key or ''}:{delivery.event_id}"
    event_info = RequestInfo(actor=info.actor or "event", headers={}, query={})
    try:
        with transaction.atomic():
            Job.objects.create(
                kind="event",
                instance_id=None,
                status=JobStatus.SUCCEEDED,
                dedupe_key=hashlib.sha256(receipt.encode()).hexdigest(),
                payload={"eventId": delivery.event_id, "action": action, "workflow": workflow},
            )
            if action == "start":
                started = instance_start_accept(
                    domain=domain,
                    workflow=workflow,
                    body={"key": key, "attributes": data} if key else {"attributes": data},
                    info=event_info,
                )
                outcome.matched, outcome.instances = 1, [str(started.instance.id)]
                return outcome
            assert transition_key is not None
            for instance_id in _selected(domain, workflow, key, selector):
                try:
                    with transaction.atomic():
                        instance_transition_accept(
                            domain=domain,
                            workflow=workflow,
                            ref=str(instance_id),
                            transition_key=transition_key,
                            body={"attributes": data},
                            info=event_info,
                            trigger=Trigger.EVENT,
                        )
                except VNextError:
                    continue  # not in a state that takes it, or busy: not matched
                outcome.matched += 1
                outcome.instances.append(str(instance_id))
    except IntegrityError:
        return EventOutcome(delivery.event_id, duplicate=True)
    return outcome


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
) -> list[Any]:
    # The live instances an event transition goes to: the one with `key`, or the filter's.
    live = Instance.objects.filter(domain=domain, workflow_key=workflow).exclude(
        status=InstanceStatus.COMPLETED
    )
    if key:
        return list(live.filter(key=key).values_list("id", flat=True)[:1])
    if selector:
        found = list(
            live.filter(parse_filter(selector, sealed=sealed_paths(domain, workflow))).values_list(
                "id", flat=True
            )[: MAX_MATCHED + 1]
        )
        if len(found) > MAX_MATCHED:
            raise VNextError(
                Codes.APP_INVALID_REQUEST,
                f"the event's filter selects more than {MAX_MATCHED} instances",
            )
        return found
    return []
