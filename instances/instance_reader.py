"""`InstanceReader` for the Get-instance(s) task types: other instances as a task may see them
(their fields encrypted at rest sealed unless it is the instance asking)."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import connections

from instances.engine.protection import as_stored
from instances.filters import parse_filter, parse_sort
from instances.models import (
    Instance,
)
from instances.snapshots import newest_instance, protection_for, sealed_paths
from workflows.models import DomainReach


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
