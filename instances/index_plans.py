"""The search-index plan against the database's catalog and its build (README "Search indexes"):
what `manage.py indexes_plan` shows a DBA as reviewed SQL (present, missing, invalid, skipped and
obsolete indexes of every published workflow and of the instance columns) and what
`manage.py indexes_apply` builds, each `CREATE INDEX CONCURRENTLY` outside any transaction. The
indexes themselves are defined in `instances.indexes`. PostgreSQL only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from django.db import DatabaseError, connection

from instances.indexes import (
    ALL_WORKFLOWS,
    TABLE,
    ExistingIndex,
    IndexedField,
    IndexSpec,
    column_index_specs,
    existing_indexes,
    field_index_specs,
    indexed_fields,
    supported,
)
from instances.wiring import engine
from workflows.documents import ComponentKind
from workflows.models import Component

TRIGRAM = "pg_trgm"
# Any constant: two `indexes_apply` runs must not drop each other's builds in progress.
_APPLY_LOCK = 0x766E_6578_7469_7831


class IndexState(StrEnum):
    """Where a planned index stands in the database."""

    PRESENT = "present"
    MISSING = "missing"
    INVALID = "invalid"  # an interrupted concurrent build: dropped and built again
    SKIPPED = "skipped"  # needs pg_trgm, which this server cannot install


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
    existing = {index.name: index for index in existing_indexes()}
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
