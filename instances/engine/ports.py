"""The engine's ports: how it reaches instances, components and other instances' data.

The ORM implementations live in `instances/orm_store.py`; `InMemoryStore` here serves fast engine
tests without a database.
"""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any, Protocol

from instances.engine.definition import WorkflowDefinition
from instances.engine.errors import Codes, VNextError
from instances.engine.merging import deep_merge
from instances.engine.records import (
    Guard,
    GuardKind,
    IncidentRow,
    InstanceSnapshot,
    JobRow,
    PendingWrites,
    TaskRow,
    TransitionRow,
    bump_version,
    new_etag,
)
from instances.status import FlowType, InstanceStatus, TransitionStatus


class LockRelease(Enum):
    """What releasing a resource lock found."""

    RELEASED = "released"  # the owner's lock is gone
    MISSING = "missing"  # nothing (or only an expired row) to release: success all the same
    HELD_BY_OTHER = "held_by_other"  # someone else holds it: a logged anomaly, never a fault


class Locks(Protocol):
    """Business resource locks (seed 003): TTL rows owned by an instance."""

    def acquire(self, key: str, owner: uuid.UUID, transition: str, ttl_seconds: int) -> bool:
        """Take `key` for `owner` (re-entrant, or over an expired holder); False on conflict."""
        ...

    def release(self, key: str, owner: uuid.UUID) -> LockRelease:
        """Release `owner`'s lock on `key`; idempotent."""
        ...

    def extend(self, key: str, owner: uuid.UUID, ttl_seconds: int) -> bool:
        """Extend `owner`'s unexpired lock; False (nothing changed) when it is not held."""
        ...


class BusinessKeyTaken(Exception):
    """Inserting an instance failed: a live instance of the workflow already has the key."""


class DefinitionSuperseded(Exception):
    """Inserting an instance that started on the newest version of its workflow failed: a newer
    version was published meanwhile (nothing written; the start runs again on that one)."""


class DataChanged(Exception):
    """A flush guarded by the data version (`Guard.data_etag`) found the data changed by
    another write while everything else the guard checks still holds: nothing was written.
    `current` is the instance as committed now; the run derives its patches again from it."""

    def __init__(self, current: InstanceSnapshot) -> None:
        super().__init__(f"the data of instance {current.id} changed")
        self.current = current


class StoreRefused(VNextError):
    """The database refused a write for its content (a NUL character, a number out of range):
    nothing of that flush was written."""

    def __init__(self, detail: str) -> None:
        super().__init__(Codes.DATA_REFUSED, detail)


class Store(Protocol):
    """Instance persistence. Every write is one transaction guarded by a compare-and-set."""

    def load(self, instance_id: uuid.UUID) -> InstanceSnapshot | None:
        """The instance, or None."""
        ...

    def flush(
        self, snapshot: InstanceSnapshot, writes: PendingWrites, guard: Guard
    ) -> InstanceSnapshot | None:
        """Commit `writes` in one transaction if `guard` holds; return the committed instance,
        or None (nothing written) when it did not. Raises `BusinessKeyTaken` on INSERT, and
        `DataChanged` (nothing written) when only the guard's `data_etag` failed."""
        ...

    def force_busy(self, instance_id: uuid.UUID, owner: str) -> InstanceSnapshot | None:
        """Make `owner` the Busy owner of a live (Active or Busy) instance: cancel/exit/timeout
        are exempt from 409. None when the instance is not live."""
        ...

    def hand_over(
        self, instance_id: uuid.UUID, from_owner: str, to_owner: str
    ) -> InstanceSnapshot | None:
        """Move Busy ownership from `from_owner` to `to_owner` (compare-and-set); None when the
        instance is not Busy for `from_owner` any more."""
        ...

    def supersede(
        self,
        instance_id: uuid.UUID,
        *,
        rows: list[uuid.UUID] | None,
        code: str,
        taker: str | None = None,
    ) -> str:
        """A run lost the instance to another: close its history `rows` (None: every row of the
        instance) still running as `cancelled`, with `code` and who took over (`taker`, else
        the instance's newest other row), and return that description."""
        ...


class Components(Protocol):
    """Published components, by exact reference."""

    def workflow(self, domain: str, key: str, version: str | None) -> WorkflowDefinition | None:
        """The workflow at `version` (newest when None), or None."""
        ...

    def component(self, kind: str, reference: dict[str, Any]) -> dict[str, Any] | None:
        """The document a `{key, domain, flow, version}` reference names, or None."""
        ...


class InstanceReader(Protocol):
    """Reads of other instances, for the Get-instance(s) task types (13, 15, 19)."""

    def instance(
        self, domain: str, workflow: str, ref: str, *, asked_by: uuid.UUID | None = None
    ) -> dict[str, Any] | None:
        """`{id, key, status, state, data, ...}` of one instance by id or key, or None; the
        fields it encrypts at rest are clear only for itself (`asked_by`)."""
        ...

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
        """A page of instances of a workflow: `filter_text` in the list API's query language (a
        string in any form, a JSON filter object, or a list of them all of which must hold),
        `sort` as its `sort` parameter (default newest first)."""
        ...

    def may_reach(self, domain: str, workflow: str, target_domain: str) -> bool:
        """An operator granted workflow `domain/workflow` the tasks of `target_domain`."""
        ...

    def release_thread(self) -> None:
        """Free per-thread resources (database connections) of a task worker thread."""
        ...


class BindingError(Exception):
    """Sending through a binding failed: the peer `refused` it (with its reply code as
    `status`, an SMTP 550), was `unavailable` (no connection, it hung up), or did not answer in
    time (`timeout`); `egress` when the egress policy refused its address."""

    def __init__(self, reason: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.reason, self.message, self.status = reason, message, status


class BindingSender(Protocol):
    """Sends through the output bindings of one kind (`smtp`): an adapter outside the engine,
    installed at start-up (`instances.engine.targets.install_binding_sender`)."""

    def send(
        self, options: dict[str, Any], operation: str, data: Any, metadata: dict[str, str]
    ) -> Any:
        """Perform `operation` with `data` and `metadata` on the binding whose settings entry is
        `options`; return what it answered (the task's `data`). Raises `BindingError`."""
        ...


@dataclass(frozen=True)
class InstanceAnswer:
    """What starting an instance or running a transition answered, as the public API would:
    the HTTP status and the body (the instance envelope, `{id, status}`, or the error body)."""

    status_code: int
    body: dict[str, Any]


@dataclass(frozen=True)
class SubprocessParent:
    """The instance starting a SubProcess (type P) child, and the state it is in."""

    instance_id: uuid.UUID
    state: str


@dataclass(frozen=True)
class CallOptions:
    """How a trigger task reaches a remote runtime (its `timeoutSeconds`, `validateSsl`); an
    in-process target has no use for them (publish refuses them there)."""

    timeout_seconds: float | None = None
    validate_ssl: bool = True


class InstanceWriter(Protocol):
    """Starts instances and runs transitions for the trigger task types (11, 12, 14)."""

    def start(
        self,
        *,
        domain: str,
        flow: str,
        version: str | None,
        key: str | None,
        tags: list[str],
        body: dict[str, Any],
        sync: bool,
        headers: dict[str, str],
        parent: SubprocessParent | None = None,
        options: CallOptions | None = None,
    ) -> InstanceAnswer:
        """Start an instance of `flow` (a SubProcess child of `parent`) with `headers` as its
        request's headers; 409 when a live instance already has `key`."""
        ...

    def trigger(
        self,
        *,
        domain: str,
        flow: str,
        ref: str,
        transition: str,
        body: dict[str, Any],
        sync: bool,
        headers: dict[str, str],
        options: CallOptions | None = None,
    ) -> InstanceAnswer:
        """Run `transition` on the instance `ref` (id or key) of `flow`, with `headers` as its
        request's headers."""
        ...


class TargetUnavailable(Exception):
    """A broker or state store could not be reached, refused, or did not answer in time."""


class ETagMismatch(Exception):
    """A state-store write whose etag (or first-write-wins) did not hold: nothing written."""


@dataclass(frozen=True)
class StoredState:
    """A state-store entry: its value and its etag (a version number as text)."""

    value: Any
    etag: str


class Publisher(Protocol):
    """A named pub/sub target from settings (`PUBSUB_TARGETS`): RabbitMQ or Redis Streams."""

    def publish(self, topic: str, event: dict[str, Any], headers: dict[str, str]) -> str:
        """Send the structured CloudEvent `event` to `topic` (a routing key, a stream) and wait
        for the broker's confirm; return the message id the broker knows it by (the CloudEvent
        id, a stream entry id). Raises `TargetUnavailable` when it cannot."""
        ...


class StateStore(Protocol):
    """A named keyed state store from settings (`STATE_STORES`); keys come prefixed already.
    Every method raises `TargetUnavailable` when the store cannot be reached in time."""

    def get(self, key: str) -> StoredState | None:
        """The entry at `key`, or None."""
        ...

    def save(
        self, key: str, value: Any, *, etag: str | None, first_write: bool, ttl_seconds: int | None
    ) -> str:
        """Write `value` at `key` and return its new etag. With `etag`, only over that version;
        with `first_write` and no etag, only when `key` holds nothing; else `ETagMismatch`."""
        ...

    def delete(self, keys: list[str]) -> int:
        """Remove `keys`; how many existed."""
        ...


class TaskTargets(Protocol):
    """The named targets the pub/sub, state-store and cache-aside tasks (4, 17, 18) reach, from
    settings (a definition names them and never carries an address or a credential)."""

    def publisher(self, name: str) -> Publisher | None:
        """The pub/sub target `name`, or None when settings have none by that name."""
        ...

    def state_store(self, name: str) -> StateStore | None:
        """The state store `name`, or None when settings have none by that name."""
        ...

    def default_state_store(self) -> str:
        """The store a task without `storeName` uses (`DEFAULT_STATE_STORE`)."""
        ...


def utc_now() -> datetime:
    """The engine's clock."""
    return datetime.now(UTC)


@dataclass
class InMemoryLocks:
    """`Locks` in a dict, for engine tests."""

    held: dict[str, tuple[uuid.UUID, datetime]] = field(default_factory=dict)
    clock: Callable[[], datetime] = utc_now
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def acquire(self, key: str, owner: uuid.UUID, transition: str, ttl_seconds: int) -> bool:
        with self._lock:
            now = self.clock()
            current = self.held.get(key)
            if current and current[0] != owner and current[1] > now:
                return False
            self.held[key] = (owner, now + timedelta(seconds=ttl_seconds))
            return True

    def release(self, key: str, owner: uuid.UUID) -> LockRelease:
        with self._lock:
            current = self.held.get(key)
            if current and current[0] == owner:
                del self.held[key]
                return LockRelease.RELEASED
            if current and current[1] > self.clock():
                return LockRelease.HELD_BY_OTHER
            return LockRelease.MISSING

    def extend(self, key: str, owner: uuid.UUID, ttl_seconds: int) -> bool:
        with self._lock:
            current = self.held.get(key)
            now = self.clock()
            if not current or current[0] != owner or current[1] <= now:
                return False
            self.held[key] = (owner, now + timedelta(seconds=ttl_seconds))
            return True

    def release_all(self, owner: uuid.UUID) -> None:
        with self._lock:
            for key in [k for k, (o, _) in self.held.items() if o == owner]:
                del self.held[key]


@dataclass
class InMemoryStore:
    """A `Store` in a dict, with the same compare-and-set semantics as the ORM store."""

    rows: dict[uuid.UUID, InstanceSnapshot] = field(default_factory=dict)
    transitions: dict[uuid.UUID, TransitionRow] = field(default_factory=dict)
    tasks: list[TaskRow] = field(default_factory=list)
    incidents: list[IncidentRow] = field(default_factory=list)
    incident_instances: list[uuid.UUID] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    data_versions: list[tuple[uuid.UUID, str, dict[str, Any]]] = field(default_factory=list)
    correlations: dict[int, dict[str, Any]] = field(default_factory=dict)
    flushes: int = 0
    locks: InMemoryLocks | None = None
    clock: Callable[[], datetime] = utc_now
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def load(self, instance_id: uuid.UUID) -> InstanceSnapshot | None:
        with self._lock:
            row = self.rows.get(instance_id)
            return copy.deepcopy(row) if row else None

    def force_busy(self, instance_id: uuid.UUID, owner: str) -> InstanceSnapshot | None:
        with self._lock:
            row = self.rows.get(instance_id)
            live = (InstanceStatus.ACTIVE, InstanceStatus.BUSY, InstanceStatus.FAULTED)
            if row is None or row.status not in live:
                return None
            row.status, row.busy_owner, row.busy_since = InstanceStatus.BUSY, owner, self.clock()
            row.etag = new_etag()
            return copy.deepcopy(row)

    def hand_over(
        self, instance_id: uuid.UUID, from_owner: str, to_owner: str
    ) -> InstanceSnapshot | None:
        with self._lock:
            row = self.rows.get(instance_id)
            if row is None or row.status != InstanceStatus.BUSY or row.busy_owner != from_owner:
                return None
            row.busy_owner = to_owner
            return copy.deepcopy(row)

    def supersede(
        self,
        instance_id: uuid.UUID,
        *,
        rows: list[uuid.UUID] | None,
        code: str,
        taker: str | None = None,
    ) -> str:
        with self._lock:
            # The in-memory store holds the rows of every instance without saying whose: a
            # takeover (rows None) closes every running one.
            ids = list(self.transitions) if rows is None else rows
            described = taker
            if described is None:
                others = [t for t in self.transitions.values() if t.id not in ids]
                newest = max(others, key=lambda t: t.started_at, default=None)
                described = (
                    describe_taker(newest.transition_key, newest.actor) if newest else "another run"
                )
            for row_id in ids:
                row = self.transitions.get(row_id)
                if row is not None and row.status == TransitionStatus.RUNNING:
                    row.status, row.error_code = TransitionStatus.CANCELLED, code
                    row.error_message = f"superseded by {described}"
                    row.finished_at = self.clock()
            return described

    def flush(
        self, snapshot: InstanceSnapshot, writes: PendingWrites, guard: Guard
    ) -> InstanceSnapshot | None:
        with self._lock:
            row = self._guarded_row(snapshot, guard)
            if row is None:
                return None
            self.flushes += 1
            for name, value in writes.instance_fields.items():
                setattr(row, name, value)
            if writes.data_patch:
                merged = deep_merge(row.data, writes.data_patch)
                if merged != row.data:
                    row.data = merged
                    row.entity_etag = new_etag()
                    if guard.kind is not GuardKind.INSERT:  # a new instance starts at 1.0.0
                        row.data_version = bump_version(row.data_version, writes.version_strategy)
                    entry = (row.id, row.data_version_text, copy.deepcopy(merged))
                    same = [
                        i
                        for i, (owner, version, _) in enumerate(self.data_versions)
                        if owner == row.id and version == row.data_version_text
                    ]
                    if same and writes.version_strategy == "None":
                        self.data_versions[same[-1]] = entry  # no new version: the same row
                    else:
                        self.data_versions.append(entry)
            if writes.bump_state_version:
                row.state_version += 1
            row.etag = new_etag()
            row.updated_at = self.clock()
            for transition in writes.transitions.values():
                self.transitions[transition.id] = replace(transition)
            self.tasks.extend(writes.tasks)
            self.incidents.extend(writes.incidents)
            self.incident_instances.extend(row.id for _ in writes.incidents)
            if writes.resolve_incidents is not None:
                resolution, who = writes.resolve_incidents
                for incident, owner in zip(self.incidents, self.incident_instances, strict=True):
                    if owner == row.id and not incident.resolved:
                        incident.resolved, incident.resolution = True, resolution
                        incident.resolved_by = who
            self._write_jobs(row, writes)
            self._write_subflows(row, writes)
            if writes.release_locks and self.locks is not None:
                self.locks.release_all(row.id)
            return copy.deepcopy(row)

    def _guarded_row(self, snapshot: InstanceSnapshot, guard: Guard) -> InstanceSnapshot | None:
        if guard.kind is GuardKind.INSERT:
            if snapshot.key and any(
                r.key == snapshot.key
                and r.workflow_key == snapshot.workflow_key
                and r.domain == snapshot.domain
                and r.status != InstanceStatus.COMPLETED
                for r in self.rows.values()
            ):
                raise BusinessKeyTaken(snapshot.key)
            inserted = copy.deepcopy(snapshot)
            inserted.data = {}
            self.rows[inserted.id] = inserted
            return inserted
        existing = self.rows.get(snapshot.id)
        if existing is None:
            return None
        row = existing
        if guard.kind is GuardKind.OPTIMISTIC:
            ok = row.status == InstanceStatus.ACTIVE and row.state_version == guard.state_version
        elif guard.kind is GuardKind.OWNER:
            ok = row.status == InstanceStatus.BUSY and row.busy_owner == guard.owner
        elif guard.kind is GuardKind.FAULTED:
            ok = row.status == InstanceStatus.FAULTED
        else:
            ok = row.status != InstanceStatus.COMPLETED
        if ok and guard.data_etag is not None and row.entity_etag != guard.data_etag:
            raise DataChanged(copy.deepcopy(row))
        return row if ok else None

    def _write_subflows(self, row: InstanceSnapshot, writes: PendingWrites) -> None:
        for child in writes.children:
            correlation_id = len(self.correlations) + 1
            self.correlations[correlation_id] = {
                "parent": row.id,
                "child": child.instance.id,
                "type": child.correlation_type,
                "state": child.parent_state,
                "status": "active",
            }
            inserted = copy.deepcopy(child.instance)
            inserted.status, inserted.busy_owner = InstanceStatus.BUSY, child.reservation
            inserted.parent_correlation_id = correlation_id
            self.rows[inserted.id] = inserted
            self.jobs.append(
                _job_dict(inserted.id, JobRow("transition", self.clock(), "", child.job_payload))
            )
        own = self.correlations.get(row.parent_correlation_id or 0)
        if writes.parent_correlation_status and own and own["status"] == "active":
            own["status"] = writes.parent_correlation_status
            if own["type"] == FlowType.SUBFLOW:
                payload = {"child": str(row.id), "origin": str(row.id)}
                self.jobs.append(
                    _job_dict(own["parent"], JobRow("subflow-resume", self.clock(), "", payload))
                )
        if writes.children_end is not None:
            for correlation in self.correlations.values():
                if correlation["parent"] == row.id and correlation["status"] == "active":
                    correlation["status"] = writes.children_end.status
                    payload = {"transitionKind": writes.children_end.transition_kind}
                    self.jobs.append(
                        _job_dict(
                            correlation["child"], JobRow("subflow-end", self.clock(), "", payload)
                        )
                    )

    def _write_jobs(self, row: InstanceSnapshot, writes: PendingWrites) -> None:
        for job in self.jobs:
            mine = job["instance_id"] == row.id and job["status"] == "pending"
            if mine and job["kind"] == "timeout" and writes.reschedule_timeout is not None:
                job["run_at"] = writes.reschedule_timeout
            leaving = job["kind"] == "timer" and job["state"] in writes.cancel_timers_of
            ending = job["kind"] in ("timer", "timeout") and writes.cancel_all_timers
            if mine and (leaving or ending):
                job["status"] = "cancelled"
        for new in writes.jobs:
            self.jobs.append(_job_dict(row.id, new))


def describe_taker(transition_key: str, actor: str) -> str:
    """Who took an instance over from a run, as its history shows: `cancel (by ops)`."""
    return f"{transition_key} (by {actor})" if actor else transition_key


def _job_dict(instance_id: uuid.UUID, job: JobRow) -> dict[str, Any]:
    return {
        "instance_id": instance_id,
        "kind": job.kind,
        "state": job.state,
        "run_at": job.run_at,
        "payload": job.payload,
        "status": "pending",
    }


KIND_BY_FLOW = {
    "sys-flows": "workflow",
    "sys-tasks": "task",
    "sys-schemas": "schema",
    "sys-views": "view",
    "sys-functions": "function",
    "sys-extensions": "extension",
    "sys-mappings": "mapping",
}


@dataclass
class InMemoryComponents:
    """`Components` over a list of documents, for engine tests."""

    documents: list[dict[str, Any]] = field(default_factory=list)

    def _find(self, kind: str, domain: str, key: str, version: str | None) -> dict[str, Any] | None:
        matches = [
            d
            for d in self.documents
            if KIND_BY_FLOW.get(d.get("flow", ""), "workflow") == kind
            and d.get("domain") == domain
            and d.get("key") == key
            and (version is None or d.get("version") == version)
        ]
        return matches[-1] if matches else None

    def workflow(self, domain: str, key: str, version: str | None) -> WorkflowDefinition | None:
        document = self._find("workflow", domain, key, version)
        return WorkflowDefinition(document) if document else None

    def component(self, kind: str, reference: dict[str, Any]) -> dict[str, Any] | None:
        return self._find(
            kind,
            str(reference.get("domain", "")),
            str(reference.get("key", "")),
            str(reference.get("version", "")),
        )
