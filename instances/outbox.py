"""Outbound instance events through an outbox (issue 34): the CloudEvents 1.0 a change of an
instance produces, written by the store in the transaction of that change, one row per event and
subscribed target (`OutboxEvent`), and published by the relay (`instances.outbox_relay`).

What a flush produces, in this order (`flush_events`):
- `io.vnext.instance.started`: the instance's row is inserted (a sync start's flush, an async
  start's reservation, a subflow child created by its parent's flush);
- `io.vnext.instance.state-entered`: per hop of the flush that entered a state (the engine lists
  them in `PendingWrites.states_entered`; an automatic chain may commit several hops at once);
- `io.vnext.instance.faulted` and one `incident-opened` per incident the flush writes;
- `io.vnext.instance.incident-resolved`: the flush closed open incidents (only when some were);
- `io.vnext.instance.completed`: the flush leaves the instance Completed.

Which workflows publish, and where, is settings alone (`VNEXT["OUTBOX_SUBSCRIPTIONS"]` and
`OUTBOX_TARGETS`, vnext/conf.py): the definition schema's `notifications` are per state, with a
mapping script and `additionalProperties: false`, so it has no field for a workflow's broker.

Cost: a workflow no subscription names writes nothing and runs no statement for it (the
subscription is looked up in settings, in memory). A subscribed workflow's flush that commits in
one statement (`PostgresSql.flush_in_one`) gets its events as one more part of that statement's
CTE; any other flush gets one multi-row INSERT.

Each event's `status` and `dataVersion` are the instance's as the commit that wrote it leaves
it (a chain committed at once: the same for each of its events).

Data: the events carry no instance data, only where the instance is (ids, key, state, status,
transition, data version) and, for incidents, the error code and step, never the message (a
message may quote a value; sealed fields, instances/field_encryption.py, are never published).
"""

from __future__ import annotations

import fnmatch
import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone

from instances.engine.records import Guard, GuardKind, InstanceSnapshot, PendingWrites
from instances.models import Instance, OutboxEvent
from instances.snapshots import snapshot_of
from instances.status import InstanceStatus, choices
from vnext.conf import vnext_setting

TYPE_PREFIX = "io.vnext.instance."
STARTED = "started"
STATE_ENTERED = "state-entered"
FAULTED = "faulted"
INCIDENT_OPENED = "incident-opened"
INCIDENT_RESOLVED = "incident-resolved"
COMPLETED = "completed"
KINDS = (STARTED, STATE_ENTERED, FAULTED, INCIDENT_OPENED, INCIDENT_RESOLVED, COMPLETED)
_STATUS_NAMES = {str(value): str(label) for value, label in choices(InstanceStatus)}


@dataclass(frozen=True)
class Subscription:
    """A workflow's events of `types` (kinds, full types or `*` patterns) go to `target`."""

    target: str
    types: tuple[str, ...] = ("*",)

    def wants(self, kind: str) -> bool:
        """True when this subscription takes events of `kind`."""
        return any(
            fnmatch.fnmatchcase(kind, pattern) or fnmatch.fnmatchcase(TYPE_PREFIX + kind, pattern)
            for pattern in self.types
        )


@dataclass(frozen=True)
class EventNote:
    """One event a flush produces, before it is a row per subscribed target."""

    kind: str
    state: str
    transition: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    # Written only when the flush closed some open incident (`incident-resolved`).
    when_incidents_resolved: bool = False


def subscriptions_for(domain: str, workflow: str) -> list[Subscription]:
    """The subscriptions of a workflow: `OUTBOX_SUBSCRIPTIONS` under `domain/workflow`, else
    `domain/*`, else `*` (the most specific key wins; an empty list turns a workflow off)."""
    table = vnext_setting("OUTBOX_SUBSCRIPTIONS") or {}
    if not table:
        return []
    for name in (f"{domain}/{workflow}", f"{domain}/*", "*"):
        if name in table:
            entries = table[name] or []
            if isinstance(entries, dict):
                entries = [entries]
            return [
                Subscription(str(entry["target"]), tuple(entry.get("types") or ("*",)))
                for entry in entries
            ]
    return []


def flush_events(
    snapshot: InstanceSnapshot, writes: PendingWrites, guard: Guard
) -> list[EventNote]:
    """The events a flush of `writes` on `snapshot` produces (none when its workflow has no
    subscription), in the order they happened."""
    if not subscriptions_for(snapshot.domain, snapshot.workflow_key):
        return []
    notes: list[EventNote] = []
    if guard.kind is GuardKind.INSERT:
        # The engine's copy runs ahead: a start whose chain commits with it is in its last state.
        entered = writes.states_entered[0][0] if writes.states_entered else snapshot.current_state
        notes.append(EventNote(STARTED, entered))
    for state, transition in writes.states_entered:
        notes.append(EventNote(STATE_ENTERED, state, transition))
    status = writes.instance_fields.get("status")
    if writes.incidents and status == InstanceStatus.FAULTED:
        first = writes.incidents[0]
        notes.append(
            EventNote(
                FAULTED,
                first.state or snapshot.current_state,
                first.transition_key,
                {"errorCode": first.error_code},
            )
        )
    for incident in writes.incidents:
        notes.append(
            EventNote(
                INCIDENT_OPENED,
                incident.state or snapshot.current_state,
                incident.transition_key,
                {
                    "errorCode": incident.error_code,
                    "step": incident.step,
                    "taskKey": incident.task_key,
                    "layer": incident.layer,
                },
            )
        )
    if writes.resolve_incidents is not None:
        resolution, resolved_by = writes.resolve_incidents
        notes.append(
            EventNote(
                INCIDENT_RESOLVED,
                snapshot.current_state,
                details={"resolution": resolution, "resolvedBy": resolved_by},
                when_incidents_resolved=True,
            )
        )
    if status == InstanceStatus.COMPLETED:
        notes.append(EventNote(COMPLETED, snapshot.current_state))
    return notes


def started_events(snapshot: InstanceSnapshot) -> list[EventNote]:
    """The `started` event of an instance inserted outside a flush (an async start's
    reservation, a subflow child): none when its workflow has no subscription."""
    if not subscriptions_for(snapshot.domain, snapshot.workflow_key):
        return []
    return [EventNote(STARTED, snapshot.current_state)]


def source_of(snapshot: InstanceSnapshot) -> str:
    """The CloudEvent `source` of an instance's events."""
    return f"/{snapshot.domain}/workflows/{snapshot.workflow_key}/instances/{snapshot.id}"


def _body(snapshot: InstanceSnapshot, note: EventNote, status: str) -> dict[str, Any]:
    return {
        "instanceId": str(snapshot.id),
        "domain": snapshot.domain,
        "workflow": snapshot.workflow_key,
        "workflowVersion": snapshot.workflow_version,
        "key": snapshot.key,
        "state": note.state,
        "status": _STATUS_NAMES.get(status, status),
        "transition": note.transition,
        **note.details,
    }


def _targets(snapshot: InstanceSnapshot, note: EventNote) -> list[str]:
    return [
        subscription.target
        for subscription in subscriptions_for(snapshot.domain, snapshot.workflow_key)
        if subscription.wants(note.kind)
    ]


def outbox_rows(
    snapshot: InstanceSnapshot,
    notes: list[EventNote],
    *,
    status: str,
    data_version: str,
    incidents_resolved: bool = True,
    now: datetime | None = None,
) -> list[OutboxEvent]:
    """The rows of `notes` for every subscribed target, for one `bulk_create` (the portable
    path): `status` and `data_version` are the instance's as the change commits it."""
    at = now or timezone.now()
    rows = []
    for note in notes:
        if note.when_incidents_resolved and not incidents_resolved:
            continue
        body = _body(snapshot, note, status) | {"dataVersion": data_version}
        for target in _targets(snapshot, note):
            rows.append(
                OutboxEvent(
                    instance_id=snapshot.id,
                    event_id=uuid.uuid4(),
                    type=TYPE_PREFIX + note.kind,
                    source=source_of(snapshot),
                    subject=note.state,
                    time=at,
                    data=body,
                    target=target,
                )
            )
    return rows


def outbox_write(rows: list[OutboxEvent]) -> None:
    """Insert the rows (one multi-row INSERT), in the caller's transaction."""
    if rows:
        OutboxEvent.objects.bulk_create(rows)


def outbox_cte_part(
    snapshot: InstanceSnapshot,
    notes: list[EventNote],
    params: dict[str, Any],
    *,
    status: str,
    source_cte: str = "updated",
    resolved_cte: str | None = None,
) -> str | None:
    """The rows of `notes` as a CTE part (`outbox AS (INSERT ... SELECT ... FROM updated)`) of
    the statement that writes the instance: written only when `source_cte` returns the
    instance (its guard held), with the data version it committed. An `incident-resolved`
    row only when `resolved_cte` (the incidents the statement closed) returned some. None when
    no subscribed target takes any of the events."""
    selects = []
    index = 0
    for note in notes:
        condition = ""
        if note.when_incidents_resolved:
            if resolved_cte is None:
                continue
            condition = f" WHERE EXISTS (SELECT 1 FROM {resolved_cte})"
        for target in _targets(snapshot, note):
            name = f"o{index}_"
            index += 1
            params.update(
                {
                    f"{name}event_id": uuid.uuid4(),
                    f"{name}type": TYPE_PREFIX + note.kind,
                    f"{name}source": source_of(snapshot),
                    f"{name}subject": note.state,
                    f"{name}data": json.dumps(_body(snapshot, note, status), cls=DjangoJSONEncoder),
                    f"{name}target": target,
                }
            )
            selects.append(
                f"SELECT s.id, %({name}event_id)s::uuid, %({name}type)s, %({name}source)s, "
                f"%({name}subject)s, %(now)s, %({name}data)s::jsonb || jsonb_build_object("
                "'dataVersion', s.data_version_major || '.' || s.data_version_minor || '.' || "
                f"s.data_version_patch), %({name}target)s FROM {source_cte} s{condition}"
            )
    if not selects:
        return None
    table = OutboxEvent._meta.db_table
    return (
        f"outbox AS (INSERT INTO {table} "
        "(instance_id, event_id, type, source, subject, time, data, target) "
        f"{' UNION ALL '.join(selects)})"
    )


def subscribed_instance_lock(instance_id: uuid.UUID) -> InstanceSnapshot | None:
    """The instance's row, locked for the caller's transaction, when its workflow subscribes to
    outbound events (else None, and nothing locked): taken before the change it reports, in the
    order a flush takes its locks (the instance, then its incidents), so its events keep the
    order the changes commit in."""
    if not vnext_setting("OUTBOX_SUBSCRIPTIONS"):
        return None
    names = Instance.objects.filter(pk=instance_id).values_list("domain", "workflow_key").first()
    if names is None or not subscriptions_for(*names):
        return None
    row = Instance.objects.select_for_update().filter(pk=instance_id).first()
    return snapshot_of(row) if row is not None else None


def incidents_resolved_events(
    snapshot: InstanceSnapshot, *, resolution: str, resolved_by: str
) -> list[OutboxEvent]:
    """The `incident-resolved` rows of an operator's resolve (incidents closed outside a
    flush) of the instance `subscribed_instance_lock` locked."""
    note = EventNote(
        INCIDENT_RESOLVED,
        snapshot.current_state,
        details={"resolution": resolution, "resolvedBy": resolved_by},
    )
    return outbox_rows(
        snapshot, [note], status=snapshot.status, data_version=snapshot.data_version_text
    )


# `pending_summary` counts a target's pending rows up to this many: a scrape reads at most
# this much of the pending index, however far behind a relay is.
PENDING_COUNT_CAP = 10_000


def _configured_targets() -> set[str]:
    names = set(vnext_setting("OUTBOX_TARGETS") or {})
    for entries in (vnext_setting("OUTBOX_SUBSCRIPTIONS") or {}).values():
        for entry in [entries] if isinstance(entries, dict) else entries or []:
            names.add(str(entry["target"]))
    return names


def pending_summary() -> list[tuple[str, int, datetime]]:
    """`(target, pending rows, time of the oldest)` per target settings name with pending rows
    (metrics): two short ranges of the pending index each, the count capped at
    `PENDING_COUNT_CAP`."""
    summary = []
    for target in sorted(_configured_targets()):
        pending = OutboxEvent.objects.filter(target=target, published_at__isnull=True)
        oldest = pending.order_by("id").values_list("time", flat=True).first()
        if oldest is None:
            continue
        summary.append((target, pending.order_by()[:PENDING_COUNT_CAP].count(), oldest))
    return summary
