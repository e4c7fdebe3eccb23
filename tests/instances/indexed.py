"""A workflow whose master schema marks search fields `x-indexed` (a number, a string, a
date-time, a nested nullable string) beside a field it does not, its instances, and the
clean-up of the search indexes and statistics a test built (they outlive the test's data)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection

from instances.indexes import PREFIX, STATISTICS_PREFIX, TABLE
from instances.models import Instance
from tests.engine.builders import state, transition, workflow
from tests.instances.workflows import publish
from workflows.services import component_publish

DOMAIN, FLOW = "core", "pay"
BASE = f"/api/v1/{DOMAIN}/workflows/{FLOW}/instances"
FIELDS = {
    "amount": {"type": "number", "x-indexed": True},
    "name": {"type": "string", "x-indexed": True},
    "when": {"type": "string", "format": "date-time", "x-indexed": True},
    "customer": {
        "type": "object",
        "properties": {"id": {"type": ["string", "null"], "x-indexed": True}},
    },
    "note": {"type": "string"},
}


def master(version: str = "1.0.0", fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """The master schema component."""
    return {
        "key": "pay-master",
        "domain": DOMAIN,
        "version": version,
        "flow": "sys-schemas",
        "flowVersion": "1.0.0",
        "tags": ["test"],
        "attributes": {
            "type": "schema",
            "schema": {"type": "object", "properties": fields or FIELDS},
        },
    }


def publish_indexed(version: str = "1.0.0", fields: dict[str, Any] | None = None) -> None:
    """Publish the master schema and the workflow that uses it, both at `version`."""
    component_publish(document=master(version, fields))
    document = workflow(
        [state("open", 1, [transition("finish", "done")]), state("done", 3, subType=1)],
        key=FLOW,
        schema={"key": "pay-master", "domain": DOMAIN, "version": version, "flow": "sys-schemas"},
    )
    document["version"] = version
    publish(document)


def make_instances(count: int) -> list[Instance]:
    """`count` instances, row i: amount i, name `name-i`, a date i hours after 2024-01-01, a
    customer id `C-i` (null for every tenth), a note `note-i`; every fifth completed."""
    start = datetime(2024, 1, 1, tzinfo=UTC)
    rows = []
    for i in range(count):
        done = i % 5 == 0
        rows.append(
            Instance(
                domain=DOMAIN,
                workflow_key=FLOW,
                workflow_version="1.0.0",
                key=f"pay-{i}",
                status="C" if done else "A",
                current_state="done" if done else "open",
                effective_state="done" if done else "open",
                etag="e",
                entity_etag="e",
                created_at=start + timedelta(minutes=i),
                updated_at=start + timedelta(minutes=2 * i),
                completed_at=start + timedelta(hours=i) if done else None,
                data={
                    "amount": i,
                    "name": f"name-{i}",
                    "when": (start + timedelta(hours=i)).isoformat().replace("+00:00", "Z"),
                    "customer": {"id": None if i % 10 == 0 else f"C-{i}"},
                    "note": f"note-{i}",
                },
            )
        )
    return Instance.objects.bulk_create(rows)


def search_indexes() -> dict[str, bool]:
    """The search indexes and planner statistics objects of the instance table: name -> valid
    (statistics are always valid)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c "
            "ON c.oid = i.indexrelid WHERE i.indrelid = %s::regclass AND c.relname LIKE %s",
            [TABLE, PREFIX + "%"],
        )
        found = dict(cursor.fetchall())
        cursor.execute(
            "SELECT stxname FROM pg_statistic_ext WHERE stxrelid = %s::regclass "
            "AND stxname LIKE %s",
            [TABLE, STATISTICS_PREFIX + "%"],
        )
        found |= {name: True for (name,) in cursor.fetchall()}
    return found


def drop_search_indexes() -> None:
    """Drop every search index and statistics object (not data: a flush leaves them)."""
    with connection.cursor() as cursor:
        for name in search_indexes():
            kind = "STATISTICS" if name.startswith(STATISTICS_PREFIX) else "INDEX"
            cursor.execute(f'DROP {kind} IF EXISTS "{name}"')
