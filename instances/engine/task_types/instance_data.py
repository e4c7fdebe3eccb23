"""Task types 13 (Get instance data), 15 (Get instances), 19 (Get instance): read other
instances through the engine's `InstanceReader` port."""

from __future__ import annotations

from instances.engine.errors import Codes
from instances.engine.task_types.base import (
    StandardResponse,
    TaskCall,
    TaskFailure,
    own_domain,
)


def _one(call: TaskCall) -> dict:
    task = call.task
    if call.reader is None:
        raise TaskFailure(Codes.TASK_UNSUPPORTED, "no instance reader is configured")
    ref = str(task.get("instance_id") or task.get("key") or "")
    asking = call.parent.instance_id if call.parent is not None else None
    found = call.reader.instance(
        own_domain(call), str(task.get("flow") or ""), ref, asked_by=asking
    )
    if found is None:
        raise TaskFailure(
            Codes.TASK_INSTANCE_NOT_FOUND, f"instance {ref!r} of {task.get('flow')} not found"
        )
    return found


def execute_get_instance_data(call: TaskCall) -> StandardResponse:
    """The data of one instance (by `instanceId` or `key`)."""
    return StandardResponse(status_code=200, data=_one(call)["data"])


def execute_get_instance(call: TaskCall) -> StandardResponse:
    """One instance: id, key, status, state and data."""
    return StandardResponse(status_code=200, data=_one(call))


def execute_get_instances(call: TaskCall) -> StandardResponse:
    """A page of instances of a workflow (`filter` as the list API's filter language)."""
    task = call.task
    if call.reader is None:
        raise TaskFailure(Codes.TASK_UNSUPPORTED, "no instance reader is configured")
    filters = task.get("filter")
    sort = task.get("sort")
    items = call.reader.instances(
        own_domain(call),
        str(task.get("flow") or ""),
        # A string in any form, a JSON filter object, or a list of them that must all hold.
        filter_text=filters or None,
        page=int(task.get("page") or 1),
        page_size=int(task.get("page_size") or 10),
        sort=str(sort) if sort else None,
    )
    return StandardResponse(status_code=200, data={"items": items})
