"""Writes to the component registry: validate and publish definitions, one or a batch."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction

from instances.engine.definition import schema_reference
from instances.engine.errors import Codes, Violation, VNextError
from instances.indexes import missing_field_indexes
from workflows.documents import PUBLISH_ORDER, ComponentKind, ComponentRef, Version, detect_kind
from workflows.models import Component
from workflows.selectors import component_document
from workflows.validation import validate_component

logger = logging.getLogger(__name__)


def content_hash(document: Any) -> str:
    """Hash of a document's canonical JSON: equal content, equal hash, whatever the key order."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass
class RegistryResolver:
    """Resolves references against documents of the batch at hand, then the registry."""

    batch: Mapping[ComponentRef, dict[str, Any]] = field(default_factory=dict)
    excluded: set[ComponentRef] = field(default_factory=set)
    _memo: dict[ComponentRef, dict[str, Any] | None] = field(default_factory=dict)

    def resolve(self, ref: ComponentRef) -> dict[str, Any] | None:
        """The referenced document, or None when it is neither in the batch nor published."""
        if ref in self.excluded:
            return None
        if ref in self.batch:
            return self.batch[ref]
        if ref not in self._memo:
            self._memo[ref] = component_document(ref)
        return self._memo[ref]


def component_validate(*, document: Any, resolver: RegistryResolver | None = None) -> None:
    """Raise `App:900006` with every violation when `document` is not a valid component."""
    violations = validate_component(document, resolver or RegistryResolver())
    if violations:
        raise VNextError(
            Codes.APP_INVALID_DEFINITION,
            f"{len(violations)} problem(s) in {_describe(document)}",
            violations=violations,
        )


@dataclass(frozen=True)
class PublishResult:
    """Outcome of publishing one document: `published`, or `unchanged` (same content again)."""

    ref: ComponentRef
    status: str
    component: Component


def component_publish(
    *, document: Any, published_by: str = "", resolver: RegistryResolver | None = None
) -> PublishResult:
    """Validate and store one component version; idempotent for identical content.

    Raises `App:900006` (400) with every violation, or `Instance:100002` (409) when the same
    kind/domain/key/version is already published with different content.
    """
    kind = detect_kind(document)
    if kind is None or not isinstance(document, dict):
        component_validate(document=document, resolver=resolver)
        raise AssertionError("unreachable: a non-component document has violations")
    ref = ComponentRef.of(document, kind)
    digest = content_hash(document)
    existing = _existing(ref)
    if existing is not None:
        return _same_or_conflict(existing, digest)
    component_validate(document=document, resolver=resolver)
    version = Version.parse(ref.version)
    assert version is not None  # the schema's semver pattern has been checked
    try:
        # A savepoint, so a concurrent publisher's insert surfaces here without breaking an
        # enclosing transaction.
        with transaction.atomic():
            component = Component.objects.create(
                kind=kind,
                domain=ref.domain,
                key=ref.key,
                version=ref.version,
                version_major=version.major,
                version_minor=version.minor,
                version_patch=version.patch,
                version_is_release=version.is_release,
                version_prerelease=version.prerelease,
                flow=str(document.get("flow", "")),
                flow_version=str(document.get("flowVersion", "")),
                tags=document.get("tags") or [],
                document=document,
                content_hash=digest,
                published_by=published_by,
            )
    except IntegrityError:
        raced = _existing(ref)
        if raced is None:
            raise
        return _same_or_conflict(raced, digest)
    if kind == ComponentKind.WORKFLOW:
        _report_pending_indexes(ref, document, resolver or RegistryResolver())
    return PublishResult(ref, "published", component)


def _report_pending_indexes(
    ref: ComponentRef, document: dict[str, Any], resolver: RegistryResolver
) -> None:
    """Log the search indexes a new workflow version's `x-indexed` fields still lack.
    Publishing never waits for an index build: an operator reviews and builds them."""
    attributes = document.get("attributes")
    reference = ComponentRef.from_reference(
        schema_reference(attributes.get("schema") if isinstance(attributes, dict) else None)
    )
    master = resolver.resolve(reference) if reference is not None else None
    schema = (master.get("attributes") or {}).get("schema") if isinstance(master, dict) else None
    missing = missing_field_indexes(ref.domain, ref.key, schema)
    if missing:
        fields = sorted({spec.target for spec in missing})
        workflow = f"{ref.domain}/{ref.key}"
        logger.warning(
            "%s %s: the search indexes of its x-indexed fields %s are not built yet (%d "
            "missing); listings filtering or sorting on them read the whole workflow until an "
            "operator runs manage.py indexes_plan --workflow %s (to review) and manage.py "
            "indexes_apply --workflow %s",
            workflow,
            ref.version,
            ", ".join(fields),
            sum(not spec.statistics for spec in missing),
            workflow,
            workflow,
        )


def _existing(ref: ComponentRef) -> Component | None:
    return Component.objects.filter(
        kind=ref.kind, domain=ref.domain, key=ref.key, version=ref.version
    ).first()


def _same_or_conflict(existing: Component, digest: str) -> PublishResult:
    if existing.content_hash == digest:
        return PublishResult(existing.ref, "unchanged", existing)
    raise VNextError(
        Codes.PUBLISH_CONFLICT,
        f"{existing.ref} is already published with different content; "
        "published versions are immutable, publish a new version",
    )


def _describe(document: Any) -> str:
    if isinstance(document, dict) and detect_kind(document):
        return str(ComponentRef.of(document))
    return "the document"


# --- batches ----------------------------------------------------------------------------------


@dataclass
class BatchItem:
    """One document of a batch, with where it came from and what became of it."""

    document: Any
    source: str
    status: str = "pending"  # published | unchanged | valid | rejected | skipped
    violations: list[Violation] = field(default_factory=list)
    message: str = ""

    @property
    def ref(self) -> ComponentRef | None:
        """The document's identity, when it is a component."""
        kind = detect_kind(self.document)
        return ComponentRef.of(self.document, kind) if kind else None


def publish_order(items: Iterable[BatchItem]) -> list[BatchItem]:
    """Items in dependency order: schemas, mappings, tasks, views, functions, extensions, then
    workflows, each workflow after the workflows it starts as subflows."""
    rank: dict[ComponentKind | None, int] = {kind: i for i, kind in enumerate(PUBLISH_ORDER)}
    items = sorted(items, key=lambda item: (rank.get(_kind(item), -1), item.source))
    workflows = [item for item in items if _kind(item) == ComponentKind.WORKFLOW]
    others = [item for item in items if _kind(item) != ComponentKind.WORKFLOW]
    return others + _subflows_first(workflows)


def _kind(item: BatchItem) -> ComponentKind | None:
    return detect_kind(item.document)


def _subflows_first(workflows: list[BatchItem]) -> list[BatchItem]:
    by_ref = {item.ref: item for item in workflows}
    ordered: list[BatchItem] = []
    visiting: set[int] = set()
    done: set[int] = set()

    def visit(item: BatchItem) -> None:
        if id(item) in done or id(item) in visiting:
            return  # a cycle is published in file order; the batch resolver still finds it
        visiting.add(id(item))
        for ref in _workflow_references(item.document):
            if ref in by_ref:
                visit(by_ref[ref])
        visiting.discard(id(item))
        done.add(id(item))
        ordered.append(item)

    for item in workflows:
        visit(item)
    return ordered


def _workflow_references(node: Any) -> Iterable[ComponentRef]:
    if isinstance(node, dict):
        ref = ComponentRef.from_reference(node)
        if ref is not None and ref.kind == ComponentKind.WORKFLOW:
            yield ref
        for value in node.values():
            yield from _workflow_references(value)
    elif isinstance(node, list):
        for value in node:
            yield from _workflow_references(value)


def components_publish_batch(
    *,
    items: list[BatchItem],
    published_by: str = "",
    dry_run: bool = False,
    on_done: Callable[[BatchItem], None] | None = None,
) -> list[BatchItem]:
    """Validate (and unless `dry_run`, publish) a batch in dependency order.

    Each component is published on its own; a rejected one is reported with its violations and
    does not stop the others, but whatever references it is rejected too.
    """
    ordered = publish_order(items)
    batch = {item.ref: item.document for item in ordered if item.ref and item.status == "pending"}
    resolver = RegistryResolver(batch=batch)
    for item in ordered:
        if item.status != "pending":
            continue
        try:
            if dry_run:
                component_validate(document=item.document, resolver=resolver)
                item.status = "valid"
            else:
                item.status = component_publish(
                    document=item.document, published_by=published_by, resolver=resolver
                ).status
        except VNextError as exc:
            item.status = "rejected"
            item.message = f"{exc.code}: {exc.detail}"
            item.violations = exc.violations
            if item.ref is not None:
                resolver.excluded.add(item.ref)
        if on_done is not None:
            on_done(item)
    return ordered
