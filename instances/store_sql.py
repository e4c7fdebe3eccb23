"""The instance-row statements of the ORM store, one object per database vendor, chosen once
(`dialect()`): `PortableSql` runs them through the ORM on any database (SQLite in the embedded
mode), `PostgresSql` as single round trips (`UPDATE ... WHERE <guard> RETURNING`, the data patch
merged in SQL by `vnext_jsonb_merge`, a whole flush in one CTE when it touches only the
instance's own rows). A guard that no longer holds raises `GuardFailed`; nothing is written.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Sequence
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, connection, transaction
from django.db.models import Field, JSONField, Q
from django.utils import timezone

from instances.engine.merging import deep_merge
from instances.engine.ports import BusinessKeyTaken, DefinitionSuperseded
from instances.engine.records import (
    Guard,
    GuardKind,
    InstanceSnapshot,
    PendingWrites,
    TaskRow,
    TransitionRow,
    bump_version,
    new_etag,
)
from instances.engine.telemetry import with_request_id
from instances.job_dispatch import jobs_dispatch
from instances.models import (
    Incident,
    Instance,
    InstanceTask,
    InstanceTransition,
)
from instances.outbox import EventNote, outbox_cte_part, outbox_rows, outbox_write, started_events
from instances.queue import (
    JOBS_INSERTED_SQL,
    LANE_TICKET_IDS_SQL,
    RESERVED_JOB_INSERT_SQL,
    TIMERS_CANCEL_ALL_SQL,
    TIMERS_CANCEL_OF_STATES_SQL,
    job_enqueue,
    jobs_dispatch_after_commit,
    jobs_insert_part,
    lane_waiting,
)
from instances.registry import COMPONENTS
from instances.snapshots import (
    INSTANCE_FIELDS,
    SELECT_COLUMNS,
    VERSION_COLUMNS,
    newest_instance,
    opened,
    raw_snapshot,
    snapshot_of,
)
from instances.status import (
    InstanceStatus,
    JobKind,
)
from locks.models import ResourceLock
from workflows.documents import ComponentKind
from workflows.models import Component

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


class GuardFailed(Exception):
    """The guarded UPDATE matched no row: the instance changed hands (or its data moved on)."""


@functools.cache
def _column(name: str) -> Field[Any, Any]:
    field = Instance._meta.get_field(name)
    assert isinstance(field, Field)
    return field


@functools.cache
def _needs_prep(name: str) -> bool:
    # Only the JSON columns need Django's conversion for psycopg (an adapter around the value);
    # text, numbers, UUIDs and aware datetimes go as they are (~1 us a column, 28 columns).
    return isinstance(_column(name), JSONField)


def _prepared(name: str, value: Any) -> Any:
    """An instance column's value as a statement parameter."""
    return _column(name).get_db_prep_save(value, connection) if _needs_prep(name) else value


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
        changed; `GuardFailed` when the guard no longer holds."""
        queryset = Instance.objects.filter(status_guard_q(guard), pk=snapshot.id)
        if guard.data_etag is not None:
            queryset = queryset.filter(entity_etag=guard.data_etag)
        row = queryset.first()
        if row is None:
            raise GuardFailed()
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
            raise GuardFailed()
        row.refresh_from_db()
        return snapshot_of(row), data_changed

    def flushes_in_one(self, writes: PendingWrites) -> bool:
        """Whether `flush_in_one` can commit `writes`: never, on a portable database."""
        return False

    def flush_in_one(
        self,
        snapshot: InstanceSnapshot,
        writes: PendingWrites,
        guard: Guard,
        events: Sequence[EventNote] = (),
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
            reserved = busy_take(instance_id, statuses=statuses, owner=reservation)
            if reserved:
                job_enqueue(kind=JobKind.TRANSITION, instance_id=instance_id, payload=payload)
        return reserved

    def insert_with_job(
        self, snapshot: InstanceSnapshot, payload: dict[str, Any], guard: Guard
    ) -> InstanceSnapshot:
        """Insert `snapshot` (reserved) and the transition job that owns it, together: the
        committed instance. `BusinessKeyTaken` / `DefinitionSuperseded` when refused."""
        if guard.newest:
            check_still_newest(snapshot)
        now = timezone.now()
        values = {name: getattr(snapshot, name) for name in INSTANCE_FIELDS}
        values.update(created_at=snapshot.created_at or now, updated_at=now)
        try:
            with transaction.atomic():
                row = Instance.objects.create(**values)
                job_enqueue(kind=JobKind.TRANSITION, instance_id=row.pk, payload=payload)
                reserved = snapshot_of(row)
                outbox_write(
                    outbox_rows(
                        reserved,
                        started_events(reserved),
                        status=reserved.status,
                        data_version=reserved.data_version_text,
                    )
                )
        except IntegrityError as exc:
            raise BusinessKeyTaken(str(snapshot.key)) from exc
        return reserved


class PostgresSql(PortableSql):
    """The same statements as single round trips on PostgreSQL (`UPDATE ... RETURNING`, the
    data merged in SQL, one upsert for the history)."""

    def find(self, domain: str, workflow: str, ref: str) -> InstanceSnapshot | None:
        """One plain SELECT, no model instance: this is on every request's path."""
        try:
            instance_id = uuid.UUID(ref)
        except ValueError:
            # A business key may name a completed instance and its live successor.
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SELECT {SELECT_COLUMNS} FROM instances_instance "
                    "WHERE domain = %s AND workflow_key = %s AND key = %s "
                    "ORDER BY status = 'C', created_at DESC LIMIT 1",
                    [domain, workflow, ref],
                )
                found = cursor.fetchone()
            return raw_snapshot(found) if found is not None else None
        # An id names one row: the primary key alone, so no other plan is open to the planner
        # however stale its statistics of the workflow's other rows; the scope is checked here.
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {SELECT_COLUMNS} FROM instances_instance WHERE id = %s", [instance_id]
            )
            found = cursor.fetchone()
        if found is None:
            return None
        snapshot = raw_snapshot(found)
        if snapshot.domain != domain or snapshot.workflow_key != workflow:
            return None
        return snapshot

    def lane_view(self, instance_id: uuid.UUID) -> tuple[InstanceSnapshot | None, list[int]]:
        """One SELECT: the instance and its write lane's unfinished tickets, oldest first."""
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {SELECT_COLUMNS}, {LANE_TICKET_IDS_SQL} "
                "FROM instances_instance i WHERE i.id = %s",
                [instance_id],
            )
            found = cursor.fetchone()
        if found is None:
            return None, []
        return raw_snapshot(found[:-1]), list(found[-1])

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
        """True when `writes` touch only the instance row (inserted or updated) and rows keyed
        by it alone: its history rows, task journal, data version, new jobs (timers), pending
        timers, resource locks and open incidents; `flush_in_one` commits those in one
        statement."""
        return not (
            writes.incidents
            or writes.reschedule_timeout is not None
            or writes.children
            or writes.parent_correlation_status is not None
            or writes.children_end is not None
            # Human tasks (type 5) opened or closed: their rows are written by the ORM.
            or writes.touches_human_tasks
        )

    def flush_in_one(
        self,
        snapshot: InstanceSnapshot,
        writes: PendingWrites,
        guard: Guard,
        events: Sequence[EventNote] = (),
    ) -> tuple[InstanceSnapshot, bool]:
        """The guarded UPDATE (or the INSERT of a new instance), the history upsert, the
        data-version INSERT, the instance's timers, locks and incidents and its outbox `events`
        as one statement (a CTE: every other part reads the instance's row, so nothing is
        written when the guard fails). In autocommit that is the whole transaction: one round
        trip, no BEGIN or COMMIT. A refused INSERT raises `BusinessKeyTaken` or
        `DefinitionSuperseded`."""
        if guard.kind is GuardKind.INSERT:
            statement, params = self._insert_statement(snapshot, writes, guard)
        else:
            statement, params = self._update_statement(snapshot, writes, guard)
        parts = [f"updated AS ({statement})"]
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
            if writes.version_strategy == "None" and guard.kind is not GuardKind.INSERT:
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
        parts += _instance_rows_parts(writes, params)
        if events:
            outbox = outbox_cte_part(
                snapshot,
                list(events),
                params,
                status=str(writes.instance_fields.get("status", snapshot.status)),
                resolved_cte="incidents" if writes.resolve_incidents is not None else None,
            )
            if outbox is not None:
                parts.append(outbox)
        returned_jobs = ""
        if writes.jobs:
            parts.append(jobs_insert_part(writes.jobs, params))
            returned_jobs = f", {JOBS_INSERTED_SQL}"
        sql = f"WITH {', '.join(parts)} SELECT id, {_RETURNED}{returned_jobs} FROM updated"
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            returned = cursor.fetchone()
        if returned is None and guard.kind is GuardKind.INSERT:
            _raise_insert_refused(snapshot, guard)
        if returned is not None and writes.jobs:
            inserted, returned = returned[-1], returned[:-1]
            jobs_dispatch_after_commit(
                json.loads(inserted) if isinstance(inserted, str) else inserted
            )
        return self._committed(snapshot, writes, params, returned)

    def _insert_statement(
        self, snapshot: InstanceSnapshot, writes: PendingWrites, guard: Guard
    ) -> tuple[str, dict[str, Any]]:
        # The new instance's row; nothing when a live instance has its business key (the
        # partial unique index, `ON CONFLICT ... DO NOTHING`) or, for a start on the newest
        # version, when a newer one is published.
        now = timezone.now()
        values = {name: getattr(snapshot, name) for name in INSTANCE_FIELDS}
        values.update(writes.instance_fields)
        values.update(
            created_at=snapshot.created_at or now,
            updated_at=now,
            data=deep_merge({}, writes.data_patch or {}),
            etag=values["etag"] or new_etag(),
        )
        values.update(zip(VERSION_COLUMNS, snapshot.data_version, strict=True))
        params: dict[str, Any] = {
            f"i_{name}": _prepared(name, value) for name, value in values.items()
        }
        params.update(
            now=now,
            etag=values["etag"],
            entity_etag=values["entity_etag"],
            patch=json.dumps(writes.data_patch or {}),
        )
        columns = ", ".join(values)
        casts = ", ".join(f"%(i_{name})s::{_instance_cast(name)}" for name in values)
        newest = f" WHERE NOT EXISTS ({_NEWER_VERSION_SQL})" if guard.newest else ""
        sql = (
            f"INSERT INTO instances_instance ({columns}) SELECT {casts}{newest} "
            f"ON CONFLICT (domain, workflow_key, key) WHERE {_LIVE_KEY} DO NOTHING "
            f"RETURNING id, {_RETURNED}"
        )
        return sql, params

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
            {f"f_{name}": _prepared(name, value) for name, value in writes.instance_fields.items()}
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
            raise GuardFailed()
        _, data, major_v, minor_v, patch_v, entity_etag, state_version, status = returned
        data = json.loads(data) if isinstance(data, str) else data
        committed = _with(snapshot, writes.instance_fields)
        committed.data = data
        opened(committed)
        committed.data_version = (major_v, minor_v, patch_v)
        committed.entity_etag, committed.state_version = entity_etag, state_version
        committed.status, committed.etag = status, params["etag"]
        # The statement set `updated_at` (and, inserting, `created_at` when the run had none).
        committed.updated_at = params["now"]
        committed.created_at = committed.created_at or params["now"]
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

    def insert_with_job(
        self, snapshot: InstanceSnapshot, payload: dict[str, Any], guard: Guard
    ) -> InstanceSnapshot:
        """The instance's INSERT (`ON CONFLICT` on the live key, the newest-version check) and
        its transition job's in one statement: an async start costs one round trip."""
        statement, params = self._insert_statement(snapshot, PendingWrites(), guard)
        params.update(
            kind=JobKind.TRANSITION,
            payload=json.dumps(with_request_id(payload), cls=DjangoJSONEncoder),
        )
        # A subscribed workflow's `started` event: one more part of the same statement.
        outbox = outbox_cte_part(
            snapshot,
            started_events(snapshot),
            params,
            status=snapshot.status,
            source_cte="reserved",
        )
        head = f"WITH reserved AS ({statement})" + (f", {outbox}" if outbox else "")
        with connection.cursor() as cursor:
            cursor.execute(f"{head}{RESERVED_JOB_INSERT_SQL}", params)
            created = cursor.fetchone()
        if created is None:
            _raise_insert_refused(snapshot, guard)
        job_id, run_at = created
        transaction.on_commit(lambda: jobs_dispatch([(job_id, run_at)]))
        committed = _with(snapshot, {})
        committed.etag, committed.updated_at = params["etag"], params["now"]
        return opened(committed)

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


def _instance_rows_parts(writes: PendingWrites, params: dict[str, Any]) -> list[str]:
    # The instance's pending timers cancelled, its resource locks released and its open
    # incidents resolved, as CTE parts of `flush_in_one`: each touches rows of the instance the
    # `updated` part returns (none when the guard failed). `= (SELECT id ...)`, not `IN`: the
    # planner takes the instance id as a parameter and uses the index on it, whatever the
    # table's statistics say.
    parts = []
    if writes.cancel_all_timers:
        parts.append(f"timers AS ({TIMERS_CANCEL_ALL_SQL})")
    elif writes.cancel_timers_of:
        params["timer_states"] = sorted(writes.cancel_timers_of)
        parts.append(f"timers AS ({TIMERS_CANCEL_OF_STATES_SQL})")
    if writes.release_locks:
        parts.append(
            f"locks AS (DELETE FROM {ResourceLock._meta.db_table} "
            "WHERE owner = (SELECT id FROM updated))"
        )
    if writes.resolve_incidents is not None:
        params["resolution"], params["resolved_by"] = writes.resolve_incidents
        parts.append(
            f"incidents AS (UPDATE {Incident._meta.db_table} SET resolved = true, "
            "resolved_at = %(now)s, resolution = %(resolution)s, resolved_by = %(resolved_by)s "
            "WHERE instance_id = (SELECT id FROM updated) AND NOT resolved RETURNING id)"
        )
    return parts


def check_still_newest(snapshot: InstanceSnapshot) -> None:
    """The portable INSERT's newest-version check, a query of its own before the insert:
    `DefinitionSuperseded` when a newer version of the workflow is published."""
    COMPONENTS.forget_newest(snapshot.domain, snapshot.workflow_key)
    newest = COMPONENTS.workflow(snapshot.domain, snapshot.workflow_key, None)
    if newest is not None and newest.version != snapshot.workflow_version:
        raise DefinitionSuperseded(f"{snapshot.workflow_key} {snapshot.workflow_version}")


def _raise_insert_refused(snapshot: InstanceSnapshot, guard: Guard) -> None:
    # The INSERT wrote nothing: a newer version was published (only a start on the newest
    # checks), else the business key is live.
    if guard.newest:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT EXISTS ({_NEWER_VERSION_SQL})",
                {
                    "i_domain": snapshot.domain,
                    "i_workflow_key": snapshot.workflow_key,
                    "i_workflow_version": snapshot.workflow_version,
                },
            )
            superseded = cursor.fetchone()[0]
        if superseded:
            COMPONENTS.forget_newest(snapshot.domain, snapshot.workflow_key)
            raise DefinitionSuperseded(f"{snapshot.workflow_key} {snapshot.workflow_version}")
    raise BusinessKeyTaken(str(snapshot.key))


# A published version of the workflow newer than the instance's (`%(i_domain)s`,
# `%(i_workflow_key)s`, `%(i_workflow_version)s`), in the registry's order of versions.
_NEWER_VERSION_SQL = f"""
SELECT 1 FROM {Component._meta.db_table} pinned JOIN {Component._meta.db_table} newer
  ON newer.kind = pinned.kind AND newer.domain = pinned.domain AND newer.key = pinned.key
 AND (newer.version_major, newer.version_minor, newer.version_patch, newer.version_is_release)
   > (pinned.version_major, pinned.version_minor, pinned.version_patch, pinned.version_is_release)
WHERE pinned.kind = '{ComponentKind.WORKFLOW}' AND pinned.domain = %(i_domain)s
  AND pinned.key = %(i_workflow_key)s AND pinned.version = %(i_workflow_version)s"""
# The predicate of the partial unique index `instance_live_business_key` (`ON CONFLICT` names it).
_LIVE_KEY = f"key IS NOT NULL AND status <> '{InstanceStatus.COMPLETED}'"

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
def _instance_cast(name: str) -> str:
    return str(_column(name).db_type(connection))


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
){RESERVED_JOB_INSERT_SQL}"""


def busy_take(instance_id: uuid.UUID, *, statuses: Sequence[str], owner: str) -> bool:
    """The Busy compare-and-set through the ORM: Busy for `owner` if the status is one of
    `statuses` (a new eTag); False when it is not (someone else won)."""
    taken = Instance.objects.filter(pk=instance_id, status__in=statuses).update(
        status=InstanceStatus.BUSY,
        busy_owner=owner,
        busy_since=timezone.now(),
        etag=new_etag(),
    )
    return bool(taken)


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


def status_guard_q(guard: Guard) -> Q:
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


def _with(snapshot: InstanceSnapshot, fields: dict[str, Any]) -> InstanceSnapshot:
    committed = InstanceSnapshot(**vars(snapshot))
    for name, value in fields.items():
        setattr(committed, name, value)
    return committed
