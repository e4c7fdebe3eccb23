"""Instance rows as the engine sees them: `InstanceSnapshot`s built from `Instance` rows (or raw
rows of `SELECT_COLUMNS`) with their fields encrypted at rest opened, the stored form of their
data, and the lookup of `{instance}` in a path.

Fields the master schema encrypts at rest are opened here, in every snapshot built from a row:
the database never holds them in clear, the engine always works on them in clear
(instances/field_encryption.py).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.db.models import Q

from instances.engine.records import (
    InstanceSnapshot,
)
from instances.field_encryption import (
    FieldProtection,
    opened_snapshot,
    protection_of,
)
from instances.models import (
    Instance,
)
from instances.registry import COMPONENTS
from workflows.documents import ComponentKind
from workflows.models import Component

INSTANCE_FIELDS = (
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
VERSION_COLUMNS = ("data_version_major", "data_version_minor", "data_version_patch")
SNAPSHOT_COLUMNS = (*INSTANCE_FIELDS, "data", *VERSION_COLUMNS)
SELECT_COLUMNS = ", ".join(SNAPSHOT_COLUMNS)


def snapshot_of(row: Instance) -> InstanceSnapshot:
    """The engine's view of an `Instance` row (its fields encrypted at rest opened)."""
    values = {name: getattr(row, name) for name in INSTANCE_FIELDS}
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


def raw_snapshot(found: Any) -> InstanceSnapshot:
    # A snapshot from a raw row of `SELECT_COLUMNS`.
    values = dict(zip(SNAPSHOT_COLUMNS, found, strict=True))
    for name in ("data", "tags", "extra"):
        # Django's psycopg setup leaves jsonb undecoded for raw cursors.
        if isinstance(values[name], str):
            values[name] = json.loads(values[name])
    major, minor, patch = (values.pop(name) for name in VERSION_COLUMNS)
    return opened(InstanceSnapshot(**values, data_version=(major, minor, patch)))


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
