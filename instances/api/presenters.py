"""The JSON shapes of instances in API answers (API.md sections 1-3)."""

from __future__ import annotations

from typing import Any

from instances.engine.records import InstanceSnapshot
from instances.models import Instance, InstanceTransition
from instances.selectors import incident_block
from instances.snapshots import snapshot_of


def _iso(value: Any) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def envelope(instance: InstanceSnapshot) -> dict[str, Any]:
    """The sync start/transition answer: `{id, key, status, attributes, eTag, entityEtag,
    extensions}`."""
    return {
        "id": str(instance.id),
        "key": instance.key,
        "status": str(instance.status),
        "attributes": instance.data,
        "eTag": instance.etag,
        "entityEtag": instance.entity_etag,
        "extensions": {},
    }


def metadata(instance: InstanceSnapshot, active_incident: dict[str, Any] | None) -> dict[str, Any]:
    """The `metadata` block of `GET instance`."""
    duration = None
    if instance.created_at:
        end = instance.completed_at or instance.updated_at or instance.created_at
        duration = (end - instance.created_at).total_seconds()
    return {
        "currentState": instance.current_state,
        "effectiveState": instance.effective_state,
        "status": str(instance.status),
        "effectiveStatus": str(instance.status),
        "effectiveStateType": instance.effective_state_type,
        "effectiveStateSubType": instance.effective_state_subtype,
        "createdAt": _iso(instance.created_at),
        "modifiedAt": _iso(instance.updated_at),
        "completedAt": _iso(instance.completed_at),
        "duration": duration,
        "createdBy": instance.created_by,
        "modifiedBy": instance.modified_by,
        "stage": instance.stage,
        "dataVersion": instance.data_version_text,
        "incident": incident_block(instance, active_incident),
    }


def instance_detail(
    instance: InstanceSnapshot, active_incident: dict[str, Any] | None = None
) -> dict[str, Any]:
    """`GET .../instances/{instance}`."""
    return {
        "id": str(instance.id),
        "key": instance.key,
        "flow": instance.workflow_key,
        "domain": instance.domain,
        "flowVersion": instance.workflow_version,
        "eTag": instance.etag,
        "entityEtag": instance.entity_etag,
        "tags": instance.tags,
        "metadata": metadata(instance, active_incident),
        "attributes": instance.data,
        "extensions": {},
    }


def list_item(row: Instance, active_incident: dict[str, Any] | None = None) -> dict[str, Any]:
    """One instance of a listing, with its newest open incident (see `active_incidents`)."""
    return instance_detail(snapshot_of(row), active_incident)


def history_row(row: InstanceTransition) -> dict[str, Any]:
    """One row of `GET .../transitions`."""
    return {
        "id": str(row.id),
        "transitionKey": row.transition_key,
        "fromState": row.from_state,
        "toState": row.to_state,
        "effectiveState": row.effective_state,
        "effectiveStateType": row.effective_state_type,
        "effectiveStateSubType": row.effective_state_subtype,
        "triggerType": row.trigger_type,
        "stage": row.stage,
        "status": row.status,
        "actor": row.actor,
        "startedAt": _iso(row.started_at),
        "finishedAt": _iso(row.finished_at),
        "errorCode": row.error_code or None,
        "errorMessage": row.error_message or None,
    }
