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
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, cast

from django.db import DatabaseError, connection
from django.db.models import Expression, Q, QuerySet, UniqueConstraint
from django.db.models.sql import Query as SqlQuery

from instances.engine.definition import WorkflowDefinition
from instances.filters import ATTRIBUTES_PREFIX, Query, SortKey
from instances.filters.language import (
    TEXT_MATCH_OPERATORS,
    Condition,
    DataPath,
    Negation,
    Node,
    boolean_in,
    number_in,
    parse_instant,
)
from instances.filters.sql import (
    indexed_column_text,
    indexed_instant,
    indexed_text,
    indexed_type,
    indexed_value,
)
from instances.models import Instance
from instances.wiring import engine
from vnext.conf import vnext_setting
from workflows.documents import ComponentKind
from workflows.models import Component

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
TRIGRAM = "pg_trgm"
# Any constant: two `indexes_apply` runs must not drop each other's builds in progress.
_APPLY_LOCK = 0x766E_6578_7469_7831


class Access(StrEnum):
    """What a condition or sort needs of an index on a data field."""

    VALUE = "eq, ne, gt, ge, lt, le, between, in, nin, isnull"
    INSTANT = "date comparisons (ISO 8601 operands)"
    TEXT = "like, startswith, endswith"
    SORT = "sort ascending"
    SORT_DESC = "sort descending"


class IndexState(StrEnum):
    """Where a planned index stands in the database."""

    PRESENT = "present"
    MISSING = "missing"
    INVALID = "invalid"  # an interrupted concurrent build: dropped and built again
    SKIPPED = "skipped"  # needs pg_trgm, which this server cannot install


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


@dataclass(frozen=True)
class PlannedIndex:
    spec: IndexSpec
    state: IndexState


@dataclass(frozen=True)
class WorkflowFields:
    """A workflow's indexed fields, from its newest version's master schema."""

    domain: str
    key: str
    version: str
    schema: str  # `domain/key@version` of the master schema, "" for none
    fields: tuple[IndexedField, ...]
    note: str = ""


class TrigramState(StrEnum):
    """Whether the trigram indexes (`like`, `startswith`, `endswith`) can be built."""

    INSTALLED = "installed"
    INSTALLABLE = "not installed; indexes_apply installs it (needs CREATE on the database)"
    UNAVAILABLE = "not available on this server: like / startswith / endswith stay unindexed"


@dataclass(frozen=True)
class IndexPlan:
    """Every planned index with its state, the columns model indexes serve, and the obsolete
    `vnext_ix_` indexes (in the plan's scope)."""

    trigram: TrigramState
    workflows: list[WorkflowFields]
    indexes: list[PlannedIndex]
    served: list[tuple[str, str]]
    obsolete: list[ExistingIndex]

    @property
    def pending(self) -> list[PlannedIndex]:
        """The indexes to build: missing, or invalid (rebuilt)."""
        return [item for item in self.indexes if item.state in _PENDING]

    def counts(self) -> dict[IndexState, int]:
        """How many planned indexes are in each state."""
        return {state: sum(item.state is state for item in self.indexes) for state in IndexState}


_PENDING = (IndexState.MISSING, IndexState.INVALID)


class IndexesUnsupported(Exception):
    """Search indexes are planned for PostgreSQL only."""


def supported() -> bool:
    """Whether the database is one search indexes are planned for (PostgreSQL)."""
    return connection.vendor == "postgresql"


def index_plan(workflows: Sequence[tuple[str, str]] | None = None) -> IndexPlan:
    """The search indexes of every published workflow (or of `workflows`, `(domain, key)`
    each; unknown ones raise `LookupError`) and of the instance columns, against what the
    database holds."""
    if not supported():
        raise IndexesUnsupported(
            f"search indexes are PostgreSQL's; this database is {connection.vendor}"
        )
    published = sorted(
        set(Component.objects.filter(kind=ComponentKind.WORKFLOW).values_list("domain", "key"))
    )
    if workflows is not None:
        unknown = sorted(set(workflows) - set(published))
        if unknown:
            raise LookupError(
                "not published: " + ", ".join(f"{domain}/{key}" for domain, key in unknown)
            )
        published = sorted(set(workflows))
    chosen = [_workflow_fields(domain, key) for domain, key in published]
    specs, served = column_index_specs()
    for item in chosen:
        specs += field_index_specs(item.domain, item.key, item.fields)
    specs = list({spec.name: spec for spec in reversed(specs)}.values())[::-1]  # each once
    existing = {index.name: index for index in _existing_indexes()}
    trigram = _trigram_state()
    planned = []
    for spec in specs:
        found = existing.get(spec.name)
        if found is not None:
            state = IndexState.PRESENT if found.valid else IndexState.INVALID
        elif spec.trigram and trigram is TrigramState.UNAVAILABLE:
            state = IndexState.SKIPPED
        else:
            state = IndexState.MISSING
        planned.append(PlannedIndex(spec, state))
    names = {spec.name for spec in specs}
    # Narrowed to some workflows, the plan cannot tell whether another still needs a shared
    # object: it calls obsolete only what belonged to the chosen ones.
    scopes = {f"{item.domain}/{item.key}" for item in chosen}
    obsolete = [
        index
        for index in existing.values()
        if index.name not in names and (workflows is None or index.scope in scopes)
    ]
    return IndexPlan(trigram, chosen, planned, served, sorted(obsolete, key=lambda i: i.name))


def _workflow_fields(domain: str, key: str) -> WorkflowFields:
    definition = engine().components.workflow(domain, key, None)
    if definition is None:
        return WorkflowFields(domain, key, "", "", (), "not readable from the registry")
    reference = definition.master_schema_reference
    if reference is None:
        return WorkflowFields(domain, key, definition.version, "", (), "no master schema")
    document = engine().components.component("schema", reference)
    shown = f"{reference.get('domain')}/{reference.get('key')}@{reference.get('version')}"
    if document is None:
        return WorkflowFields(
            domain, key, definition.version, shown, (), "its master schema is not published"
        )
    fields = tuple(indexed_fields((document.get("attributes") or {}).get("schema")))
    return WorkflowFields(domain, key, definition.version, shown, fields)


def _existing_indexes() -> list[ExistingIndex]:
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


def _trigram_state() -> TrigramState:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = %s), "
            "EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = %s)",
            [TRIGRAM, TRIGRAM],
        )
        installed, available = cursor.fetchone()
    if installed:
        return TrigramState.INSTALLED
    return TrigramState.INSTALLABLE if available else TrigramState.UNAVAILABLE


def plan_sql(plan: IndexPlan, *, everything: bool = False) -> str:
    """The plan as reviewed SQL: what is present as comments, then the statements that build
    what is missing (rebuild what is invalid); obsolete indexes as commented-out drops.
    `everything`: the statements of present indexes too (to build the same elsewhere)."""
    counts = plan.counts()
    lines = [
        "-- vNext search indexes and their planner statistics (manage.py indexes_plan): "
        f"{len(plan.indexes)} planned, {counts[IndexState.PRESENT]} present, "
        f"{counts[IndexState.MISSING]} missing, {counts[IndexState.INVALID]} invalid, "
        f"{counts[IndexState.SKIPPED]} skipped, {len(plan.obsolete)} obsolete.",
        "-- Each CREATE INDEX CONCURRENTLY runs outside a transaction block (psql autocommit);",
        "-- manage.py indexes_apply runs them so, and is safe to run again.",
        f"-- {TRIGRAM}: {plan.trigram}.",
    ]
    for column, model_index in plan.served:
        lines.append(f"-- {column}: served by the model index {model_index}.")
    for item in plan.workflows:
        fields = ", ".join(indexed.name for indexed in item.fields) or "none"
        schema = f", master schema {item.schema}" if item.schema else ""
        note = f" ({item.note})" if item.note else ""
        lines.append(
            f"-- {item.domain}/{item.key} {item.version}{schema}: x-indexed {fields}{note}."
        )
    if any(p.spec.trigram and p.state in _PENDING for p in plan.indexes) and (
        plan.trigram is TrigramState.INSTALLABLE
    ):
        lines += ["", f"CREATE EXTENSION IF NOT EXISTS {TRIGRAM};"]
    for planned in plan.indexes:
        spec, state = planned.spec, planned.state
        scope = "every workflow" if spec.scope == ALL_WORKFLOWS else spec.scope
        heading = f"-- {state}: {scope} {spec.target} ({spec.serves})"
        if state is IndexState.PRESENT and not everything:
            lines.append(f"{heading}: {spec.name}")
            continue
        lines += ["", heading]
        if state is IndexState.SKIPPED:
            lines.append(f"-- needs {TRIGRAM}: {spec.statements()[0]};")
            continue
        if state is IndexState.INVALID:
            # An index a concurrent build left unfinished: never used, still written to.
            lines.append(f'DROP INDEX CONCURRENTLY IF EXISTS "{spec.name}";')
        lines += [f"{statement};" for statement in spec.statements()]
    if any(p.spec.statistics and (p.state in _PENDING or everything) for p in plan.indexes):
        lines += [
            "",
            "-- New statistics objects are empty until the table is analysed.",
            f'ANALYZE "{TABLE}";',
        ]
    if plan.obsolete:
        lines += ["", "-- Obsolete (no longer planned; indexes_apply --drop-obsolete drops them):"]
        for index in plan.obsolete:
            kind = "STATISTICS" if index.statistics else "INDEX CONCURRENTLY"
            lines.append(f'-- DROP {kind} IF EXISTS "{index.name}";  {index.comment}')
    return "\n".join(lines) + "\n"


# --- applying it -----------------------------------------------------------------------------


@dataclass
class ApplyResult:
    """What `index_apply` did: built (or rebuilt), failed, skipped and dropped index names."""

    built: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


class ApplyRefused(Exception):
    """`index_apply` cannot run here: inside a transaction, or beside another run."""


def index_apply(
    plan: IndexPlan, *, drop_obsolete: bool = False, report: Callable[[str], None] = print
) -> ApplyResult:
    """Build the plan's missing indexes and rebuild its invalid ones, each with
    `CREATE INDEX CONCURRENTLY` in its own autocommitted statement (writes go on meanwhile);
    with `drop_obsolete`, drop its obsolete ones concurrently too. A failed build is reported
    and the others go on (one left invalid is rebuilt by the next run). `report` hears the
    progress, one line per step."""
    if connection.in_atomic_block:
        raise ApplyRefused("indexes_apply builds concurrently: it cannot run in a transaction")
    result = ApplyResult()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [_APPLY_LOCK])
        if not cursor.fetchone()[0]:
            raise ApplyRefused("another indexes_apply is running on this database")
        try:
            _apply(cursor, plan, drop_obsolete, report, result)
        finally:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [_APPLY_LOCK])
    return result


def _apply(
    cursor: Any,
    plan: IndexPlan,
    drop_obsolete: bool,
    report: Callable[[str], None],
    result: ApplyResult,
) -> None:
    pending = plan.pending
    trigram_ready = plan.trigram is TrigramState.INSTALLED
    if plan.trigram is TrigramState.INSTALLABLE and any(p.spec.trigram for p in pending):
        try:
            cursor.execute(f"CREATE EXTENSION IF NOT EXISTS {TRIGRAM}")
            trigram_ready = True
            report(f"installed {TRIGRAM}")
        except DatabaseError as error:
            report(f"could not install {TRIGRAM} ({_first_line(error)}): trigram indexes skipped")
    result.skipped += [p.spec.name for p in plan.indexes if p.state is IndexState.SKIPPED]
    for number, planned in enumerate(pending, start=1):
        spec = planned.spec
        label = f"[{number}/{len(pending)}] {spec.name} {spec.scope} {spec.target} ({spec.serves})"
        if spec.trigram and not trigram_ready:
            report(f"{label}: skipped, needs {TRIGRAM}")
            result.skipped.append(spec.name)
            continue
        started = time.monotonic()
        try:
            if planned.state is IndexState.INVALID:
                report(f"{label}: dropping the invalid index an interrupted build left")
                cursor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{spec.name}"')
            report(f"{label}: building")
            for statement in spec.statements():
                cursor.execute(statement)
        except DatabaseError as error:
            report(f"{label}: FAILED ({_first_line(error)}); the next run builds it again")
            result.failed.append(spec.name)
            continue
        report(f"{label}: built in {time.monotonic() - started:.1f} s")
        result.built.append(spec.name)
    if any(p.spec.statistics and p.spec.name in result.built for p in pending):
        # New statistics objects are empty until the table is analysed.
        started = time.monotonic()
        cursor.execute(f'ANALYZE "{TABLE}"')
        report(f"analysed {TABLE} in {time.monotonic() - started:.1f} s")
    if drop_obsolete:
        for index in plan.obsolete:
            kind = "STATISTICS" if index.statistics else "INDEX CONCURRENTLY"
            try:
                cursor.execute(f'DROP {kind} IF EXISTS "{index.name}"')
            except DatabaseError as error:
                report(f"obsolete {index.name}: FAILED to drop ({_first_line(error)})")
                result.failed.append(index.name)
                continue
            report(f"dropped obsolete {index.name} {index.comment}")
            result.dropped.append(index.name)


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


# --- what a listing asks of them -----------------------------------------------------------


def missing_field_indexes(domain: str, workflow: str, schema: Any) -> list[IndexSpec]:
    """The indexes of the `x-indexed` fields of `schema` (a workflow's master schema) that the
    database lacks or holds invalid; none off PostgreSQL."""
    fields = indexed_fields(schema)
    if not fields or not supported():
        return []
    valid = {index.name for index in _existing_indexes() if index.valid}
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
    "ApplyRefused",
    "ApplyResult",
    "ExistingIndex",
    "IndexPlan",
    "IndexSpec",
    "IndexState",
    "IndexedField",
    "IndexesUnsupported",
    "PlannedIndex",
    "TrigramState",
    "WorkflowFields",
    "column_index_specs",
    "data_accesses",
    "field_index_specs",
    "flag_unindexed",
    "index_apply",
    "index_plan",
    "indexed_fields",
    "missing_field_indexes",
    "plan_sql",
    "planned_accesses",
    "supported",
    "unindexed_fields",
]
