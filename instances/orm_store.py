"""The engine's `Store` port on the Django ORM: the instance row, the rows a flush writes with
it, and the subflow rows a flush writes for another instance.

A flush is one transaction: one guarded UPDATE of the instance (`... WHERE id = %s AND <guard>
RETURNING ...`; zero rows means the guard failed and nothing is written), then one INSERT per kind
of row. On PostgreSQL the data patch is merged inside that UPDATE (`vnext_jsonb_merge`), so
parallel updateData calls never lose each other's keys; the statements per database are in
`instances.store_sql`.

Fields the master schema encrypts at rest are sealed here, in the patch a flush writes (the
history bodies and task journal answers lose this instance's clear values), and opened in every
snapshot built from a row (`instances.snapshots`): the database never holds them in clear, the
engine always works on them in clear (instances/field_encryption.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import DataError, IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from instances.changes import instance_changed
from instances.engine.merging import deep_merge
from instances.engine.ports import (
    BusinessKeyTaken,
    DataChanged,
    StoreRefused,
    describe_taker,
)
from instances.engine.records import (
    ChildrenEnd,
    ChildStart,
    Guard,
    GuardKind,
    IncidentRow,
    InstanceSnapshot,
    PendingWrites,
    new_etag,
    stage_fault,
)
from instances.field_encryption import (
    seal_request,
    sealed_writes,
)
from instances.human_task_rows import human_tasks_write
from instances.job_payloads import FaultToRetry, SubflowEndJob, SubflowResumeJob
from instances.models import (
    Correlation,
    Incident,
    Instance,
    InstanceDataVersion,
    InstanceTask,
    InstanceTransition,
)
from instances.outbox import (
    flush_events,
    incidents_resolved_events,
    outbox_rows,
    outbox_write,
    started_events,
    subscribed_instance_lock,
)
from instances.queue import job_enqueue, jobs_create, jobs_reschedule, jobs_timers_cancel
from instances.snapshots import INSTANCE_FIELDS, protection_for, snapshot_of, stored_data
from instances.status import (
    CorrelationStatus,
    FlowType,
    InstanceStatus,
    JobKind,
    TransitionStatus,
    Trigger,
)
from instances.store_sql import (
    GuardFailed,
    busy_take,
    check_still_newest,
    dialect,
    status_guard_q,
)
from locks.models import ResourceLock


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
        self,
        snapshot: InstanceSnapshot,
        reservation: str,
        job_payload: dict[str, Any],
        *,
        on_newest: bool = False,
    ) -> InstanceSnapshot:
        """Insert `snapshot` Busy for `reservation` and the transition job that owns it, in one
        transaction (an async start; one statement on PostgreSQL). `BusinessKeyTaken` when a
        live instance has the key; `DefinitionSuperseded` when `on_newest` and a newer version
        of the workflow is published."""
        now = timezone.now()
        reserved = InstanceSnapshot(**vars(snapshot))
        reserved.status, reserved.busy_owner, reserved.busy_since = (
            InstanceStatus.BUSY,
            reservation,
            now,
        )
        reserved.created_at = now
        return dialect().insert_with_job(
            reserved, job_payload, Guard(GuardKind.INSERT, newest=on_newest)
        )

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
                self.operator_history(
                    snapshot_of(row), action=action, body=body, actor=actor, at=now
                )
            return True
        return False

    def operator_history(
        self,
        instance: InstanceSnapshot,
        *,
        action: str,
        body: dict[str, Any],
        actor: str,
        to_state: str | None = None,
        stage: str = "",
        at: datetime | None = None,
    ) -> None:
        """The completed history row of an operator's action on `instance` (`operator:...`:
        no definition has such a transition key), in the caller's transaction."""
        now = at or timezone.now()
        InstanceTransition.objects.create(
            instance_id=instance.id,
            transition_key=action,
            from_state=instance.current_state,
            to_state=to_state or instance.current_state,
            trigger_type=Trigger.MANUAL,
            body=body,
            actor=actor,
            status=TransitionStatus.COMPLETED,
            effective_state=to_state or instance.effective_state,
            effective_state_type=instance.effective_state_type,
            effective_state_subtype=instance.effective_state_subtype,
            stage=stage,
            started_at=now,
            finished_at=now,
        )

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
        """Busy owner = `owner` if the instance is live: Active, Busy, Faulted or suspended
        (cancel/exit/timeout; a suspended instance's timeout is held, so only cancel and exit
        reach one)."""
        live = [
            InstanceStatus.ACTIVE,
            InstanceStatus.BUSY,
            InstanceStatus.FAULTED,
            InstanceStatus.PASSIVE,
        ]
        taken = busy_take(instance_id, statuses=live, owner=owner)
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
        # The outbound events of a subscribed workflow: written with the change, or not at all.
        events = flush_events(snapshot, writes, guard)
        try:
            if sql.flushes_in_one(writes):
                if not connection.in_atomic_block:
                    committed = sql.flush_in_one(snapshot, writes, guard, events)[0]
                else:
                    # Inside a caller's transaction a refused statement must not abort it.
                    with transaction.atomic():
                        committed = sql.flush_in_one(snapshot, writes, guard, events)[0]
                instance_changed(committed.id)
                snapshot.sealed = committed.sealed  # the engine's copy: the tokens now stored
                return committed
            with transaction.atomic():
                if guard.kind is GuardKind.INSERT:
                    committed, data_changed = (
                        self._insert(snapshot, writes, guard),
                        bool(writes.data_patch),
                    )
                else:
                    committed, data_changed = sql.update(snapshot, writes, guard)
                resolved = self._write_rows(committed, writes, data_changed)
                if events:
                    outbox_write(
                        outbox_rows(
                            committed,
                            events,
                            status=committed.status,
                            data_version=committed.data_version_text,
                            incidents_resolved=resolved > 0,
                        )
                    )
        except GuardFailed:
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
        row = Instance.objects.filter(status_guard_q(guard), pk=instance_id).first()
        if row is not None and row.entity_etag != guard.data_etag:
            raise DataChanged(snapshot_of(row))

    # --- instance row -------------------------------------------------------------------------

    def _insert(
        self, snapshot: InstanceSnapshot, writes: PendingWrites, guard: Guard
    ) -> InstanceSnapshot:
        if guard.newest:
            check_still_newest(snapshot)
        now = timezone.now()
        values = {name: getattr(snapshot, name) for name in INSTANCE_FIELDS}
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
    ) -> int:
        # Returns how many open incidents the writes closed.
        instance_id = committed.id
        resolved = 0
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
            jobs_timers_cancel(
                instance_id=instance_id,
                states=None if writes.cancel_all_timers else writes.cancel_timers_of,
            )
        if writes.release_locks:
            ResourceLock.objects.filter(owner=instance_id).delete()
        if writes.resolve_incidents is not None:
            resolution, who = writes.resolve_incidents
            resolved = Incident.objects.filter(instance_id=instance_id, resolved=False).update(
                resolved=True, resolved_at=timezone.now(), resolution=resolution, resolved_by=who
            )
        if writes.jobs:
            jobs_create(instance_id=instance_id, jobs=writes.jobs)
        for child in writes.children:
            _start_child(instance_id, child)
        if writes.parent_correlation_status is not None and committed.parent_correlation_id:
            _close_parent_correlation(
                committed.id, committed.parent_correlation_id, writes.parent_correlation_status
            )
        if writes.children_end is not None:
            _end_children(instance_id, writes.children_end)
        if writes.touches_human_tasks:
            human_tasks_write(committed, writes)
        return resolved


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
    values = {name: getattr(child.instance, name) for name in INSTANCE_FIELDS}
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
    outbox_write(
        outbox_rows(
            child_row,
            started_events(child_row),
            status=InstanceStatus.BUSY,
            data_version=child_row.data_version_text,
        )
    )
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
    if correlation_type == FlowType.SUBPROCESS:
        # The parent lists its open subprocesses (state function): its ETag moves on.
        Instance.objects.filter(pk=parent_id).update(etag=new_etag())
        instance_changed(parent_id)
    if correlation_type == FlowType.SUBFLOW:
        job_enqueue(
            kind=JobKind.SUBFLOW_RESUME,
            instance_id=parent_id,
            payload=SubflowResumeJob(
                child=str(child_id), correlation=correlation_id, origin=str(child_id)
            ).to_json(),
        )


def _end_children(parent_id: uuid.UUID, end: ChildrenEnd) -> None:
    # The parent ended: each open SubFlow child gets its own cancel (or exit) as a job.
    open_children = Correlation.objects.filter(
        parent_id=parent_id, status=CorrelationStatus.ACTIVE, type=FlowType.SUBFLOW
    )
    for correlation_id, child_id in list(open_children.values_list("pk", "child_id")):
        Correlation.objects.filter(pk=correlation_id).update(
            status=end.status, completed_at=timezone.now()
        )
        if child_id is not None:
            job_enqueue(
                kind=JobKind.SUBFLOW_END,
                instance_id=child_id,
                payload=SubflowEndJob(
                    transition_kind=end.transition_kind,
                    correlation=correlation_id,
                    origin=str(parent_id),
                ).to_json(),
            )


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def subprocess_correlation_create(
    *, parent_id: uuid.UUID, parent_state: str, child_id: uuid.UUID
) -> None:
    """Link a just-started SubProcess child to its parent: the `P` correlation and the child's
    `parent_correlation` (in the caller's transaction, with the child's start)."""
    correlation = Correlation.objects.create(
        parent_id=parent_id,
        parent_state=parent_state,
        child_id=child_id,
        type=FlowType.SUBPROCESS,
    )
    Instance.objects.filter(pk=child_id).update(parent_correlation=correlation)


def ended_subflow_child_get(*, parent_id: uuid.UUID, state: str) -> InstanceSnapshot | None:
    """The SubFlow child of `parent_id` that most recently ended in the parent's `state`, or
    None (a retried resume runs again with its data)."""
    correlation = (
        Correlation.objects.filter(parent_id=parent_id, parent_state=state, type=FlowType.SUBFLOW)
        .exclude(status=CorrelationStatus.ACTIVE)
        .order_by("-completed_at", "-pk")
        .first()
    )
    if correlation is None or correlation.child_id is None:
        return None
    return OrmStore().load(correlation.child_id)


# --- reads the job runner decides on -----------------------------------------------------------


def transition_row_get(*, row_id: uuid.UUID) -> InstanceTransition | None:
    """The history row `row_id` (a job's hops are keyed by its row seed), or None."""
    return InstanceTransition.objects.filter(id=row_id).first()


def correlation_active_exists(*, parent_id: uuid.UUID, child_id: uuid.UUID) -> bool:
    """The SubFlow correlation of `parent_id` with its child `child_id` is still open."""
    return Correlation.objects.filter(
        parent_id=parent_id, child_id=child_id, status=CorrelationStatus.ACTIVE
    ).exists()


# --- an operator's repair ---------------------------------------------------------------------


def incidents_resolve(
    *, instance_id: uuid.UUID, resolved_by: str, resolution: str
) -> tuple[int, list[str]]:
    """Close the instance's open incidents (`resolution`, by whom, now) without touching the
    instance: how many it closed, and their error codes, sorted."""
    open_incidents = Incident.objects.filter(instance_id=instance_id, resolved=False)
    codes = sorted(set(open_incidents.values_list("error_code", flat=True)))
    with transaction.atomic():
        # The instance first, then its incidents, as a flush locks them (no deadlock).
        locked = subscribed_instance_lock(instance_id)
        closed = open_incidents.update(
            resolved=True,
            resolved_at=timezone.now(),
            resolution=resolution,
            resolved_by=resolved_by,
        )
        if closed and locked is not None:
            outbox_write(
                incidents_resolved_events(locked, resolution=resolution, resolved_by=resolved_by)
            )
    return closed, codes
