"""The engine's ports on the Django ORM: the instance store, the component registry, and reads
of other instances.

A flush is one transaction: one guarded UPDATE of the instance (`... WHERE id = %s AND <guard>
RETURNING ...`; zero rows means the guard failed and nothing is written), then one INSERT per kind
of row. On PostgreSQL the data patch is merged inside that UPDATE (`vnext_jsonb_merge`), so
parallel updateData calls never lose each other's keys.

Fields the master schema encrypts at rest are sealed here, in the patch a flush writes (the
history bodies and task journal answers lose this instance's clear values), and opened here,
in every snapshot built from a row: the database never holds them in clear, the engine always
works on them in clear (instances/field_encryption.py).
"""

from __future__ import annotations

import functools
import json
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import DataError, IntegrityError, connection, connections, transaction
from django.db.models import Field, Q
from django.utils import timezone

from instances.changes import instance_changed
from instances.engine.definition import WorkflowDefinition
from instances.engine.ports import BusinessKeyTaken, DataChanged, StoreRefused, describe_taker
from instances.engine.protection import as_stored
from instances.engine.records import (
    ChildrenEnd,
    ChildStart,
    Guard,
    GuardKind,
    IncidentRow,
    InstanceSnapshot,
    PendingWrites,
    TaskRow,
    TransitionRow,
    bump_version,
    deep_merge,
    new_etag,
    stage_fault,
)
from instances.engine.telemetry import with_request_id
from instances.field_encryption import (
    FieldProtection,
    opened_snapshot,
    protection_of,
    seal_request,
    sealed_writes,
)
from instances.filters import parse_filter, parse_sort
from instances.models import (
    Correlation,
    Incident,
    Instance,
    InstanceDataVersion,
    InstanceTask,
    InstanceTransition,
    Job,
)
from instances.queue import job_enqueue, jobs_dispatch, jobs_reschedule, lane_waiting
from instances.status import (
    CorrelationStatus,
    InstanceStatus,
    JobKind,
    JobStatus,
    TransitionStatus,
)
from locks.models import ResourceLock
from workflows.documents import ComponentKind, ComponentRef
from workflows.models import Component, DomainReach

_INSTANCE_FIELDS = (
    "id",
    "domain",
    "workflow_key",
    "workflow_version",
    "key",
    "status",
    "current_state",
    "effective_state",
    "effective_state_type",
    "effective_state_subtype",
    "etag",
    "entity_etag",
    "state_version",
    "busy_owner",
    "busy_since",
    "tags",
    "stage",
    "extra",
    "created_by",
    "modified_by",
    "created_at",
    "updated_at",
    "completed_at",
    "parent_correlation_id",
)
_VERSION_COLUMNS = ("data_version_major", "data_version_minor", "data_version_patch")
_SNAPSHOT_COLUMNS = (*_INSTANCE_FIELDS, "data", *_VERSION_COLUMNS)
_SELECT_COLUMNS = ", ".join(_SNAPSHOT_COLUMNS)
TIMER_KINDS = ("timer", "timeout")
_TRANSITION_UPDATE_FIELDS = [
    "to_state",
    "status",
    "error_code",
    "error_message",
    "effective_state",
    "effective_state_type",
    "effective_state_subtype",
    "finished_at",
]


def _column(name: str) -> Field[Any, Any]:
    field = Instance._meta.get_field(name)
    assert isinstance(field, Field)
    return field


def snapshot_of(row: Instance) -> InstanceSnapshot:
    """The engine's view of an `Instance` row (its fields encrypted at rest opened)."""
    values = {name: getattr(row, name) for name in _INSTANCE_FIELDS}
    return opened(
        InstanceSnapshot(
            **values,
            data=row.data,
            data_version=(row.data_version_major, row.data_version_minor, row.data_version_patch),
        )
    )


def protection_for(domain: str, workflow: str, version: str) -> FieldProtection | None:
    """The fields a workflow version encrypts at rest, or None (also for an unknown one)."""
    definition = COMPONENTS.workflow(domain, workflow, version)
    return protection_of(definition, COMPONENTS) if definition is not None else None


def opened(snapshot: InstanceSnapshot) -> InstanceSnapshot:
    """`snapshot` with the sealed fields of its data opened (in place), their tokens kept in
    `snapshot.sealed`; `Encryption:KeyUnavailable` when the keys cannot open them."""
    snapshot.sealed = {}
    protection = protection_for(snapshot.domain, snapshot.workflow_key, snapshot.workflow_version)
    opened_snapshot(snapshot, protection)
    return snapshot


def stored_data(snapshot: InstanceSnapshot) -> Any:
    """`snapshot.data` as stored: what another instance is shown (a task's system read, a
    trigger task's answer) has its fields encrypted at rest as their tokens."""
    protection = protection_for(snapshot.domain, snapshot.workflow_key, snapshot.workflow_version)
    if protection is None:
        return snapshot.data
    return protection.stored(snapshot.data, snapshot.sealed)


@dataclass(frozen=True)
class FaultToRetry:
    """The faulted transition a retry re-runs and the step it resumes at (empty: from the
    start)."""

    transition_key: str
    from_state: str
    trigger: int
    step: str


class _GuardFailed(Exception):
    pass


class OrmStore:
    """`Store` on the Django ORM (PostgreSQL in production; SQLite for the embedded mode)."""

    def load(self, instance_id: uuid.UUID) -> InstanceSnapshot | None:
        """The instance, or None."""
        row = Instance.objects.filter(pk=instance_id).first()
        return snapshot_of(row) if row else None

    def find(self, domain: str, workflow: str, ref: str) -> InstanceSnapshot | None:
        """The instance `ref` (UUID, or business key: the live instance first) of a workflow."""
        return dialect().find(domain, workflow, ref)

    def lane_view(self, instance_id: uuid.UUID) -> tuple[InstanceSnapshot | None, list[int]]:
        """Inside the instance's write lane: the instance as committed now and the lane's
        unfinished tickets, oldest first (accepted before the caller's update)."""
        return dialect().lane_view(instance_id)

    def live_by_key(self, domain: str, workflow: str, key: str) -> InstanceSnapshot | None:
        """The live (not Completed) instance of a workflow with business key `key`, if any."""
        row = (
            Instance.objects.filter(domain=domain, workflow_key=workflow, key=key)
            .exclude(status=InstanceStatus.COMPLETED)
            .first()
        )
        return snapshot_of(row) if row else None

    def status_of(self, instance_id: uuid.UUID) -> str | None:
        """The instance's status letter now, or None when it does not exist."""
        found = Instance.objects.filter(pk=instance_id).values_list("status", flat=True).first()
        return str(found) if found is not None else None

    def create_reserved(
        self, snapshot: InstanceSnapshot, reservation: str, job_payload: dict[str, Any]
    ) -> InstanceSnapshot:
        """Insert `snapshot` Busy for `reservation` and the transition job that owns it, in one
        transaction (an async start). `BusinessKeyTaken` when a live instance has the key."""
        now = timezone.now()
        values = {name: getattr(snapshot, name) for name in _INSTANCE_FIELDS}
        values.update(
            status=InstanceStatus.BUSY,
            busy_owner=reservation,
            busy_since=now,
            created_at=now,
            updated_at=now,
        )
        try:
            with transaction.atomic():
                row = Instance.objects.create(**values)
                job_enqueue(kind=JobKind.TRANSITION, instance_id=row.pk, payload=job_payload)
        except IntegrityError as exc:
            raise BusinessKeyTaken(str(snapshot.key)) from exc
        return snapshot_of(row)

    def reserve_with_job(
        self, instance_id: uuid.UUID, statuses: list[str], reservation: str, payload: dict[str, Any]
    ) -> bool:
        """Busy for `reservation` if the status is one of `statuses`, with the transition job
        that owns the reservation, in one transaction; False when the status refused it."""
        reserved = dialect().reserve_with_job(instance_id, statuses, reservation, payload)
        if reserved:
            instance_changed(instance_id)
        return reserved

    def take_reservation(
        self, instance_id: uuid.UUID, reservation: str, job_id: int, token: str
    ) -> bool:
        """Move Busy ownership from an accept's `reservation` (or an earlier claim of job
        `job_id`) to this claim's `token`; False when the instance is no longer reserved."""
        owners = Q(busy_owner=reservation) | Q(busy_owner__startswith=f"job:{job_id}:")
        return _move_busy_owner(instance_id, owners, token)

    def busy_since_before(self, cutoff: datetime) -> list[tuple[uuid.UUID, str]]:
        """`(id, owner)` of every instance Busy since before `cutoff` (the reaper's candidates)."""
        stale = Instance.objects.filter(status=InstanceStatus.BUSY, busy_since__lt=cutoff)
        return [
            (instance_id, str(owner))
            for instance_id, owner in stale.values_list("pk", "busy_owner")
        ]

    def fault_owned(self, instance_id: uuid.UUID, owner: str, incident: IncidentRow) -> bool:
        """Fault an instance Busy for `owner` with the writes every fault makes (incident, the
        state's timers, the locks), and mark its running history rows faulted; guarded by the
        owner, so a run that finishes meanwhile wins and nothing is written."""
        snapshot = self.load(instance_id)
        if snapshot is None:
            return False
        incident.state = snapshot.current_state
        writes = PendingWrites()
        stage_fault(writes, state=snapshot.current_state, incident=incident)
        with transaction.atomic():
            if self.flush(snapshot, writes, Guard(GuardKind.OWNER, owner=owner)) is None:
                return False
            InstanceTransition.objects.filter(
                instance_id=instance_id, status=TransitionStatus.RUNNING
            ).update(
                status=TransitionStatus.FAULTED,
                error_code=incident.error_code,
                error_message=incident.message,
                finished_at=timezone.now(),
            )
        return True

    def record_operator_action(
        self,
        instance_id: uuid.UUID,
        *,
        action: str,
        body: dict[str, Any],
        actor: str,
        change_extra: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> bool:
        """An operator's action on an instance (force-releasing a lock): a completed history row
        naming it, and `extra` changed by `change_extra`, guarded by the version read (retried
        when a run wrote in between). False when the instance does not exist."""
        for _ in range(5):
            row = Instance.objects.filter(pk=instance_id).first()
            if row is None:
                return False
            now = timezone.now()
            with transaction.atomic():
                changed = Instance.objects.filter(pk=instance_id, etag=row.etag).update(
                    extra=change_extra(dict(row.extra)), etag=new_etag(), updated_at=now
                )
                if not changed:
                    continue
                instance_changed(instance_id)
                InstanceTransition.objects.create(
                    instance_id=instance_id,
                    transition_key=action,
                    from_state=row.current_state,
                    to_state=row.current_state,
                    trigger_type=0,
                    body=body,
                    actor=actor,
                    status=TransitionStatus.COMPLETED,
                    effective_state=row.effective_state,
                    started_at=now,
                    finished_at=now,
                )
            return True
        return False

    def fault_to_retry(self, instance: InstanceSnapshot) -> FaultToRetry | None:
        """What a retry of a Faulted instance re-runs: the transition of its newest open
        incident (or, for the reaper's, its newest faulted history row) and the step that
        failed; None when there is no faulted transition."""
        incident = (
            Incident.objects.filter(instance_id=instance.id, resolved=False)
            .order_by("-created_at")
            .first()
        )
        rows = InstanceTransition.objects.filter(
            instance_id=instance.id, status=TransitionStatus.FAULTED
        ).order_by("-started_at")
        row = None
        if incident is not None and incident.transition_id is not None:
            row = rows.filter(pk=incident.transition_id).first()
        row = row or rows.first()
        if row is None:
            return None
        step = incident.step if incident is not None else ""
        if not step and row.to_state and row.to_state == instance.current_state != row.from_state:
            step = "ON_ENTRY"  # the stranded run had committed ChangeState
        return FaultToRetry(
            transition_key=row.transition_key,
            from_state=row.from_state,
            trigger=int(row.trigger_type),
            step=step,
        )

    def force_busy(self, instance_id: uuid.UUID, owner: str) -> InstanceSnapshot | None:
        """Busy owner = `owner` if the instance is Active or Busy (cancel/exit/timeout)."""
        live = [InstanceStatus.ACTIVE, InstanceStatus.BUSY, InstanceStatus.FAULTED]
        taken = Instance.objects.filter(pk=instance_id, status__in=live).update(
            status=InstanceStatus.BUSY,
            busy_owner=owner,
            busy_since=timezone.now(),
            etag=new_etag(),
        )
        if taken:
            instance_changed(instance_id)
        return self.load(instance_id) if taken else None

    def hand_over(
        self, instance_id: uuid.UUID, from_owner: str, to_owner: str
    ) -> InstanceSnapshot | None:
        """Busy owner `from_owner` -> `to_owner` by compare-and-set; None when it is not held."""
        moved = _move_busy_owner(instance_id, Q(busy_owner=from_owner), to_owner)
        return self.load(instance_id) if moved else None

    def supersede(
        self,
        instance_id: uuid.UUID,
        *,
        rows: list[uuid.UUID] | None,
        code: str,
        taker: str | None = None,
    ) -> str:
        """Close the history `rows` (None: all the instance's) of a run that lost the instance,
        those still running, as `cancelled`, naming who took over (`taker`, else the newest
        other row of the instance)."""
        running = InstanceTransition.objects.filter(
            instance_id=instance_id, status=TransitionStatus.RUNNING
        )
        if rows is not None:
            running = running.filter(pk__in=rows)
        described = taker
        if described is None:
            newest = (
                InstanceTransition.objects.filter(instance_id=instance_id)
                .exclude(pk__in=rows or [])
                .order_by("-started_at")
                .values_list("transition_key", "actor")
                .first()
            )
            described = describe_taker(*newest) if newest else "another run"
        running.update(
            status=TransitionStatus.CANCELLED,
            error_code=code,
            error_message=f"superseded by {described}",
            finished_at=timezone.now(),
        )
        return described

    def flush(
        self, snapshot: InstanceSnapshot, writes: PendingWrites, guard: Guard
    ) -> InstanceSnapshot | None:
        """Commit `writes` in one transaction when `guard` holds; None (nothing written) if not."""
        sql = dialect()
        protection = protection_for(
            snapshot.domain, snapshot.workflow_key, snapshot.workflow_version
        )
        if protection is not None:
            writes = sealed_writes(snapshot, writes, protection)
        try:
            if guard.kind is not GuardKind.INSERT and sql.flushes_in_one(writes):
                if not connection.in_atomic_block:
                    committed = sql.flush_in_one(snapshot, writes, guard)[0]
                else:
                    # Inside a caller's transaction a refused statement must not abort it.
                    with transaction.atomic():
                        committed = sql.flush_in_one(snapshot, writes, guard)[0]
                instance_changed(committed.id)
                snapshot.sealed = committed.sealed  # the engine's copy: the tokens now stored
                return committed
            with transaction.atomic():
                if guard.kind is GuardKind.INSERT:
                    committed, data_changed = (
                        self._insert(snapshot, writes),
                        bool(writes.data_patch),
                    )
                else:
                    committed, data_changed = sql.update(snapshot, writes, guard)
                self._write_rows(committed, writes, data_changed)
        except _GuardFailed:
            if guard.data_etag is not None:
                self._raise_if_only_data_changed(snapshot.id, guard)
            return None
        except DataError as exc:
            # The content was refused (NUL character, number out of range): nothing written.
            raise StoreRefused(f"the database refused the data: {_first_line(exc)}") from exc
        instance_changed(committed.id)
        snapshot.sealed = committed.sealed  # the engine's copy: the tokens now stored
        return committed

    def _raise_if_only_data_changed(self, instance_id: uuid.UUID, guard: Guard) -> None:
        # A failed guard that carried a data version: when the status part still holds, only
        # the data moved on (another write committed): `DataChanged` with it, so the run derives
        # its patches again; otherwise the instance changed hands (None: 409 as ever).
        row = Instance.objects.filter(_status_guard_q(guard), pk=instance_id).first()
        if row is not None and row.entity_etag != guard.data_etag:
            raise DataChanged(snapshot_of(row))

    # --- instance row -------------------------------------------------------------------------

    def _insert(self, snapshot: InstanceSnapshot, writes: PendingWrites) -> InstanceSnapshot:
        now = timezone.now()
        values = {name: getattr(snapshot, name) for name in _INSTANCE_FIELDS}
        values.update(writes.instance_fields)
        values.update(created_at=snapshot.created_at or now, updated_at=now)
        row = Instance(**values, data=deep_merge({}, writes.data_patch or {}))
        try:
            with transaction.atomic():
                row.save(force_insert=True)
        except IntegrityError as exc:
            if "instance_live_business_key" in str(exc) or "UNIQUE" in str(exc).upper():
                raise BusinessKeyTaken(str(snapshot.key)) from exc
            raise
        return snapshot_of(row)

    # --- the other rows -----------------------------------------------------------------------

    def _write_rows(
        self, committed: InstanceSnapshot, writes: PendingWrites, data_changed: bool
    ) -> None:
        instance_id = committed.id
        rows = list(writes.transitions.values())
        if rows:
            dialect().upsert_transitions(instance_id, rows)
        if data_changed:
            last = rows[-1].id if rows else None
            same = None
            if writes.version_strategy == "None":
                # The data changed without a new version: that version's row takes the change
                # (a second row with the same version would make `?version=` ambiguous).
                same = (
                    InstanceDataVersion.objects.filter(
                        instance_id=instance_id, version=committed.data_version_text
                    )
                    .order_by("-created_at")
                    .first()
                )
            stored = stored_data(committed)  # the row as stored: sealed fields as tokens
            if same is not None:
                same.patch = deep_merge(same.patch or {}, writes.data_patch or {})
                same.data, same.transition_id = stored, last or same.transition_id
                same.save(update_fields=["patch", "data", "transition"])
            else:
                InstanceDataVersion.objects.create(
                    instance_id=instance_id,
                    transition_id=last,
                    version=committed.data_version_text,
                    patch=writes.data_patch or {},
                    data=stored,
                )
        if writes.tasks:
            InstanceTask.objects.bulk_create(
                InstanceTask(instance_id=instance_id, **vars(row)) for row in writes.tasks
            )
        if writes.incidents:
            Incident.objects.bulk_create(
                Incident(instance_id=instance_id, **vars(row)) for row in writes.incidents
            )
        if writes.reschedule_timeout is not None:
            jobs_reschedule(
                instance_id=instance_id, kind=JobKind.TIMEOUT, run_at=writes.reschedule_timeout
            )
        if writes.cancel_all_timers or writes.cancel_timers_of:
            timers = Job.objects.filter(instance_id=instance_id, status=JobStatus.PENDING)
            if writes.cancel_all_timers:
                timers = timers.filter(kind__in=TIMER_KINDS)
            else:
                timers = timers.filter(kind="timer", state__in=writes.cancel_timers_of)
            timers.update(status=JobStatus.CANCELLED, updated_at=timezone.now())
        if writes.release_locks:
            ResourceLock.objects.filter(owner=instance_id).delete()
        if writes.resolve_incidents is not None:
            resolution, who = writes.resolve_incidents
            Incident.objects.filter(instance_id=instance_id, resolved=False).update(
                resolved=True, resolved_at=timezone.now(), resolution=resolution, resolved_by=who
            )
        if writes.jobs:
            created = Job.objects.bulk_create(
                Job(instance_id=instance_id, **vars(job)) for job in writes.jobs
            )
            # Handed to the job runner once (and only if) this transaction commits.
            jobs = [(job.pk, job.run_at) for job in created]
            transaction.on_commit(lambda: jobs_dispatch(jobs))
        for child in writes.children:
            _start_child(instance_id, child)
        if writes.parent_correlation_status is not None and committed.parent_correlation_id:
            _close_parent_correlation(
                committed.id, committed.parent_correlation_id, writes.parent_correlation_status
            )
        if writes.children_end is not None:
            _end_children(instance_id, writes.children_end)


def _move_busy_owner(instance_id: uuid.UUID, owners: Q, to_owner: str) -> bool:
    # Who holds Busy changes, nothing a client sees does: no new eTag, no change notification.
    taken = Instance.objects.filter(owners, id=instance_id, status=InstanceStatus.BUSY)
    return bool(taken.update(busy_owner=to_owner, busy_since=timezone.now()))


# --- subflows: rows another instance's flush writes ----------------------------------------------


def _start_child(parent_id: uuid.UUID, child: ChildStart) -> None:
    # The correlation, the child (Busy, reserved for its start job) and that job: one
    # transaction with the parent's own writes, so a crash leaves all of them or none.
    now = timezone.now()
    correlation = Correlation.objects.create(
        parent_id=parent_id,
        parent_state=child.parent_state,
        child_id=child.instance.id,
        type=child.correlation_type,
        created_at=now,
    )
    values = {name: getattr(child.instance, name) for name in _INSTANCE_FIELDS}
    values.update(
        status=InstanceStatus.BUSY,
        busy_owner=child.reservation,
        busy_since=now,
        created_at=now,
        updated_at=now,
        parent_correlation_id=correlation.pk,
    )
    Instance.objects.create(**values)
    payload = child.job_payload
    child_row = child.instance
    if protection_for(child_row.domain, child_row.workflow_key, child_row.workflow_version):
        # The child encrypts fields at rest: its start request stays sealed in the job row.
        payload = seal_request(payload, instance_id=child_row.id)
    job_enqueue(kind=JobKind.TRANSITION, instance_id=child_row.id, payload=payload)


def _close_parent_correlation(child_id: uuid.UUID, correlation_id: int, status: str) -> None:
    # The child ended: its correlation closes and, for a SubFlow, the waiting parent resumes.
    found = (
        Correlation.objects.filter(pk=correlation_id, status=CorrelationStatus.ACTIVE)
        .values_list("parent_id", "type")
        .first()
    )
    if found is None:
        return  # the parent ended first (its cancel closed the correlation): nobody waits
    parent_id, correlation_type = found
    Correlation.objects.filter(pk=correlation_id).update(status=status, completed_at=timezone.now())
    if correlation_type == Correlation.Type.SUBPROCESS:
        # The parent lists its open subprocesses (state function): its ETag moves on.
        Instance.objects.filter(pk=parent_id).update(etag=new_etag())
        instance_changed(parent_id)
    if correlation_type == Correlation.Type.SUBFLOW:
        job_enqueue(
            kind=JobKind.SUBFLOW_RESUME,
            instance_id=parent_id,
            payload={
                "child": str(child_id),
                "correlation": correlation_id,
                "origin": str(child_id),
            },
        )


def _end_children(parent_id: uuid.UUID, end: ChildrenEnd) -> None:
    # The parent ended: each open SubFlow child gets its own cancel (or exit) as a job.
    open_children = Correlation.objects.filter(
        parent_id=parent_id, status=CorrelationStatus.ACTIVE, type=Correlation.Type.SUBFLOW
    )
    for correlation_id, child_id in list(open_children.values_list("pk", "child_id")):
        Correlation.objects.filter(pk=correlation_id).update(
            status=end.status, completed_at=timezone.now()
        )
        if child_id is not None:
            job_enqueue(
                kind=JobKind.SUBFLOW_END,
                instance_id=child_id,
                payload={
                    "transitionKind": end.transition_kind,
                    "correlation": correlation_id,
                    "origin": str(parent_id),
                },
            )


# --- SQL dialects: one object per database vendor, chosen once ------------------------------------


def _raw_snapshot(found: Any) -> InstanceSnapshot:
    # A snapshot from a raw row of `_SELECT_COLUMNS`.
    values = dict(zip(_SNAPSHOT_COLUMNS, found, strict=True))
    for name in ("data", "tags", "extra"):
        # Django's psycopg setup leaves jsonb undecoded for raw cursors.
        if isinstance(values[name], str):
            values[name] = json.loads(values[name])
    major, minor, patch = (values.pop(name) for name in _VERSION_COLUMNS)
    return opened(InstanceSnapshot(**values, data_version=(major, minor, patch)))


class PortableSql:
    """Instance-row statements any database runs (SQLite in the embedded mode), through the
    ORM; a read and its guarded write share one transaction (SQLite serialises writers)."""

    def find(self, domain: str, workflow: str, ref: str) -> InstanceSnapshot | None:
        """The instance `ref` (UUID, or business key: the live instance first) of a workflow."""
        row = newest_instance(domain, workflow, ref)
        return snapshot_of(row) if row else None

    def lane_view(self, instance_id: uuid.UUID) -> tuple[InstanceSnapshot | None, list[int]]:
        """The instance and its write lane's unfinished tickets, oldest first."""
        row = Instance.objects.filter(pk=instance_id).first()
        return (snapshot_of(row) if row else None), lane_waiting(instance_id)

    def update(
        self, snapshot: InstanceSnapshot, writes: PendingWrites, guard: Guard
    ) -> tuple[InstanceSnapshot, bool]:
        """The guarded update of the instance row: the committed instance and whether its data
        changed; `_GuardFailed` when the guard no longer holds."""
        queryset = Instance.objects.filter(_status_guard_q(guard), pk=snapshot.id)
        if guard.data_etag is not None:
            queryset = queryset.filter(entity_etag=guard.data_etag)
        row = queryset.first()
        if row is None:
            raise _GuardFailed()
        values: dict[str, Any] = dict(writes.instance_fields)
        data_changed = False
        if writes.data_patch:
            merged = deep_merge(row.data, writes.data_patch)
            if merged != row.data:
                data_changed = True
                version = bump_version(
                    (row.data_version_major, row.data_version_minor, row.data_version_patch),
                    writes.version_strategy,
                )
                values.update(
                    data=merged,
                    entity_etag=new_etag(),
                    data_version_major=version[0],
                    data_version_minor=version[1],
                    data_version_patch=version[2],
                )
        values.update(
            etag=new_etag(),
            updated_at=timezone.now(),
            state_version=row.state_version + (1 if writes.bump_state_version else 0),
        )
        if queryset.update(**values) != 1:
            raise _GuardFailed()
        row.refresh_from_db()
        return snapshot_of(row), data_changed

    def flushes_in_one(self, writes: PendingWrites) -> bool:
        """Whether `flush_in_one` can commit `writes`: never, on a portable database."""
        return False

    def flush_in_one(
        self, snapshot: InstanceSnapshot, writes: PendingWrites, guard: Guard
    ) -> tuple[InstanceSnapshot, bool]:
        """Only PostgreSQL commits a flush in one statement."""
        raise NotImplementedError

    def upsert_transitions(self, instance_id: uuid.UUID, rows: list[TransitionRow]) -> None:
        """Insert or update history rows by id (a job's re-run updates its own rows)."""
        InstanceTransition.objects.bulk_create(
            [InstanceTransition(instance_id=instance_id, **vars(row)) for row in rows],
            update_conflicts=True,
            unique_fields=["id"],
            update_fields=_TRANSITION_UPDATE_FIELDS,
        )

    def reserve_with_job(
        self, instance_id: uuid.UUID, statuses: list[str], reservation: str, payload: dict[str, Any]
    ) -> bool:
        """Mark the instance Busy for `reservation` if its status is one of `statuses`, and
        enqueue the transition job that owns the reservation, together; False when refused."""
        with transaction.atomic():
            reserved = Instance.objects.filter(pk=instance_id, status__in=statuses).update(
                status=InstanceStatus.BUSY,
                busy_owner=reservation,
                busy_since=timezone.now(),
                etag=new_etag(),
            )
            if reserved:
                job_enqueue(kind=JobKind.TRANSITION, instance_id=instance_id, payload=payload)
        return bool(reserved)


class PostgresSql(PortableSql):
    """The same statements as single round trips on PostgreSQL (`UPDATE ... RETURNING`, the
    data merged in SQL, one upsert for the history)."""

    def find(self, domain: str, workflow: str, ref: str) -> InstanceSnapshot | None:
        """One plain SELECT, no model instance: this is on every request's path."""
        value: uuid.UUID | str
        try:
            condition, value = "id = %s", uuid.UUID(ref)
        except ValueError:
            condition, value = "key = %s", ref
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {_SELECT_COLUMNS} FROM instances_instance "
                f"WHERE domain = %s AND workflow_key = %s AND {condition} "
                "ORDER BY status = 'C', created_at DESC LIMIT 1",
                [domain, workflow, value],
            )
            found = cursor.fetchone()
        return _raw_snapshot(found) if found is not None else None

    def lane_view(self, instance_id: uuid.UUID) -> tuple[InstanceSnapshot | None, list[int]]:
        """One SELECT: the instance and its write lane's unfinished tickets, oldest first."""
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {_SELECT_COLUMNS}, ARRAY(SELECT j.id FROM {Job._meta.db_table} j "
                f"WHERE j.instance_id = i.id AND j.kind = '{JobKind.UPDATE_DATA}' "
                f"AND j.status IN ('{JobStatus.PENDING}', '{JobStatus.RUNNING}') ORDER BY j.id) "
                "FROM instances_instance i WHERE i.id = %s",
                [instance_id],
            )
            found = cursor.fetchone()
        if found is None:
            return None, []
        return _raw_snapshot(found[:-1]), list(found[-1])

    def update(
        self, snapshot: InstanceSnapshot, writes: PendingWrites, guard: Guard
    ) -> tuple[InstanceSnapshot, bool]:
        """One `UPDATE ... WHERE <guard> RETURNING`, the data patch merged in SQL."""
        sql, params = self._update_statement(snapshot, writes, guard)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            returned = cursor.fetchone()
        return self._committed(snapshot, writes, params, returned)

    def flushes_in_one(self, writes: PendingWrites) -> bool:
        """True when `writes` touch only the instance row, its history rows, its task journal
        and its data version: `flush_in_one` commits those in one statement."""
        return not (
            writes.incidents
            or writes.jobs
            or writes.cancel_timers_of
            or writes.cancel_all_timers
            or writes.reschedule_timeout is not None
            or writes.release_locks
            or writes.resolve_incidents is not None
            or writes.children
            or writes.parent_correlation_status is not None
            or writes.children_end is not None
        )

    def flush_in_one(
        self, snapshot: InstanceSnapshot, writes: PendingWrites, guard: Guard
    ) -> tuple[InstanceSnapshot, bool]:
        """The guarded UPDATE, the history upsert and the data-version INSERT as one statement
        (a CTE: the INSERTs read the UPDATE's row, so they write nothing when the guard fails).
        In autocommit that is the whole transaction: one round trip, no BEGIN or COMMIT."""
        update, params = self._update_statement(snapshot, writes, guard)
        parts = [f"updated AS ({update})"]
        rows = list(writes.transitions.values())
        if rows:
            selects = []
            for index, row in enumerate(rows):
                values = dict(vars(row))
                values["body"] = _TRANSITION_BODY.get_db_prep_save(values["body"], connection)
                params.update({f"t{index}_{name}": value for name, value in values.items()})
                casts = ", ".join(
                    f"%(t{index}_{name})s::{_transition_cast(name)}" for name in values
                )
                selects.append(f"SELECT id, {casts} FROM updated")
            columns = ", ".join(["instance_id", *vars(rows[0])])
            updates = ", ".join(f"{name} = EXCLUDED.{name}" for name in _TRANSITION_UPDATE_FIELDS)
            parts.append(
                f"history AS (INSERT INTO instances_instancetransition ({columns}) "
                f"{' UNION ALL '.join(selects)} ON CONFLICT (id) DO UPDATE SET {updates})"
            )
        if writes.tasks:
            parts.append(self._task_rows(writes.tasks, params))
        if writes.data_patch:
            params["version_transition"] = rows[-1].id if rows else None
            version = "data_version_major || '.' || data_version_minor || '.' || data_version_patch"
            missing = ""
            if writes.version_strategy == "None":
                # No new version: that version's newest row takes the change; a row is added
                # only when the version has none yet.
                parts.append(
                    "same_version AS (UPDATE instances_instancedataversion v SET data = u.data, "
                    "patch = vnext_jsonb_merge(v.patch, %(patch)s::jsonb), transition_id = "
                    "COALESCE(%(version_transition)s::uuid, v.transition_id) FROM updated u "
                    "WHERE u.entity_etag = %(entity_etag)s AND v.id = (SELECT d.id FROM "
                    "instances_instancedataversion d WHERE d.instance_id = u.id AND d.version = "
                    "u.data_version_major || '.' || u.data_version_minor || '.' || "
                    "u.data_version_patch ORDER BY d.created_at DESC LIMIT 1) "
                    "RETURNING v.id)"
                )
                missing = " AND NOT EXISTS (SELECT 1 FROM same_version)"
            parts.append(
                "versions AS (INSERT INTO instances_instancedataversion "
                "(instance_id, transition_id, version, patch, data, created_at) "
                f"SELECT id, %(version_transition)s::uuid, {version}, %(patch)s::jsonb, data, "
                f"%(now)s FROM updated WHERE entity_etag = %(entity_etag)s{missing})"
            )
        sql = f"WITH {', '.join(parts)} SELECT id, {_RETURNED} FROM updated"
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            returned = cursor.fetchone()
        return self._committed(snapshot, writes, params, returned)

    def _task_rows(self, tasks: list[TaskRow], params: dict[str, Any]) -> str:
        # The task journal rows as a CTE part of `flush_in_one` (`order` is a keyword: quoted).
        selects = []
        for index, row in enumerate(tasks):
            values = dict(vars(row))
            values["response"] = _TASK_RESPONSE.get_db_prep_save(values["response"], connection)
            params.update({f"k{index}_{name}": value for name, value in values.items()})
            casts = ", ".join(f"%(k{index}_{name})s::{_task_cast(name)}" for name in values)
            selects.append(f"SELECT id, {casts}, %(now)s FROM updated")
        names = [f'"{name}"' for name in vars(tasks[0])]
        columns = ", ".join(["instance_id", *names, "created_at"])
        return (
            f"tasks AS (INSERT INTO instances_instancetask ({columns}) "
            f"{' UNION ALL '.join(selects)})"
        )

    def _update_statement(
        self, snapshot: InstanceSnapshot, writes: PendingWrites, guard: Guard
    ) -> tuple[str, dict[str, Any]]:
        params: dict[str, Any] = {
            "id": snapshot.id,
            "etag": new_etag(),
            "now": timezone.now(),
            "state_step": 1 if writes.bump_state_version else 0,
        }
        sets = [f"{name} = %(f_{name})s" for name in writes.instance_fields]
        params.update(
            {
                f"f_{name}": _column(name).get_db_prep_save(value, connection)
                for name, value in writes.instance_fields.items()
            }
        )
        if writes.data_patch:
            merged = "vnext_jsonb_merge(data, %(patch)s::jsonb)"
            changed = f"({merged} IS DISTINCT FROM data)"
            major, minor, patch = bump_version((0, 0, 0), writes.version_strategy)
            params.update(
                patch=json.dumps(writes.data_patch),
                entity_etag=new_etag(),
                d_major=major,
                d_minor=minor,
                d_patch=patch,
            )
            sets += [
                f"data = {merged}",
                f"entity_etag = CASE WHEN {changed} THEN %(entity_etag)s ELSE entity_etag END",
                f"data_version_major = CASE WHEN {changed} "
                "THEN data_version_major + %(d_major)s ELSE data_version_major END",
                f"data_version_minor = CASE WHEN {changed} AND %(d_major)s > 0 THEN 0 "
                f"WHEN {changed} THEN data_version_minor + %(d_minor)s ELSE data_version_minor END",
                f"data_version_patch = CASE WHEN {changed} AND (%(d_major)s > 0 "
                f"OR %(d_minor)s > 0) THEN 0 WHEN {changed} "
                "THEN data_version_patch + %(d_patch)s ELSE data_version_patch END",
            ]
        sets += [
            "state_version = state_version + %(state_step)s",
            "etag = %(etag)s",
            "updated_at = %(now)s",
        ]
        condition, guard_params = _guard_sql(guard)
        params.update(guard_params)
        sql = (
            f"UPDATE instances_instance SET {', '.join(sets)} "
            f"WHERE id = %(id)s AND {condition} RETURNING id, {_RETURNED}"
        )
        return sql, params

    def _committed(
        self,
        snapshot: InstanceSnapshot,
        writes: PendingWrites,
        params: dict[str, Any],
        returned: Any,
    ) -> tuple[InstanceSnapshot, bool]:
        if returned is None:
            raise _GuardFailed()
        _, data, major_v, minor_v, patch_v, entity_etag, state_version, status = returned
        data = json.loads(data) if isinstance(data, str) else data
        committed = _with(snapshot, writes.instance_fields)
        committed.data = data
        opened(committed)
        committed.data_version = (major_v, minor_v, patch_v)
        committed.entity_etag, committed.state_version = entity_etag, state_version
        committed.status, committed.etag = status, params["etag"]
        data_changed = bool(writes.data_patch) and entity_etag == params.get("entity_etag")
        return committed, data_changed

    def upsert_transitions(self, instance_id: uuid.UUID, rows: list[TransitionRow]) -> None:
        """One `INSERT ... ON CONFLICT (id) DO UPDATE` for all the rows."""
        columns = ["instance_id", *vars(rows[0])]
        updates = ", ".join(f"{name} = EXCLUDED.{name}" for name in _TRANSITION_UPDATE_FIELDS)
        sql = (
            f"INSERT INTO instances_instancetransition ({', '.join(columns)}) "
            f"VALUES ({', '.join(['%s'] * len(columns))}) "
            f"ON CONFLICT (id) DO UPDATE SET {updates}"
        )
        body = InstanceTransition._meta.get_field("body")
        params = []
        for row in rows:
            values = dict(vars(row))
            values["body"] = body.get_db_prep_save(values["body"], connection)
            params.append([instance_id, *values.values()])
        with connection.cursor() as cursor:
            cursor.executemany(sql, params)

    def reserve_with_job(
        self, instance_id: uuid.UUID, statuses: list[str], reservation: str, payload: dict[str, Any]
    ) -> bool:
        """The admission CAS and the job row in one statement: the job exists exactly when the
        reservation does, and the accept costs one round trip."""
        now = timezone.now()
        params: dict[str, Any] = {
            "id": instance_id,
            "statuses": [str(status) for status in statuses],
            "reservation": reservation,
            "now": now,
            "etag": new_etag(),
            "kind": JobKind.TRANSITION,
            "payload": json.dumps(with_request_id(payload), cls=DjangoJSONEncoder),
        }
        with connection.cursor() as cursor:
            cursor.execute(_RESERVE_WITH_JOB, params)
            created = cursor.fetchone()
        if created is None:
            return False
        job_id, run_at = created
        transaction.on_commit(lambda: jobs_dispatch([(job_id, run_at)]))
        return True


# What the guarded UPDATE returns, in the order `PostgresSql._committed` reads it.
_RETURNED = (
    "data, data_version_major, data_version_minor, data_version_patch, entity_etag, "
    "state_version, status"
)
_TRANSITION_BODY = InstanceTransition._meta.get_field("body")
_TASK_RESPONSE = InstanceTask._meta.get_field("response")


@functools.cache
def _transition_cast(name: str) -> str:
    # The column's type, so a NULL parameter is typed too (`SELECT %s::timestamptz ...`).
    return str(InstanceTransition._meta.get_field(name).db_type(connection))


@functools.cache
def _task_cast(name: str) -> str:
    # `transition_id` is the foreign key `transition`: its type is the history row's id type.
    return str(InstanceTask._meta.get_field(name.removesuffix("_id")).db_type(connection))


_RESERVE_WITH_JOB = f"""
WITH reserved AS (
    UPDATE {Instance._meta.db_table}
    SET status = 'B', busy_owner = %(reservation)s, busy_since = %(now)s, etag = %(etag)s
    WHERE id = %(id)s AND status = ANY(%(statuses)s)
    RETURNING id
)
INSERT INTO {Job._meta.db_table} (kind, instance_id, state, payload, run_at, status, attempts,
                                  lease_owner, last_error, created_at, updated_at)
SELECT %(kind)s, id, '', %(payload)s::jsonb, %(now)s, 'pending', 0, '', '', %(now)s, %(now)s
FROM reserved
RETURNING id, run_at
"""


@functools.cache
def _dialect_for(vendor: str) -> PortableSql:
    return PostgresSql() if vendor == "postgresql" else PortableSql()


def dialect() -> PortableSql:
    """The SQL dialect of the default database, chosen once per vendor."""
    return _dialect_for(connection.vendor)


def _guard_sql(guard: Guard) -> tuple[str, dict[str, Any]]:
    condition, params = _status_guard_sql(guard)
    if guard.data_etag is not None:
        condition += " AND entity_etag = %(guard_data_etag)s"
        params["guard_data_etag"] = guard.data_etag
    return condition, params


def _status_guard_sql(guard: Guard) -> tuple[str, dict[str, Any]]:
    if guard.kind is GuardKind.OPTIMISTIC:
        return "status = 'A' AND state_version = %(guard_version)s", {
            "guard_version": guard.state_version
        }
    if guard.kind is GuardKind.OWNER:
        return "status = 'B' AND busy_owner = %(guard_owner)s", {"guard_owner": guard.owner}
    if guard.kind is GuardKind.FAULTED:
        return "status = 'F'", {}
    return "status <> 'C'", {}


def _status_guard_q(guard: Guard) -> Q:
    """The guard's condition but its data version, as a queryset filter."""
    if guard.kind is GuardKind.OPTIMISTIC:
        condition = Q(status=InstanceStatus.ACTIVE, state_version=guard.state_version)
    elif guard.kind is GuardKind.OWNER:
        condition = Q(status=InstanceStatus.BUSY, busy_owner=guard.owner)
    elif guard.kind is GuardKind.FAULTED:
        condition = Q(status=InstanceStatus.FAULTED)
    else:
        condition = ~Q(status=InstanceStatus.COMPLETED)
    return condition


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _with(snapshot: InstanceSnapshot, fields: dict[str, Any]) -> InstanceSnapshot:
    committed = InstanceSnapshot(**vars(snapshot))
    for name, value in fields.items():
        setattr(committed, name, value)
    return committed


class RegistryComponents:
    """`Components` over the registry. Published versions are immutable, so exact versions
    are cached in-process for good; "newest" lookups always ask the database."""

    _SIZE = 1024

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._documents: OrderedDict[ComponentRef, dict[str, Any] | None] = OrderedDict()
        self._workflows: OrderedDict[ComponentRef, WorkflowDefinition] = OrderedDict()

    def clear(self) -> None:
        """Forget every cached document (tests reset the registry between cases)."""
        with self._lock:
            self._documents.clear()
            self._workflows.clear()

    def workflow(self, domain: str, key: str, version: str | None) -> WorkflowDefinition | None:
        """The workflow at `version` (newest when None), or None."""
        if version is None:
            newest = (
                Component.objects.filter(kind=ComponentKind.WORKFLOW, domain=domain, key=key)
                .order_by(
                    "-version_major", "-version_minor", "-version_patch", "-version_is_release"
                )
                .values_list("version", flat=True)
                .first()
            )
            if newest is None:
                return None
            version = newest
        ref = ComponentRef(ComponentKind.WORKFLOW, domain, key, version)
        with self._lock:
            cached = self._workflows.get(ref)
        if cached is not None:
            return cached
        document = self._document(ref)
        if document is None:
            return None
        definition = WorkflowDefinition(document)
        with self._lock:
            self._workflows[ref] = definition
            if len(self._workflows) > self._SIZE:
                self._workflows.popitem(last=False)
        return definition

    def component(self, kind: str, reference: dict[str, Any]) -> dict[str, Any] | None:
        """The document a `{key, domain, flow, version}` reference names, or None."""
        ref = ComponentRef.from_reference(reference)
        if ref is None or ref.kind != kind:
            return None
        return self._document(ref)

    def _document(self, ref: ComponentRef) -> dict[str, Any] | None:
        with self._lock:
            if ref in self._documents:
                return self._documents[ref]
        document = (
            Component.objects.filter(
                kind=ref.kind, domain=ref.domain, key=ref.key, version=ref.version
            )
            .values_list("document", flat=True)
            .first()
        )
        if document is not None:  # a missing component may be published later: not cached
            with self._lock:
                self._documents[ref] = document
                if len(self._documents) > self._SIZE:
                    self._documents.popitem(last=False)
        return document


# The process's registry: the engine's (instances/wiring.py), and the one the store finds each
# workflow's sealed fields in.
COMPONENTS = RegistryComponents()


def instance_lookup(domain: str, workflow: str, ref: str) -> Q:
    """The filter for `{instance}` in a path: the instance UUID, or its business key."""
    base = Q(domain=domain, workflow_key=workflow)
    try:
        return base & Q(pk=uuid.UUID(ref))
    except ValueError:
        return base & Q(key=ref)


def newest_instance(domain: str, workflow: str, ref: str) -> Instance | None:
    """The newest instance of a workflow matching `ref` (UUID or business key), or None."""
    return (
        Instance.objects.filter(instance_lookup(domain, workflow, ref))
        .order_by("-created_at")
        .first()
    )


class OrmInstanceReader:
    """`InstanceReader` for the Get-instance(s) task types."""

    def instance(
        self, domain: str, workflow: str, ref: str, *, asked_by: uuid.UUID | None = None
    ) -> dict[str, Any] | None:
        """`{id, key, status, state, data}` of one instance, or None. Its fields encrypted at
        rest are clear only when it is the instance asking (`asked_by`: its engine has them
        in clear already); any other instance's stay sealed."""
        row = newest_instance(domain, workflow, ref)
        if row is None:
            return None
        return _public(row, clear=asked_by is not None and row.pk == asked_by)

    def may_reach(self, domain: str, workflow: str, target_domain: str) -> bool:
        """A `DomainReach` row grants the workflow (or its whole domain) `target_domain`."""
        return DomainReach.objects.filter(
            domain=domain, workflow__in=[workflow, ""], target_domain=target_domain
        ).exists()

    def instances(
        self,
        domain: str,
        workflow: str,
        *,
        filter_text: str | dict[str, Any] | list[Any] | None,
        page: int,
        page_size: int,
        sort: str | None = None,
    ) -> list[dict[str, Any]]:
        """A page of instances, newest first unless `sort` says otherwise; `filter_text` in
        the list API's query language (a string in any of its forms, a task config's JSON
        filter object, or a list of them that must all hold)."""
        queryset = Instance.objects.filter(domain=domain, workflow_key=workflow)
        sealed = sealed_paths(domain, workflow) if filter_text or sort else frozenset()
        filters = filter_text if isinstance(filter_text, list) else [filter_text]
        for one in filters:
            queryset = queryset.filter(parse_filter(one or None, sealed=sealed))
        terms = parse_sort(sort, sealed=sealed) if sort else []
        queryset = queryset.order_by(*terms, "-created_at", "-id")
        start = (max(page, 1) - 1) * page_size
        return [_public(row, clear=False) for row in queryset[start : start + page_size]]

    def release_thread(self) -> None:
        """Close the worker thread's database connections."""
        connections.close_all()


def _public(row: Instance, *, clear: bool) -> dict[str, Any]:
    protection = protection_for(row.domain, row.workflow_key, row.workflow_version)
    if protection is None:
        data = row.data
    elif clear:
        data = protection.open(row.data, instance_id=row.pk)[0]
    else:
        data = as_stored(row.data, protection.paths)  # nothing opened: no key needed
    return {
        "id": str(row.id),
        "key": row.key,
        "status": row.status,
        "state": row.current_state,
        "data": data,
        "createdAt": row.created_at.isoformat(),
    }


def sealed_paths(domain: str, workflow: str) -> frozenset[tuple[str, ...]]:
    """The data paths any published version of a workflow encrypts at rest: a filter or sort
    there would compare cipher text (refused with `invalid_column`). The versions come from
    the registry (an instance is pinned to one), never from a scan of the instances."""
    versions = Component.objects.filter(
        kind=ComponentKind.WORKFLOW, domain=domain, key=workflow
    ).values_list("version", flat=True)
    found: set[tuple[str, ...]] = set()
    for version in versions:
        protection = protection_for(domain, workflow, version)
        if protection is not None:
            found |= protection.paths
    return frozenset(found)


# --- reads the job runner decides on -----------------------------------------------------------


def transition_row_get(*, row_id: uuid.UUID) -> InstanceTransition | None:
    """The history row `row_id` (a job's hops are keyed by its row seed), or None."""
    return InstanceTransition.objects.filter(id=row_id).first()


def correlation_active_exists(*, parent_id: uuid.UUID, child_id: uuid.UUID) -> bool:
    """The SubFlow correlation of `parent_id` with its child `child_id` is still open."""
    return Correlation.objects.filter(
        parent_id=parent_id, child_id=child_id, status=CorrelationStatus.ACTIVE
    ).exists()
