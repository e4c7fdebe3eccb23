"""Custom functions through the API (vNext "Custom Functions"): the function a workflow
declares, run on one of its instances (`.../instances/{instance}/functions/{name}`), or a
domain function run without an instance (`/api/v1/{domain}/functions/{name}`).

A call is checked (declared, the caller's roles against the function's `roles`), answered from
the function's own cache when it opts in (`attributes.cache`), else run by the engine
(`instances.engine.functions`) and shaped: `{"<functionKey>": output}`, or with
`rawResponse` the output itself with the status (and headers) its task or output script gave.
A failing task or script answers 502 `Function:ExecutionFailed`, never a 500."""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from django.core.cache import cache

from instances.engine.definition import WorkflowDefinition
from instances.engine.errors import Codes, VNextError
from instances.engine.functions import (
    FunctionDef,
    FunctionFailed,
    FunctionResult,
    FunctionScope,
    Request,
    function_result,
)
from instances.engine.records import InstanceSnapshot
from instances.engine.roles import allowed
from instances.engine.script_runner import script_headers
from instances.services import shaped_answer
from instances.wiring import engine
from workflows.documents import ComponentKind
from workflows.models import Component

logger = logging.getLogger("vnext.functions")

_NEWEST_FIRST = ("-version_major", "-version_minor", "-version_patch", "-version_is_release")


@dataclass(frozen=True)
class FunctionAnswer:
    """The HTTP answer of a custom function."""

    status: int
    headers: dict[str, str]
    body: Any


def declared_function(definition: WorkflowDefinition, name: str) -> FunctionDef | None:
    """The function `name` the workflow declares (`attributes.functions`), or None."""
    for reference in definition.attributes.get("functions") or []:
        if isinstance(reference, dict) and reference.get("key") == name:
            document = engine().components.component(ComponentKind.FUNCTION, reference)
            return FunctionDef.parse(document) if document is not None else None
    return None


def function_allows(function: FunctionDef, roles: frozenset[str]) -> bool:
    """The function's `roles` (deny beats allow; none: anyone) admit a caller holding `roles`."""
    return allowed(function.roles, roles)


def instance_function_run(
    *,
    definition: WorkflowDefinition,
    instance: InstanceSnapshot,
    name: str,
    roles: frozenset[str],
    headers: dict[str, str],
    query: dict[str, Any],
) -> FunctionAnswer:
    """Run the function `name` the instance's workflow declares, for a caller holding `roles`
    (on the instance). 404 `Function:NotFound` when it declares none of that name, 403 when the
    function's roles refuse the caller."""
    function = declared_function(definition, name)
    if function is None:
        raise VNextError(
            Codes.FUNCTION_NOT_FOUND,
            f"workflow {definition.key} declares no function {name!r} "
            "(attributes.functions; built-in: state, data, view, schema, authorize)",
            instance_id=str(instance.id),
        )
    _check_roles(function, roles)
    request = _request(definition, instance, headers, query)
    return _cached_answer(function, request, headers, instance)


def domain_function_run(
    *,
    domain: str,
    name: str,
    version: str | None,
    roles: frozenset[str],
    headers: dict[str, str],
    query: dict[str, Any],
) -> FunctionAnswer:
    """Run the domain function (scope `D`) `name` of `domain`, its newest version unless
    `version` is given, without an instance (`context.instance` is empty). 404
    `Function:NotFound` for no such function, or one of another scope (it needs an instance)."""
    rows = Component.objects.filter(kind=ComponentKind.FUNCTION, domain=domain, key=name)
    if version is not None:
        rows = rows.filter(version=version)
    document = rows.order_by(*_NEWEST_FIRST).values_list("document", flat=True).first()
    if document is None:
        wanted = name + (f"@{version}" if version is not None else "")
        raise VNextError(Codes.FUNCTION_NOT_FOUND, f"domain {domain} has no function {wanted}")
    function = FunctionDef.parse(document)
    if function.scope != FunctionScope.DOMAIN:
        raise VNextError(
            Codes.FUNCTION_NOT_FOUND,
            f"function {name} has scope {function.scope!r}, not 'D': call it on an instance of "
            f"a workflow that declares it (.../instances/{{instance}}/functions/{name})",
        )
    _check_roles(function, roles)
    # No instance: an empty one, so scripts find the context they always do.
    nobody = InstanceSnapshot(
        id=uuid.UUID(int=0),
        domain=domain,
        workflow_key="",
        workflow_version="",
        current_state="",
        status="",
    )
    workflow = WorkflowDefinition({"domain": domain, "key": name, "version": function.version})
    return _cached_answer(function, _request(workflow, nobody, headers, query), headers, None)


def _check_roles(function: FunctionDef, roles: frozenset[str]) -> None:
    if not function_allows(function, roles):
        raise VNextError(
            Codes.AUTHORIZATION_DENIED, f"your roles may not run function {function.key!r}"
        )


def _request(
    definition: WorkflowDefinition,
    instance: InstanceSnapshot,
    headers: dict[str, str],
    query: dict[str, Any],
) -> Request:
    return Request(
        definition=definition,
        instance=instance,
        headers=script_headers(headers),
        query=dict(query),
        configuration=dict(engine().config.script_configuration),
    )


def _cached_answer(
    function: FunctionDef,
    request: Request,
    headers: dict[str, str],
    instance: InstanceSnapshot | None,
) -> FunctionAnswer:
    """The answer from the function's cache when it has one for this call, else a fresh one
    (kept for `ttlInSeconds`). An entry made for an instance is served only while the instance
    is unchanged (its ETag), as the built-in function cache does; a domain function's entry
    lives its TTL. The entry varies by the function, its cache key, the instance and the
    `varyByHeaders` / `varyByHeaderPrefixes` headers; callers are authorized before it."""
    settings = function.cache
    if settings is None:
        return _answer(function, request)
    variant = json.dumps(settings.variant(headers), separators=(",", ":"))
    digest = hashlib.sha256(variant.encode()).hexdigest()[:24]
    where = str(instance.id) if instance is not None else "-"
    key = (
        f"vnext:custom-function:{function.domain}:{function.key}@{function.version}:"
        f"{hashlib.sha256(settings.key.encode()).hexdigest()[:24]}:{where}:{digest}"
    )
    etag = instance.etag if instance is not None else None
    try:
        entry = cache.get(key)
    except Exception as exc:  # a cache backend's errors have no common base class
        _cache_failed(function, "read", exc, bypass=settings.bypass_on_error)
        entry = None
    if isinstance(entry, tuple) and len(entry) == 4 and entry[0] == etag:
        return FunctionAnswer(entry[1], entry[2], entry[3])
    answer = _answer(function, request)
    try:
        cache.set(key, (etag, answer.status, answer.headers, answer.body), settings.ttl_seconds)
    except Exception as exc:  # as above
        _cache_failed(function, "write", exc, bypass=settings.bypass_on_error)
    return answer


def _cache_failed(function: FunctionDef, what: str, exc: Exception, *, bypass: bool) -> None:
    if not bypass:
        raise VNextError(
            Codes.FUNCTION_CACHE_FAILED,
            f"function {function.key!r}: the cache {what} failed (bypassOnCacheError is false)",
        ) from exc
    logger.warning("function %s: cache %s failed, running uncached: %s", function.key, what, exc)


def _answer(function: FunctionDef, request: Request) -> FunctionAnswer:
    try:
        result = function_result(engine().tasks, function, request)
    except FunctionFailed as failure:
        logger.warning("function %s (%s) failed: %s", function.key, request.instance.id, failure)
        raise VNextError(
            Codes.FUNCTION_FAILED,
            f"function {function.key!r}: {failure}",
            instance_id=_instance_id(request),
        ) from failure
    except Exception as exc:
        # Whatever else breaks (a task type's own bug, a database error in a trigger task) is
        # logged with its trace; the caller gets the function's failure, never a 500.
        logger.exception("function %s (%s) failed", function.key, request.instance.id)
        raise VNextError(
            Codes.FUNCTION_FAILED,
            f"function {function.key!r} failed: {type(exc).__name__} (logged)",
            instance_id=_instance_id(request),
        ) from exc
    return _shaped(function, result, request)


def _instance_id(request: Request) -> str | None:
    return str(request.instance.id) if request.instance.workflow_key else None


def _shaped(function: FunctionDef, result: FunctionResult, request: Request) -> FunctionAnswer:
    if not function.raw_response:
        return FunctionAnswer(200, {}, {function.variable: result.data})
    if result.script_response is not None:
        try:
            shaped = shaped_answer(result.script_response)
        except ValueError as exc:
            raise VNextError(
                Codes.FUNCTION_FAILED,
                f"function {function.key!r}: the output script's answer is unusable: {exc}",
                instance_id=_instance_id(request),
            ) from exc
        return FunctionAnswer(shaped.status, shaped.headers, shaped.body)
    status = result.task_status
    if status is None or not 200 <= status <= 599:
        status = 200
    return FunctionAnswer(status, {}, result.data)
