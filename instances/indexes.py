"""Search indexes of the instance listings (README "Search indexes"): what lets the query
language's conditions and sorts on a workflow's `x-indexed` master-schema fields and on the
instance columns be answered without reading the whole table, planned as SQL a DBA reviews
(`manage.py indexes_plan`) and built without blocking writes (`manage.py indexes_apply`:
`CREATE INDEX CONCURRENTLY`, each outside any transaction). PostgreSQL only.

- A data field gets partial indexes (`WHERE domain = ... AND workflow_key = ...`: small, and
  one table holds many workflows): a B-tree on (JSON type, value) for the comparisons (each
  typed branch of one is a tight range), a B-tree on (value, id) per sort direction (rows
  without the value sort last both ways, which no index gives read backwards), a trigram GIN
  on `UPPER(text)` for `like` / `startswith` / `endswith` when its declared type admits
  strings, or a B-tree on (JSON type, instant) when it declares `format: date` or
  `date-time`. And planner statistics on those expressions (`CREATE STATISTICS`): PostgreSQL
  keeps none for a partial index's, and guessing would make it read a whole workflow through
  an index for a condition most rows meet.
- The instance columns get B-trees shared by every workflow, led by (domain, workflow_key),
  unless a model index already leads with the same columns; `key` a trigram GIN too.
- The expressions are `instances.filters.sql`'s own, compiled as Django compiles a query: the
  planner uses an index only on the very expression a condition or sort reads.
- Each is named by a hash of its definition (`vnext_ix_...`, `vnext_st_...`) and commented
  with what it serves, so the plan is idempotent and tells present, missing, invalid (left by
  an interrupted concurrent build: rebuilt) and obsolete ones apart.
- A workflow's fields are those its newest published version's master schema marks.

The plan against the catalog and its build are `instances.index_plans`; what a listing asks of
the indexes (the unindexed-field warning) is at the end of this module.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, cast

from django.db import connection
from django.db.models import Expression, Q, QuerySet, UniqueConstraint
from django.db.models.sql import Query as SqlQuery

from instances.engine.definition import WorkflowDefinition
from instances.filters import ATTRIBUTES_PREFIX, Query, SortKey
from instances.filters.language import boolean_in, number_in, parse_instant
from instances.filters.sql import (
    indexed_column_text,
    indexed_instant,
    indexed_text,
    indexed_type,
    indexed_value,
)
from instances.filters.tree import TEXT_MATCH_OPERATORS, Condition, DataPath, Negation, Node
from instances.models import Instance
from instances.wiring import engine
from vnext.conf import vnext_setting

logger = logging.getLogger(__name__)

PREFIX = "vnext_ix_"
STATISTICS_PREFIX = "vnext_st_"
STATISTICS = "statistics"
_TYPES = "planner statistics: JSON types by workflow"
_VALUES = "planner statistics: values"
_TEXTS = "planner statistics: texts"
_INSTANTS = "planner statistics: instants"
TABLE = Instance._meta.db_table
ALL_WORKFLOWS = "*"


class Access(StrEnum):
    """What a condition or sort needs of an index on a data field."""

    VALUE = "eq, ne, gt, ge, lt, le, between, in, nin, isnull"
    INSTANT = "date comparisons (ISO 8601 operands)"
    TEXT = "like, startswith, endswith"
    SORT = "sort ascending"
    SORT_DESC = "sort descending"


@dataclass(frozen=True)
class IndexedField:
    """A master-schema field marked `x-indexed`, with what its declared type admits."""

    path: tuple[str, ...]
    text: bool  # the type admits strings: like / startswith / endswith
    instant: bool  # `format: date` or `date-time`: date comparisons

    @property
    def name(self) -> str:
        """The field as the query language names it (`attributes.customer.id`)."""
        return ATTRIBUTES_PREFIX + ".".join(self.path)

    @property
    def accesses(self) -> frozenset[Access]:
        """What the field's planned indexes serve."""
        found = {Access.VALUE, Access.SORT, Access.SORT_DESC}
        if self.text:
            found.add(Access.TEXT)
        if self.instant:
            found.add(Access.INSTANT)
        return frozenset(found)


def indexed_fields(schema: Any) -> list[IndexedField]:
    """The fields of a master schema marked `x-indexed: true`, reached from the root through
    nested `properties` (publishing refuses the mark anywhere else), by path."""
    found: list[IndexedField] = []

    def walk(node: Any, path: tuple[str, ...]) -> None:
        properties = node.get("properties") if isinstance(node, dict) else None
        if not isinstance(properties, dict):
            return
        for name, child in properties.items():
            if not isinstance(child, dict):
                continue
            here = (*path, str(name))
            if child.get("x-indexed") is True:
                found.append(_indexed_field(child, here))
            walk(child, here)

    walk(schema, ())
    return sorted(found, key=lambda indexed: indexed.path)


def _indexed_field(node: dict[str, Any], path: tuple[str, ...]) -> IndexedField:
    declared = node.get("type")
    types = {declared} if isinstance(declared, str) else set(declared or [])
    strings = not types or "string" in types
    instant = strings and node.get("format") in ("date", "date-time")
    # A date is searched by ranges (its instant index), not by pieces of its text.
    return IndexedField(path, text=strings and not instant, instant=instant)


# --- index definitions -------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexSpec:
    """One planned index, or statistics object (`method` "statistics"): its SQL, and what it
    serves (`scope` is `domain/workflow`, or `ALL_WORKFLOWS` for the column indexes every
    workflow shares)."""

    scope: str
    target: str
    serves: str
    method: str
    columns: tuple[str, ...]
    predicate: str = ""

    @property
    def statistics(self) -> bool:
        """Planner statistics rather than an index."""
        return self.method == STATISTICS

    @property
    def trigram(self) -> bool:
        """Whether building it needs the pg_trgm extension."""
        return any(column.endswith(" gin_trgm_ops") for column in self.columns)

    @property
    def definition(self) -> str:
        """What it is, in SQL (what its name is a hash of): `ON table USING method (columns)
        [WHERE predicate]`, or `[(mcv)] ON columns FROM table` for statistics."""
        columns = ", ".join(self.columns)
        if self.statistics:
            # More than one column: a most-common-values list of their combinations.
            kinds = "(mcv) " if len(self.columns) > 1 else ""
            return f'{kinds}ON {columns} FROM "{TABLE}"'
        where = f" WHERE {self.predicate}" if self.predicate else ""
        return f'ON "{TABLE}" USING {self.method} ({columns}){where}'

    @property
    def name(self) -> str:
        """Deterministic: the same definition always gets the same name."""
        prefix = STATISTICS_PREFIX if self.statistics else PREFIX
        return prefix + hashlib.sha256(self.definition.encode()).hexdigest()[:20]

    @property
    def comment(self) -> str:
        """Its catalog comment: `vnext:<scope>:<target>:<serves>`."""
        return f"vnext:{self.scope}:{self.target}:{self.serves}"

    def statements(self) -> list[str]:
        """The SQL that makes it (`IF NOT EXISTS`; an index `CONCURRENTLY`), then its comment."""
        if self.statistics:
            return [
                f'CREATE STATISTICS IF NOT EXISTS "{self.name}" {self.definition}',
                f'COMMENT ON STATISTICS "{self.name}" IS {_literal(self.comment)}',
            ]
        return [
            f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{self.name}" {self.definition}',
            f'COMMENT ON INDEX "{self.name}" IS {_literal(self.comment)}',
        ]


def _compose(sql: str, params: Sequence[Any]) -> str:
    """`sql` with `params` as quoted literals (PostgreSQL's operations compose it)."""
    return str(cast(Any, connection.ops).compose_sql(sql, params))


def _literal(value: Any) -> str:
    return _compose("%s", [value])


def _compiled(expression: Expression | Q) -> str:
    """SQL of an expression (or a condition) as an index holds it: unqualified columns, the
    parameters as literals; compiled as Django compiles a query, so it reads the same."""
    query = SqlQuery(Instance, alias_cols=False)
    compiler = query.get_compiler(connection=connection)
    if isinstance(expression, Q):
        sql, params = query.build_where(expression).as_sql(compiler, connection)
    else:
        sql, params = compiler.compile(expression.resolve_expression(query, allow_joins=False))
    return _compose(sql, params) if params else sql


def field_index_specs(
    domain: str, workflow: str, fields: Iterable[IndexedField]
) -> list[IndexSpec]:
    """The partial indexes of a workflow's indexed data fields, and the planner statistics
    that let PostgreSQL tell when to use them. (It keeps none for the expressions of a partial
    index, so without these it guesses every JSON type guard selective and reads a whole
    workflow through an index for a filter most rows match.)"""
    scope = f"{domain}/{workflow}"
    predicate = _compiled(Q(domain=domain, workflow_key=workflow))
    # Statistics are the table's (ALL_WORKFLOWS): one object serves every workflow indexing
    # the same path.
    specs = []
    for indexed in fields:
        path, name = indexed.path, indexed.name
        kind, value = f"({_compiled(indexed_type(path))})", f"({_compiled(indexed_value(path))})"
        specs += [
            IndexSpec(scope, name, Access.VALUE, "btree", (kind, value), predicate),
            IndexSpec(scope, name, Access.SORT, "btree", (value, '"id"'), predicate),
            IndexSpec(
                scope,
                name,
                Access.SORT_DESC,
                "btree",
                (f"{value} DESC NULLS LAST", '"id" DESC'),
                predicate,
            ),
            IndexSpec(
                ALL_WORKFLOWS, name, _TYPES, STATISTICS, ('"domain"', '"workflow_key"', kind)
            ),
            IndexSpec(ALL_WORKFLOWS, name, _VALUES, STATISTICS, (value,)),
        ]
        if indexed.text:
            text = f"({_compiled(indexed_text(path))})"
            specs += [
                IndexSpec(scope, name, Access.TEXT, "gin", (f"{text} gin_trgm_ops",), predicate),
                IndexSpec(ALL_WORKFLOWS, name, _TEXTS, STATISTICS, (text,)),
            ]
        if indexed.instant:
            instant = f"({_compiled(indexed_instant(path))})"
            specs += [
                IndexSpec(scope, name, Access.INSTANT, "btree", (kind, instant), predicate),
                IndexSpec(ALL_WORKFLOWS, name, _INSTANTS, STATISTICS, (instant,)),
            ]
    return specs


@dataclass(frozen=True)
class _ColumnIndex:
    target: str
    serves: str
    column: str  # the column it is for, after (domain, workflow_key)
    rest: tuple[str, ...]  # the index's further columns, as SQL
    descending: bool = False  # the column descends, rows without a value last


# The columns the query language filters and sorts on, each behind (domain, workflow_key): the
# status and state with the default order after them (newest first, read backwards), the
# instants with the `id` tie-break of every sort. `completedAt` descends (rows without one last,
# as the sort puts them: "recently completed first"), `key` ascends.
_COLUMN_INDEXES = (
    _ColumnIndex("status", "status filters, newest first", "status", ('"created_at"', '"id"')),
    _ColumnIndex(
        "currentState", "state filters, newest first", "current_state", ('"created_at"', '"id"')
    ),
    _ColumnIndex("createdAt", "ranges, sort", "created_at", ('"id"',)),
    _ColumnIndex("modifiedAt", "ranges, sort", "updated_at", ('"id"',)),
    _ColumnIndex(
        "completedAt", "ranges, sort descending", "completed_at", ('"id" DESC',), descending=True
    ),
    _ColumnIndex("key", "eq, in, isnull, sort ascending", "key", ('"id"',)),
)
_COLUMN_TEXT = ("key",)


def _model_index_leading(columns: tuple[str, ...]) -> str | None:
    """The name of an unconditional model index (or unique constraint) whose columns start
    with `columns` (directions aside), or None: a partial one serves only its own rows."""
    candidates: list[tuple[str, list[str]]] = [
        (index.name, list(index.fields))
        for index in Instance._meta.indexes
        if index.fields and index.condition is None
    ]
    candidates += [
        (constraint.name, list(constraint.fields))
        for constraint in Instance._meta.constraints
        if isinstance(constraint, UniqueConstraint)
        and constraint.fields
        and constraint.condition is None
    ]
    for name, fields in candidates:
        bare = tuple(item.lstrip("-") for item in fields)
        if bare[: len(columns)] == columns:
            return name
    return None


def column_index_specs() -> tuple[list[IndexSpec], list[tuple[str, str]]]:
    """The column indexes every workflow shares, and the columns a model index already serves
    (`(column, model index name)`)."""
    specs, served = [], []
    for index in _COLUMN_INDEXES:
        model_index = _model_index_leading(("domain", "workflow_key", index.column))
        if model_index is not None:
            served.append((index.target, model_index))
            continue
        column = connection.ops.quote_name(index.column)
        if index.descending:
            column += " DESC NULLS LAST"
        parts = ('"domain"', '"workflow_key"', column, *index.rest)
        specs.append(IndexSpec(ALL_WORKFLOWS, index.target, index.serves, "btree", parts))
    for name in _COLUMN_TEXT:
        text = _compiled(indexed_column_text(name))
        specs.append(
            IndexSpec(ALL_WORKFLOWS, name, Access.TEXT, "gin", (f"({text}) gin_trgm_ops",))
        )
    return specs, served


# --- the plan ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExistingIndex:
    """A `vnext_ix_` index (or `vnext_st_` statistics object) of the instance table, as the
    catalog has it."""

    name: str
    valid: bool
    definition: str
    comment: str
    statistics: bool = False

    @property
    def scope(self) -> str:
        """The scope its comment names (`domain/workflow` or `*`), "" when it names none."""
        parts = self.comment.split(":", 2)
        return parts[1] if len(parts) == 3 and parts[0] == "vnext" else ""


def supported() -> bool:
    """Whether the database is one search indexes are planned for (PostgreSQL)."""
    return connection.vendor == "postgresql"


def existing_indexes() -> list[ExistingIndex]:
    """The `vnext_ix_` indexes and `vnext_st_` statistics objects of the instance table."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, i.indisvalid, pg_get_indexdef(i.indexrelid), "
            "COALESCE(obj_description(i.indexrelid, 'pg_class'), '') "
            "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = %s::regclass AND c.relname LIKE %s",
            [TABLE, _like(PREFIX)],
        )
        found = [ExistingIndex(*row) for row in cursor.fetchall()]
        cursor.execute(
            "SELECT stxname, pg_get_statisticsobjdef(oid), "
            "COALESCE(obj_description(oid, 'pg_statistic_ext'), '') "
            "FROM pg_statistic_ext WHERE stxrelid = %s::regclass AND stxname LIKE %s",
            [TABLE, _like(STATISTICS_PREFIX)],
        )
        found += [
            ExistingIndex(name, True, definition, comment, statistics=True)
            for name, definition, comment in cursor.fetchall()
        ]
    return found


def _like(prefix: str) -> str:
    return prefix.replace("_", "\\_") + "%"


# --- what a listing asks of them -----------------------------------------------------------


def missing_field_indexes(domain: str, workflow: str, schema: Any) -> list[IndexSpec]:
    """The indexes of the `x-indexed` fields of `schema` (a workflow's master schema) that the
    database lacks or holds invalid; none off PostgreSQL."""
    fields = indexed_fields(schema)
    if not fields or not supported():
        return []
    valid = {index.name for index in existing_indexes() if index.valid}
    return [spec for spec in field_index_specs(domain, workflow, fields) if spec.name not in valid]


def planned_accesses(
    definition: WorkflowDefinition | None,
) -> dict[tuple[str, ...], frozenset[Access]]:
    """What the planned indexes of a workflow's fields serve, by path (`definition`: the
    workflow's newest version; memoised on it, published versions being immutable)."""
    if definition is None:
        return {}
    if "indexed_accesses" not in definition.memo:
        reference = definition.master_schema_reference
        document = engine().components.component("schema", reference) if reference else None
        schema = ((document or {}).get("attributes") or {}).get("schema")
        definition.memo["indexed_accesses"] = {
            indexed.path: indexed.accesses for indexed in indexed_fields(schema)
        }
    found: dict[tuple[str, ...], frozenset[Access]] = definition.memo["indexed_accesses"]
    return found


def data_accesses(query: Query, keys: Sequence[SortKey]) -> set[tuple[tuple[str, ...], Access]]:
    """What the conditions and sort keys of a listing on data fields need of an index."""
    found: set[tuple[tuple[str, ...], Access]] = set()
    if query.filter is not None:
        for condition in _conditions(query.filter):
            if isinstance(condition.target, DataPath):
                found |= {(condition.target.path, a) for a in _condition_accesses(condition)}
    for key in keys:
        if isinstance(key.target, DataPath):
            found.add((key.target.path, Access.SORT_DESC if key.descending else Access.SORT))
    return found


def _conditions(node: Node) -> Iterator[Condition]:
    if isinstance(node, Condition):
        yield node
    elif isinstance(node, Negation):
        yield from _conditions(node.part)
    else:
        for part in node.parts:
            yield from _conditions(part)


def _condition_accesses(condition: Condition) -> set[Access]:
    if condition.op in TEXT_MATCH_OPERATORS:
        return {Access.TEXT}
    if condition.op == "isnull":
        return {Access.VALUE}
    operands = condition.operand if isinstance(condition.operand, tuple) else (condition.operand,)
    found = set()
    for operand in operands:
        # Mirrors `sql._compare`: each typed branch of a comparison reads its own index.
        if not isinstance(operand, str):
            found.add(Access.VALUE)
            continue
        if number_in(operand) is not None or boolean_in(operand) is not None:
            found.add(Access.VALUE)
        found.add(Access.INSTANT if parse_instant(operand) is not None else Access.VALUE)
    return found


def unindexed_fields(
    definition: WorkflowDefinition | None, query: Query, keys: Sequence[SortKey]
) -> list[str]:
    """The data fields a listing filters or sorts on in a way no planned index serves."""
    planned = planned_accesses(definition)
    return sorted(
        {
            ATTRIBUTES_PREFIX + ".".join(path)
            for path, access in data_accesses(query, keys)
            if access not in planned.get(path, frozenset())
        }
    )


def flag_unindexed(
    queryset: QuerySet[Any], names: Sequence[str], *, domain: str, workflow: str
) -> tuple[str, ...]:
    """`names` (unindexed data fields of a listing) when the instance table is big enough
    for them to matter (its planner estimate at least `UNINDEXED_WARN_ROWS`), logged with the
    listing plan's cost; else nothing. PostgreSQL only."""
    if not names or not supported():
        return ()
    threshold = int(vnext_setting("UNINDEXED_WARN_ROWS"))
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass", [TABLE])
        row = cursor.fetchone()
    estimate = max(float(row[0]) if row else 0.0, 0.0)
    if estimate < threshold:
        return ()
    plan = json.loads(queryset.explain(format="json"))
    logger.warning(
        "listing of %s/%s filters or sorts on %s, which no index serves (about %d instances "
        "in the table; plan cost %.0f): mark the field x-indexed in the master schema and run "
        "manage.py indexes_apply",
        domain,
        workflow,
        ", ".join(names),
        estimate,
        plan[0]["Plan"]["Total Cost"],
    )
    return tuple(names)


__all__ = [
    "Access",
    "ExistingIndex",
    "IndexSpec",
    "IndexedField",
    "column_index_specs",
    "data_accesses",
    "existing_indexes",
    "field_index_specs",
    "flag_unindexed",
    "indexed_fields",
    "missing_field_indexes",
    "planned_accesses",
    "supported",
    "unindexed_fields",
]
