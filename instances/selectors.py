"""Instance reads: listing (the query language, the caller's visibility), history, incidents,
the active SubFlow chain and correlations, and the data a caller is shown. The built-in
functions (state, data, view, schema) are `instances.builtin_functions`."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from django.db.models import CharField, Max, Q, QuerySet, Value
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Coalesce
from django.db.models.lookups import In

from instances.engine.definition import (
    WorkflowDefinition,
)
from instances.engine.errors import Codes, VNextError
from instances.engine.execution import MAX_CHAIN_DEPTH
from instances.engine.overrides import NO_OVERRIDES, OVERRIDES_KEY, SubflowOverrides
from instances.engine.records import InstanceSnapshot, waiting_child
from instances.engine.roles import Caller, allowed
from instances.engine.visibility import (
    has_field_rules,
    shown_data,
    unreadable_paths,
)
from instances.filters import (
    check_sealed,
    data_paths,
    filter_q,
    grouped,
    parse_page,
    parse_query,
    sort_keys_of,
    sort_terms,
)
from instances.filters.keyset import (
    Cursor,
    cursor_annotations,
    decode_cursor,
    encode_cursor,
    key_terms,
    rows_after,
)
from instances.indexes import flag_unindexed, unindexed_fields
from instances.models import (
    Correlation,
    Incident,
    Instance,
    InstanceDataVersion,
    InstanceTransition,
)
from instances.snapshots import opened, sealed_paths, snapshot_of
from instances.status import (
    CorrelationStatus,
    FlowType,
    InstanceStatus,
)
from instances.wiring import engine
from vnext.conf import schema_hash_salt, vnext_setting
from workflows.documents import ComponentKind
from workflows.models import Component


@dataclass(frozen=True)
class Page:
    """One page of a listing."""

    items: list[Instance]
    page: int
    page_size: int
    has_next: bool
    # Data fields filtered or sorted on that no index serves, on a big table (`flag_unindexed`).
    unindexed: tuple[str, ...] = ()
    # The keyset cursor of the next page ("" when there is none), beside `page + 1`.
    next_cursor: str = ""

    @property
    def next_page_numbered(self) -> bool:
        """Whether the next page may still be asked by number (`VNEXT_MAX_PAGE_OFFSET`)."""
        return self.page * self.page_size <= int(vnext_setting("MAX_PAGE_OFFSET"))


@dataclass(frozen=True)
class Groups:
    """A listing grouped by `groupBy`: `{name, count?, sum?, avg?, min?, max?}` per group."""

    groups: list[dict[str, Any]]
    unindexed: tuple[str, ...] = ()


def instance_list(
    *,
    domain: str,
    workflow: str,
    filters: Sequence[str] = (),
    sort: str | None = None,
    order_by: str | None = None,
    group_by: str | None = None,
    aggregations: str | None = None,
    page: str | None = None,
    page_size: str | None = None,
    cursor: str | None = None,
    visible: Q | None = None,
    roles: frozenset[str] | None = None,
) -> Page | Groups:
    """Instances of a workflow through the query language (`instances.filters`): the
    `filters` (all of which must hold), sorted, one page (stable order), or their groups when
    the query has a `groupBy`. `visible` keeps only the instances the caller may read
    (`readable_instances`); with the caller's `roles`, a data field the master schema hides,
    masks or encrypts for them is refused (`invalid_column`) wherever the query names it.

    A page is asked by number (`page`: rows skipped with OFFSET, at most
    `VNEXT_MAX_PAGE_OFFSET` of them, else 400) or by the `cursor` the previous page gave
    (keyset: the rows after its last one, in the same order, at any depth)."""
    number, size = parse_page(page, page_size)
    query = parse_query(list(filters), group_by=group_by, aggregations=aggregations)
    keys = sort_keys_of(sort, order_by)
    terms = key_terms(keys)
    after: Cursor | None = None
    if cursor is not None:
        if page is not None:
            raise VNextError(Codes.FILTER_INVALID, "Give page or cursor, not both.")
        if query.group is not None:
            raise VNextError(Codes.FILTER_INVALID, "groupBy answers groups: no cursor.")
        after = decode_cursor(keys, terms, cursor)
        number = after.page
    elif query.group is None:
        _check_page_offset(number, size)
    queryset: QuerySet[Instance] = Instance.objects.filter(domain=domain, workflow_key=workflow)
    if visible is not None:
        queryset = queryset.filter(visible)
    targets = [*query.targets(), *(key.target for key in keys)]
    unindexed: list[str] = []
    if data_paths(targets):
        # Refused: paths holding cipher text, and paths the caller may not read as stored.
        check_sealed(targets, sealed_paths(domain, workflow) | _unreadable(domain, workflow, roles))
        newest = engine().components.workflow(domain, workflow, None)
        unindexed = unindexed_fields(newest, query, [] if query.group else keys)
    queryset = queryset.filter(filter_q(query.filter))
    if query.group is not None:
        flagged = flag_unindexed(queryset, unindexed, domain=domain, workflow=workflow)
        return Groups(grouped(queryset, query.group), flagged)
    queryset = queryset.order_by(*sort_terms(keys)).annotate(**cursor_annotations(terms))
    if after is not None:
        page_query = queryset.filter(rows_after(terms, after.values))[: size + 1]
    else:
        start = (number - 1) * size
        page_query = queryset[start : start + size + 1]
    flagged = flag_unindexed(page_query, unindexed, domain=domain, workflow=workflow)
    rows = list(page_query)
    has_next = len(rows) > size
    next_cursor = encode_cursor(keys, terms, number + 1, rows[size - 1]) if has_next else ""
    return Page(rows[:size], number, size, has_next, flagged, next_cursor)


def instance_ids_matching(
    *,
    domain: str,
    workflow: str,
    filters: str | dict[str, Any] | Sequence[str] = (),
    visible: Q | None = None,
    roles: frozenset[str] | None = None,
) -> QuerySet[Instance]:
    """The instances of a workflow the list API's `filters` match (and `visible` keeps), as
    an id-only queryset in creation order: what a batch operation freezes. The same checks as
    `instance_list` (refused fields, a `groupBy` makes no sense here)."""
    query = parse_query(filters if isinstance(filters, str | dict) else list(filters))
    if query.group is not None:
        raise VNextError(Codes.FILTER_INVALID, "A batch filter selects instances: no groupBy.")
    queryset: QuerySet[Instance] = Instance.objects.filter(domain=domain, workflow_key=workflow)
    if visible is not None:
        queryset = queryset.filter(visible)
    targets = list(query.targets())
    if data_paths(targets):
        check_sealed(targets, sealed_paths(domain, workflow) | _unreadable(domain, workflow, roles))
    # Creation order alone: `instance_list` (domain, workflow, created_at) serves it, read
    # backwards, so a batch's LIMIT stops the scan instead of sorting every match.
    return queryset.filter(filter_q(query.filter)).order_by("created_at").only("id")


def _check_page_offset(number: int, size: int) -> None:
    """Refuse a page that starts past `VNEXT_MAX_PAGE_OFFSET` rows: OFFSET reads and drops
    every row before it, so deep pages are asked by cursor (400 `invalid_filter`)."""
    bound = int(vnext_setting("MAX_PAGE_OFFSET"))
    offset = (number - 1) * size
    if offset > bound:
        raise VNextError(
            Codes.FILTER_INVALID,
            f"page {number} of pageSize {size} starts at row {offset + 1}, past the "
            f"{bound} rows a page number may skip (VNEXT_MAX_PAGE_OFFSET): page on with the "
            "cursor the previous page gave (links.next, nextCursor; ?cursor=...).",
            extra={"maxPageOffset": bound},
        )


def instance_matches(
    instance: InstanceSnapshot, filters: Sequence[str], roles: frozenset[str] | None
) -> bool:
    """Whether the instance is one the filter(s) select (`functions/data?filter=`); the same
    fields are refused as for the list."""
    query = parse_query(list(filters))
    if query.group is not None:
        raise VNextError(
            Codes.FILTER_INVALID, "groupBy is answered by the instance list, not functions/data."
        )
    targets = list(query.targets())
    domain, workflow = instance.domain, instance.workflow_key
    if data_paths(targets):
        check_sealed(targets, sealed_paths(domain, workflow) | _unreadable(domain, workflow, roles))
    return Instance.objects.filter(pk=instance.id).filter(filter_q(query.filter)).exists()


def _unreadable(
    domain: str, workflow: str, roles: frozenset[str] | None
) -> frozenset[tuple[str, ...]]:
    if roles is None:
        return frozenset()
    found: set[tuple[str, ...]] = set()
    for definition in _workflow_versions(domain, workflow):
        found |= unreadable_paths(master_schema(definition), roles)
    return frozenset(found)


def _workflow_versions(domain: str, workflow: str) -> list[WorkflowDefinition]:
    """Every published version of the workflow (the registry: an instance is pinned to one of
    them), newest first; never a scan of the instances."""
    versions = (
        Component.objects.filter(kind=ComponentKind.WORKFLOW, domain=domain, key=workflow)
        .order_by("-version_major", "-version_minor", "-version_patch", "-version_is_release")
        .values_list("version", flat=True)
    )
    found = []
    for version in versions:
        definition = engine().components.workflow(domain, workflow, version)
        if definition is not None:
            found.append(definition)
    return found


def readable_instances(domain: str, workflow: str, caller: Caller) -> Q | None:
    """A filter keeping the instances of a workflow whose current state's query roles (else
    the workflow's) let `caller` read them; None when every instance is readable. A rule
    naming `$InstanceStarter` or `$PreviousUser` becomes a condition on the instance's
    `created_by` / `modified_by`. Children started by a SubFlow state that overrides query
    roles are decided by those overrides (one group per overriding parent state)."""
    clauses: list[Q] = []
    restricted = False
    for definition in _workflow_versions(domain, workflow):
        in_version = Q(workflow_version=definition.version)
        groups = _query_role_overrides(domain, workflow, definition.version)
        scopes: list[tuple[Q, SubflowOverrides]] = [(in_version, NO_OVERRIDES)]
        if groups:
            # A condition on the row itself (never a subquery over the table); rows without
            # overrides (a missing JSON path) read as "" and stay in scope.
            overridden = In(_override_source(), list(groups))
            scopes = [(in_version & ~Q(overridden), NO_OVERRIDES)]
            scopes += [
                (in_version & Q(**{f"extra__{OVERRIDES_KEY}__source": source}), overrides)
                for source, overrides in groups.items()
            ]
        for scope, overrides in scopes:
            found, narrowed = _readable_clauses(definition, overrides, caller)
            restricted = restricted or narrowed
            clauses.extend(scope & clause for clause in found)
    if not restricted:
        return None
    visible = Q(pk__in=[])
    for clause in clauses:
        visible |= clause
    return visible


def _override_source() -> Coalesce:
    """The SubFlow state that started an instance with overrides (its `extra`), else ""."""
    pinned = KeyTextTransform("source", KeyTransform(OVERRIDES_KEY, "extra"))
    return Coalesce(pinned, Value(""), output_field=CharField())


def _query_role_overrides(domain: str, workflow: str, version: str) -> dict[str, SubflowOverrides]:
    """The SubFlow overrides of state query roles the instances of a workflow version may run
    under, by the parent state that gives them (few: one per overriding SubFlow state). Read
    from the registry, as `child_start` pins them: every published SubFlow state starting
    this workflow (at this version, or at whichever is newest) with `overrides.states`."""
    return {
        source: overrides
        for pinned, source, overrides in _subflow_query_overrides().get((domain, workflow), ())
        if pinned is None or pinned == version
    }


@dataclass
class _OverrideIndex:
    generation: int | None = None
    by_child: dict[tuple[str, str], list[tuple[str | None, str, SubflowOverrides]]] = field(
        default_factory=dict
    )


_OVERRIDE_INDEX = _OverrideIndex()
_OVERRIDE_LOCK = threading.Lock()


def _subflow_query_overrides() -> dict[
    tuple[str, str], list[tuple[str | None, str, SubflowOverrides]]
]:
    """Every published SubFlow state overriding its child's query roles, by child workflow:
    `(pinned child version or None, source, overrides)`. Published components are immutable
    and only ever added, so the index is rebuilt (in-process) only when the registry's newest
    row changes: one primary-key lookup a listing."""
    generation = Component.objects.aggregate(newest=Max("pk"))["newest"]
    with _OVERRIDE_LOCK:
        if _OVERRIDE_INDEX.generation == generation and generation is not None:
            return _OVERRIDE_INDEX.by_child
    by_child: dict[tuple[str, str], list[tuple[str | None, str, SubflowOverrides]]] = {}
    parents = Component.objects.filter(kind=ComponentKind.WORKFLOW).values_list(
        "domain", "key", "version"
    )
    for domain, key, version in parents.iterator():
        parent = engine().components.workflow(domain, key, version)
        if parent is None:
            continue
        for state in parent.states.values():
            config = state.subflow
            if not config or config.get("type", FlowType.SUBFLOW) != FlowType.SUBFLOW:
                continue
            source = f"{parent.domain}/{parent.key}@{parent.version}#{state.key}"
            overrides = SubflowOverrides.of_subflow(config, source)
            if not overrides.states:
                continue
            process = config.get("process") or {}
            child = (str(process.get("domain") or domain), str(process.get("key") or ""))
            pinned = str(process["version"]) if process.get("version") else None
            by_child.setdefault(child, []).append((pinned, source, overrides))
    with _OVERRIDE_LOCK:
        _OVERRIDE_INDEX.generation = generation
        _OVERRIDE_INDEX.by_child = by_child
    return by_child


def _readable_clauses(
    definition: WorkflowDefinition, overrides: SubflowOverrides, caller: Caller
) -> tuple[list[Q], bool]:
    """The conditions (on state, starter, previous user) under which `caller` may read an
    instance of `definition` running under `overrides`, and whether any state is closed to
    some caller at all."""
    starter, previous = Q(created_by=caller.actor), Q(modified_by=caller.actor)
    clauses: list[Q] = []
    restricted = False
    open_states: list[str] = []
    for key in definition.states:
        rules = definition.query_roles(key, overrides)
        verdicts = {
            (s, p): allowed(rules, caller.on(caller.actor * s, caller.actor * p))
            for s in (False, True)
            for p in (False, True)
        }
        if all(verdicts.values()):
            open_states.append(key)
            continue
        restricted = True
        for (s, p), verdict in verdicts.items():
            if verdict and caller.actor:
                clauses.append(
                    Q(current_state=key)
                    & (starter if s else ~starter)
                    & (previous if p else ~previous)
                )
    if open_states:
        clauses.append(Q(current_state__in=open_states))
    return clauses, restricted


def listed_attributes(row: Instance, caller: Caller) -> Any:
    """The data a listed instance shows `caller` (its version's master-schema field rules)."""
    definition = engine().components.workflow(row.domain, row.workflow_key, row.workflow_version)
    snapshot = snapshot_of(row)
    if definition is None:
        return snapshot.data
    return shown_attributes(
        definition, snapshot, caller.on(snapshot.created_by, snapshot.modified_by)
    )


def instance_get(*, instance_id: uuid.UUID) -> InstanceSnapshot | None:
    """Any instance by id, whatever its workflow (a forwarded transition's subflow), or None."""
    return engine().store.load(instance_id)


def transition_list(*, instance: InstanceSnapshot) -> list[InstanceTransition]:
    """Every transition attempt of an instance, oldest first."""
    return list(
        InstanceTransition.objects.filter(instance_id=instance.id).order_by("started_at", "id")
    )


def incident_active_get(*, instance: InstanceSnapshot) -> dict[str, Any] | None:
    """The newest open incident, as the API shows it, or None."""
    row = (
        Incident.objects.filter(instance_id=instance.id, resolved=False)
        .order_by("-created_at")
        .first()
    )
    return incident_body(row) if row else None


def incident_block(instance: InstanceSnapshot, incident: dict[str, Any] | None) -> dict[str, Any]:
    """The `incident` block of the state function and `GET instance`: whether an incident is
    open, the open one (with its `href`) and where the history is."""
    base = f"/api/v1/{instance.domain}/workflows/{instance.workflow_key}/instances/{instance.id}"
    return {
        "hasActiveIncident": incident is not None,
        "active": {"href": f"{base}/incidents/active", **incident} if incident else None,
        "history": {"href": f"{base}/incidents"},
    }


def incident_active_list(*, instance_ids: list[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
    """The newest open incident of each of `instance_ids` that has one (one query), for listings
    that must agree with `GET instance` and the state function."""
    newest: dict[uuid.UUID, dict[str, Any]] = {}
    rows = Incident.objects.filter(instance_id__in=instance_ids, resolved=False).order_by(
        "instance_id", "-created_at"
    )
    for row in rows:
        newest.setdefault(row.instance_id, incident_body(row))
    return newest


def incident_list(
    *, instance: InstanceSnapshot, page: int, page_size: int
) -> tuple[list[Incident], bool]:
    """A page of the instance's incidents, newest first, and whether another page follows."""
    start = (page - 1) * page_size
    rows = list(
        Incident.objects.filter(instance_id=instance.id).order_by("-created_at", "-id")[
            start : start + page_size + 1
        ]
    )
    return rows[:page_size], len(rows) > page_size


def transition_newest_id_get(*, instance: InstanceSnapshot) -> uuid.UUID | None:
    """The id of the instance's newest history row, if any."""
    row = (
        InstanceTransition.objects.filter(instance_id=instance.id)
        .order_by("-started_at")
        .values_list("pk", flat=True)
        .first()
    )
    return row


def incident_body(row: Incident) -> dict[str, Any]:
    """An incident as the API shows it (never a stack trace)."""
    return {
        "id": row.pk,
        "errorCode": row.error_code,
        "message": row.message,
        "state": row.state,
        "transitionKey": row.transition_key,
        "taskKey": row.task_key or None,
        "step": row.step or None,
        "attempt": row.attempt,
        "layer": row.layer,
        "boundaryAction": row.boundary_action or None,
        "boundaryLevel": row.boundary_level or None,
        "resolved": row.resolved,
        "resolution": row.resolution or None,
        "resolvedBy": row.resolved_by or None,
        "resolvedAt": row.resolved_at.isoformat() if row.resolved_at else None,
        "createdAt": row.created_at.isoformat(),
    }


@dataclass(frozen=True)
class SubflowLevel:
    """One level of an instance's active SubFlow chain: the waiting parent and its child."""

    correlation_id: int | None
    parent: InstanceSnapshot
    child: InstanceSnapshot


def subflow_level_list(*, instance: InstanceSnapshot) -> list[SubflowLevel]:
    """The active SubFlow chain below `instance`, top to leaf (empty when it waits for none)."""
    levels: list[SubflowLevel] = []
    current = instance
    store = engine().store
    for _ in range(MAX_CHAIN_DEPTH):
        child_id = waiting_child(current)
        child = store.load(child_id) if child_id is not None else None
        if child is None:
            break
        levels.append(SubflowLevel(child.parent_correlation_id, current, child))
        current = child
    return levels


def correlation_active_list(
    *, instance: InstanceSnapshot, levels: list[SubflowLevel]
) -> list[dict[str, Any]]:
    """`activeCorrelations` of the state function (API.md 3): each open SubFlow level, top to
    leaf, then the open SubProcesses the instance started."""
    entries = [
        _correlation_entry(level.correlation_id, level.parent.current_state, "SubFlow", level.child)
        for level in levels
    ]
    subprocesses = Correlation.objects.filter(
        parent_id=instance.id, type=FlowType.SUBPROCESS, status=CorrelationStatus.ACTIVE
    ).order_by("pk")
    for row in subprocesses:
        child = engine().store.load(row.child_id) if row.child_id else None
        if child is not None:
            entries.append(_correlation_entry(row.pk, row.parent_state, "SubProcess", child))
    return entries


def _correlation_entry(
    correlation_id: int | None, parent_state: str, kind: str, child: InstanceSnapshot
) -> dict[str, Any]:
    return {
        "correlationId": correlation_id,
        "parentState": parent_state,
        "subFlowInstanceId": str(child.id),
        "subFlowType": kind,
        "subFlowDomain": child.domain,
        "subFlowName": child.workflow_key,
        "subFlowVersion": child.workflow_version,
        "isCompleted": child.status == InstanceStatus.COMPLETED,
        "status": str(child.status),
        "currentState": child.current_state,
        "href": f"/api/v1/{child.domain}/workflows/{child.workflow_key}/instances/{child.id}",
    }


def master_schema(definition: WorkflowDefinition) -> dict[str, Any] | None:
    """The workflow's master schema (`attributes.schema`) when it holds field rules (`x-roles`,
    `x-masking`, `x-encryption`); None when the data is shown as stored."""
    if "master_schema" in definition.memo:
        return definition.memo["master_schema"]
    reference = definition.master_schema_reference
    found = None
    if reference is not None:
        document = engine().components.component("schema", reference) or {}
        schema = (document.get("attributes") or {}).get("schema")
        found = schema if isinstance(schema, dict) and has_field_rules(schema) else None
    definition.memo["master_schema"] = found
    return found


def shown_attributes(
    definition: WorkflowDefinition, instance: InstanceSnapshot, roles: frozenset[str] | None
) -> Any:
    """The instance data a caller holding `roles` is shown (`x-roles`, `x-masking`,
    `x-encryption`: a field encrypted at rest is clear for its exemption roles, else its
    stored token)."""
    schema = master_schema(definition) if roles is not None else None
    if schema is None:
        return instance.data
    return shown_data(schema, instance.data, roles, salt=schema_hash_salt(), tokens=instance.sealed)


def instance_at_version_get(*, instance: InstanceSnapshot, version: str) -> InstanceSnapshot | None:
    """The instance as it was when its data had `version` (`1.0.3`), or None when the data
    never had that version."""
    row = (
        InstanceDataVersion.objects.filter(instance_id=instance.id, version=version)
        .order_by("-created_at")
        .only("data")
        .first()
    )
    return None if row is None else opened(replace(instance, data=row.data))
