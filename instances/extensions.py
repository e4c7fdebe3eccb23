"""Extensions on instance reads (vNext "Extension Management"): which extensions a read runs,
and the `extensions` object of its answer (GET instance, each listed instance, the data
function, the sync start/transition answer).

An extension runs when its scope covers the read (1: a single instance; 2: the list; 3: both)
and, by type: 1 in every workflow of its domain, 3 in the workflows that declare it
(`attributes.extensions` / `features`), on every such read; 2 and 4 (the same two reaches)
only when the client names them (`?extensions=a,b`). Each one's task runs through the task
runner (`instances.engine.functions.extension_output`) with the instance and the caller's
request as context; an object it outputs is merged into `extensions`, anything else is put
under the extension's key. A failing extension never fails the read: its key holds
`{"error": {"code", "message"}}` and the failure is logged. Outputs are never cached:
extensions carry live data. Which global extensions a domain has is (`domain_global_extensions`):
every sync answer and read asks it, and it changes only when one is published."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.core.cache import cache
from django.db import transaction

from instances.engine.definition import WorkflowDefinition
from instances.engine.errors import Codes, ErrorCode, Violation, VNextError
from instances.engine.functions import (
    ExtensionDef,
    FunctionFailed,
    ReadKind,
    Request,
    extension_output,
)
from instances.engine.merging import deep_merge
from instances.engine.records import InstanceSnapshot
from instances.models import Instance
from instances.registry import NEWEST_TTL_SECONDS
from instances.snapshots import snapshot_of
from instances.wiring import engine
from vnext.conf import header_deny_list
from workflows.documents import ComponentKind
from workflows.models import Component

logger = logging.getLogger("vnext.extensions")

# `?extensions=`: names (`^[a-z0-9-]+$`, comma separated, the parameter possibly repeated).
EXTENSION_NAMES = re.compile(r"^[a-z0-9-]+(,[a-z0-9-]+)*$")
MAX_NAMES_LENGTH = 2000
MAX_REQUEST_VALUES = 20

_NEWEST_FIRST = ("key", "-version_major", "-version_minor", "-version_patch", "-version_is_release")


def requested_extensions(values: Iterable[str]) -> tuple[str, ...]:
    """The extension names a request asks for (`?extensions=a,b&extensions=c`), in order, each
    once. 400 when a value is not such a list."""
    values = list(values)
    problems = []
    if len(values) > MAX_REQUEST_VALUES:
        problems.append(Violation("/extensions", f"at most {MAX_REQUEST_VALUES} values"))
    for value in values:
        if len(value) > MAX_NAMES_LENGTH or not EXTENSION_NAMES.match(value):
            problems.append(
                Violation(
                    "/extensions",
                    "extension keys (lower-case letters, digits, '-') separated by commas, "
                    f"at most {MAX_NAMES_LENGTH} characters",
                )
            )
    if problems:
        raise VNextError(Codes.APP_INVALID_QUERY, "invalid extensions parameter", problems[:1])
    return tuple(dict.fromkeys(name for value in values for name in value.split(",")))


@dataclass
class ExtensionPlan:
    """The extensions the instances of one workflow version may run, by key: the ones it
    declares (at their declared versions) and its domain's global ones (newest versions)."""

    by_key: dict[str, ExtensionDef] = field(default_factory=dict)

    def chosen(self, read: ReadKind, requested: tuple[str, ...]) -> list[ExtensionDef | str]:
        """What a read runs: every extension that runs unasked and serves `read`, then each
        requested one not among them; a requested name that is no extension here, or one whose
        scope does not cover `read`, stays a name (reported as not found)."""
        runs: list[ExtensionDef | str] = [
            ext for ext in self.by_key.values() if not ext.on_request and ext.serves(read)
        ]
        for name in requested:
            ext = self.by_key.get(name)
            if ext is None or not ext.serves(read):
                runs.append(name)
            elif ext not in runs:
                runs.append(ext)
        return runs


def _global_extensions_key(domain: str) -> str:
    # Versioned: a shared cache holds pickled `ExtensionDef`s, which another release may lay
    # out differently (during a rolling deploy both read the same cache).
    return f"vnext:extensions:global:v1:{domain}"


def domain_global_extensions(domain: str) -> tuple[ExtensionDef, ...]:
    """The newest version of each global extension (types 1 and 2) of `domain`: one query,
    kept in Django's cache for `NEWEST_TTL_SECONDS` (the registry's bound on how long a
    process may miss a newer version). Publishing or deleting an extension forgets it at once:
    in this process, and in every other one when the cache is shared (`CACHE_URL`)."""
    cache_key = _global_extensions_key(domain)
    cached: tuple[ExtensionDef, ...] | None = cache.get(cache_key)
    if cached is not None:
        return cached
    chosen: dict[str, ExtensionDef] = {}
    rows = (
        Component.objects.filter(kind=ComponentKind.EXTENSION, domain=domain)
        .order_by(*_NEWEST_FIRST)
        .values_list("key", "document")
    )
    for key, document in rows:
        if key in chosen:
            continue  # an older version
        extension = ExtensionDef.parse(document)
        if extension.is_global:
            chosen[key] = extension
    found = tuple(chosen.values())
    cache.set(cache_key, found, timeout=NEWEST_TTL_SECONDS)
    return found


def extensions_forget_on_write(sender: type[Component], instance: Component, **kwargs: Any) -> None:
    """A Component row written or deleted: an extension's domain's cached global extensions
    are forgotten now and again at commit (a read between the two in another process may have
    cached the rows as they were before this write). Connected by `InstancesConfig.ready`."""
    if instance.kind == ComponentKind.EXTENSION:
        cache_key = _global_extensions_key(instance.domain)
        cache.delete(cache_key)
        transaction.on_commit(lambda: cache.delete(cache_key))


def extension_plan(definition: WorkflowDefinition) -> ExtensionPlan:
    """The plan of a workflow version: its domain's global extensions (types 1 and 2), the
    declared ones from the registry's cache."""
    plan = ExtensionPlan()
    for extension in domain_global_extensions(definition.domain):
        plan.by_key[extension.key] = extension
    for name in ("extensions", "features"):
        for reference in definition.attributes.get(name) or []:
            if not isinstance(reference, dict):
                continue
            document = engine().components.component(ComponentKind.EXTENSION, reference)
            if document is not None:
                extension = ExtensionDef.parse(document)
                plan.by_key[extension.key] = extension  # the declared version wins
    return plan


def instance_extensions(
    definition: WorkflowDefinition,
    instance: InstanceSnapshot,
    read: ReadKind,
    *,
    requested: tuple[str, ...] = (),
    headers: dict[str, str] | None = None,
    query: dict[str, Any] | None = None,
    plan: ExtensionPlan | None = None,
) -> dict[str, Any]:
    """The `extensions` object of one instance in a read of kind `read` (`plan`: computed once
    for a page of instances of the same workflow version)."""
    runs = (plan or extension_plan(definition)).chosen(read, requested)
    found: dict[str, Any] = {}
    if not runs:
        return found
    request = Request(
        definition=definition,
        instance=instance,
        headers=header_deny_list().strip(headers),
        query=dict(query or {}),
        configuration=dict(engine().config.script_configuration),
    )
    for run in runs:
        if isinstance(run, str):
            found[run] = _error(
                Codes.EXTENSION_NOT_FOUND,
                f"{run} is no extension of workflow {definition.key} for this read (unknown, "
                "not declared by the workflow, or its scope does not cover this endpoint)",
            )
            continue
        try:
            output = extension_output(engine().tasks, run, request)
        except FunctionFailed as failure:
            logger.warning("extension %s on %s failed: %s", run.key, instance.id, failure)
            found[run.key] = _error(Codes.EXTENSION_FAILED, f"extension {run.key}: {failure}")
            continue
        except Exception as exc:
            # Whatever else breaks is logged with its trace; the read goes on (vNext: an
            # extension's failure never blocks the main answer).
            logger.exception("extension %s on %s failed", run.key, instance.id)
            message = f"extension {run.key} failed: {type(exc).__name__} (logged)"
            found[run.key] = _error(Codes.EXTENSION_FAILED, message)
            continue
        if isinstance(output, dict):
            found = deep_merge(found, output)
        elif output is not None:
            found[run.key] = output
    return found


def listed_extensions(
    rows: Iterable[Instance],
    *,
    requested: tuple[str, ...],
    headers: dict[str, str] | None,
    query: dict[str, Any] | None,
) -> dict[Any, dict[str, Any]]:
    """The `extensions` of each listed instance (the rows the caller may read), by id: one plan
    per workflow version on the page."""
    plans: dict[tuple[str, str, str], tuple[WorkflowDefinition, ExtensionPlan] | None] = {}
    found: dict[Any, dict[str, Any]] = {}
    for row in rows:
        version = (row.domain, row.workflow_key, row.workflow_version)
        if version not in plans:
            definition = engine().components.workflow(*version)
            plans[version] = (definition, extension_plan(definition)) if definition else None
        planned = plans[version]
        if planned is None:
            found[row.pk] = {}
            continue
        definition, plan = planned
        found[row.pk] = instance_extensions(
            definition,
            snapshot_of(row),
            ReadKind.LIST,
            requested=requested,
            headers=headers,
            query=query,
            plan=plan,
        )
    return found


def _error(code: ErrorCode, message: str) -> dict[str, Any]:
    return {"error": {"code": code.code, "message": message}}


def extensions_etag(etag: str, extensions: dict[str, Any]) -> str:
    """An answer's ETag when it carries `extensions`: the instance's (or caller's) tag plus a
    digest of the extensions, so a conditional read is 304 only when they are unchanged too."""
    if not extensions:
        return etag
    text = json.dumps(extensions, sort_keys=True, default=str).encode()
    return f"{etag}-x{hashlib.sha256(text).hexdigest()[:16]}"
