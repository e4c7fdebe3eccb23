"""Every row of an instance as one unit, for the archive (`instances.archive`): the tables that
hold them, reading them all, deleting them all (the links from rows that stay nulled first), and
inserting them back (a link put back only where both ends exist). The caller owns the
transaction; the archive's candidates are Completed instances nothing drives any more.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable
from typing import Any, NamedTuple

from django.apps import apps
from django.db import models

from instances.models import (
    Correlation,
    Incident,
    Instance,
    InstanceDataVersion,
    InstanceTask,
    InstanceTransition,
    OperatorAction,
)
from instances.queue import jobs_archived_delete, jobs_archived_list, jobs_restore


class Table(NamedTuple):
    """A table holding rows of an instance, with the column that names the instance."""

    name: str
    model: type[models.Model]
    column: str

    def rows_of(self, ids: list[Any]) -> list[dict[str, Any]]:
        """Every row of the instances `ids`, as column values, in id order."""
        found = self.model._default_manager.filter(**{f"{self.column}__in": ids})
        return list(found.order_by("pk").values())

    def delete(self, ids: list[Any]) -> None:
        """Delete every row of the instances `ids` in one raw DELETE."""
        queryset = self.model._default_manager.filter(**{f"{self.column}__in": ids})
        queryset._raw_delete(queryset.db)

    def insert(self, objects: list[Any]) -> None:
        """Insert restored rows as they were archived."""
        self.model._default_manager.bulk_create(objects)


class _JobTable(Table):
    """The job rows, read, deleted and inserted by the queue (the one module that queries
    them); the model only shapes restored rows."""

    def rows_of(self, ids: list[Any]) -> list[dict[str, Any]]:
        """Every job row of the instances `ids`, in id order."""
        return jobs_archived_list(instance_ids=ids)

    def delete(self, ids: list[Any]) -> None:
        """Delete every job row of the instances `ids`."""
        jobs_archived_delete(instance_ids=ids)

    def insert(self, objects: list[Any]) -> None:
        """Insert restored job rows."""
        jobs_restore(jobs=objects)


# Every table holding rows of an instance, in the order they are restored (referenced first);
# each with the column that names the instance. Deleted in the reverse order.
TABLES: tuple[Table, ...] = (
    Table("instance", Instance, "id"),
    Table("transition", InstanceTransition, "instance_id"),
    Table("correlation", Correlation, "parent_id"),
    Table("data_version", InstanceDataVersion, "instance_id"),
    Table("task", InstanceTask, "instance_id"),
    Table("incident", Incident, "instance_id"),
    _JobTable("job", apps.get_model("instances", "Job"), "instance_id"),
    Table("operator_action", OperatorAction, "instance_id"),
)
# Links from rows that stay (a completed relative archived later) to rows that leave: nulled on
# archive, recorded in the file as `link` rows, put back on restore when both ends are there.
LINK = "link"
CHILD_OF = "child-of"  # Instance.parent_correlation of another instance -> a leaving correlation
PARENT_OF = "parent-of"  # Correlation.child of another instance's correlation -> a leaving one


class UnknownColumn(Exception):
    """An archived row names a column its table no longer has."""


def instance_rows_of(
    ids: list[Any], instances: list[dict[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """Every row of every table for `ids` (each tagged with its instance under `_instance`),
    and the `link` rows from the rows that stay."""
    rows: dict[str, list[dict[str, Any]]] = {"instance": instances}
    for table in TABLES[1:]:
        rows[table.name] = [{**row, "_instance": row[table.column]} for row in table.rows_of(ids)]
    for row in instances:
        row["_instance"] = row["id"]
    leaving = [row["id"] for row in rows["correlation"]]
    links = [
        {"kind": CHILD_OF, "instance_id": child, "correlation_id": correlation, "_instance": parent}
        for child, correlation, parent in Instance.objects.filter(parent_correlation_id__in=leaving)
        .exclude(pk__in=ids)
        .values_list("pk", "parent_correlation_id", "parent_correlation__parent_id")
    ]
    links += [
        {"kind": PARENT_OF, "correlation_id": correlation, "instance_id": child, "_instance": child}
        for correlation, child in Correlation.objects.filter(child_id__in=ids)
        .exclude(parent_id__in=ids)
        .values_list("pk", "child_id")
    ]
    rows[LINK] = links
    return rows


def instance_rows_delete(ids: list[Any], rows: dict[str, list[dict[str, Any]]]) -> None:
    """Null the links from rows that stay, then delete every row of the batch, children first.
    Raw deletes: what refers to each row is already gone or nulled, so Django's collector
    (a SELECT per related table and row) has nothing to do."""
    leaving = [row["id"] for row in rows["correlation"]]
    Instance.objects.filter(parent_correlation_id__in=leaving).exclude(pk__in=ids).update(
        parent_correlation=None
    )
    Correlation.objects.filter(child_id__in=ids).exclude(parent_id__in=ids).update(child=None)
    # Links inside the batch need no nulling: the foreign keys are checked at commit (Django
    # creates them DEFERRABLE INITIALLY DEFERRED), when both ends are gone.
    for table in reversed(TABLES):
        table.delete(ids)


def instance_rows_insert(grouped: dict[str, list[dict[str, Any]]]) -> Counter[str]:
    """Insert the rows of one instance (`grouped` by table, as `instance_rows_of` read them) and
    put back the links archiving nulled; how many rows went back, per table."""
    counts: Counter[str] = Counter()
    transitions = {uuid.UUID(row["id"]) for row in grouped.get("transition", [])}
    for table in TABLES:
        objects = [_restored(table.model, row) for row in grouped.get(table.name, [])]
        for restored in objects:
            _drop_dangling(restored, transitions)
        table.insert(objects)
        counts[table.name] = len(objects)
    _relink(grouped.get(LINK, []))
    counts[LINK] = len(grouped.get(LINK, []))
    return counts


def _restored(model: type[models.Model], row: dict[str, Any]) -> models.Model:
    fields = {f.attname: f for f in model._meta.concrete_fields}
    values = {}
    for name, value in row.items():
        column = fields.get(name)
        if column is None:
            raise UnknownColumn(f"{model.__name__} has no column {name!r} any more")
        values[name] = column.to_python(value) if value is not None else None
    return model(**values)


def _drop_dangling(restored: models.Model, transitions: set[uuid.UUID]) -> None:
    # References to rows that are gone now (a correlation or child archived meanwhile, a
    # transition of another instance) come back as NULL, as deleting them would have left them.
    if (
        isinstance(restored, Instance)
        and restored.parent_correlation_id is not None
        and not Correlation.objects.filter(pk=restored.parent_correlation_id).exists()
    ):
        restored.parent_correlation_id = None
    if (
        isinstance(restored, Correlation)
        and restored.child_id is not None
        and not Instance.objects.filter(pk=restored.child_id).exists()
    ):
        restored.child_id = None
    transition_id = getattr(restored, "transition_id", None)
    if transition_id is not None and transition_id not in transitions:
        restored.transition_id = None  # type: ignore[attr-defined]


def _relink(links: Iterable[dict[str, Any]]) -> None:
    for link in links:
        correlation, child = int(link["correlation_id"]), uuid.UUID(str(link["instance_id"]))
        if not Correlation.objects.filter(pk=correlation).exists():
            continue
        if link["kind"] == CHILD_OF:
            Instance.objects.filter(pk=child, parent_correlation__isnull=True).update(
                parent_correlation_id=correlation
            )
        elif Instance.objects.filter(pk=child).exists():
            Correlation.objects.filter(pk=correlation, child__isnull=True).update(child_id=child)
