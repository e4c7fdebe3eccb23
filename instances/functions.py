"""Custom functions through the API (vNext "Custom Functions"): the function a workflow
declares, run on one of its instances (`.../instances/{instance}/functions/{name}`), or a
domain function run without an instance (`/api/v1/{domain}/functions/{name}`); and the catalogs
listing them with their contracts (`.../instances/{instance}/functions`,
`/api/v1/{domain}/functions`).

A call is checked (declared, the caller's roles against the function's `roles`, the verb against
its `verbs`: 405 with `Allow` otherwise), its body (POST, PATCH, DELETE: a JSON object, the
scripts' `context.body`) validated against its `inputSchema` (400 `App:900002` with pointers),
answered from the function's own cache when it opts in (`attributes.cache`), else run by the
engine (`instances.engine.functions`), its output checked against its `outputSchema` (a breach
is the server's: 502 `Function:OutputInvalid`, logged, the output never sent) and shaped:
`{"<functionKey>": output}`, or with `rawResponse` the output itself with the status (and
headers) its task or output script gave. A failing task or script answers 502
`Function:ExecutionFailed`, never a 500.

The cache lives in the Django cache alias `storeName` names (`default` when empty). An entry's
key holds the function, the verb, its key source (`keyExpression`'s value, else `key`), the
instance, the `varyByHeaders` headers and, with a generation (`generationKeyExpression`'s value,
else `generationKey`), that generation's current stamp: `function_generation_bump` gives the
generation a new stamp, which makes every entry made under the old one unreachable."""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.cache import BaseCache, caches

from instances.answers import shaped_answer
from instances.engine.definition import WorkflowDefinition
from instances.engine.errors import Codes, Violation, VNextError
from instances.engine.functions import (
    BODY_VERBS,
    ContractEntry,
    ExpressionFailed,
    FunctionDef,
    FunctionFailed,
    FunctionResult,
    FunctionScope,
    Request,
    contract_choice,
    expression_value,
    function_result,
)
from instances.engine.payload import validate_attributes
from instances.engine.records import InstanceSnapshot
from instances.engine.roles import allowed
from instances.wiring import engine
from vnext.conf import header_deny_list
from workflows.documents import ComponentKind
from workflows.models import Component

logger = logging.getLogger("vnext.functions")

_NEWEST_FIRST = ("-version_major", "-version_minor", "-version_patch", "-version_is_release")
DEFAULT_STORE = "default"
GENERATION_PREFIX = "vnext:function-generation"

BodyReader = Callable[[], Any]


def _no_body() -> Any:
    return None


@dataclass(frozen=True)
class FunctionAnswer:
    """The HTTP answer of a custom function."""

    status: int
    headers: dict[str, str]
    body: Any


class FunctionVerbRefused(VNextError):
    """405: the function does not answer this verb; `allowed` is its `Allow` header."""

    def __init__(self, function: FunctionDef, verb: str) -> None:
        super().__init__(
            Codes.FUNCTION_VERB_NOT_ALLOWED,
            f"function {function.key!r} answers {', '.join(function.verbs)}, not {verb}",
        )
        self.allowed = function.verbs


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
    verb: str = "GET",
    body: BodyReader = _no_body,
) -> FunctionAnswer:
    """Run the function `name` the instance's workflow declares, for a caller holding `roles`
    (on the instance), with the request's `verb` and `body` (read only once the verb is
    known to be answered). 404 `Function:NotFound` when it declares none of that name, 403
    when the function's roles refuse the caller, 405 when it does not answer `verb`."""
    function = declared_function(definition, name)
    if function is None:
        raise VNextError(
            Codes.FUNCTION_NOT_FOUND,
            f"workflow {definition.key} declares no function {name!r} "
            "(attributes.functions; built-in: state, data, view, schema, authorize)",
            instance_id=str(instance.id),
        )
    _check_roles(function, roles)
    verb, sent = _checked_call(function, verb, body)
    request = _request(definition, instance, headers, query, verb=verb, body=sent)
    _check_input(function, request)
    return _cached_answer(function, request, headers, instance)


def domain_function(domain: str, name: str, version: str | None) -> FunctionDef:
    """The domain function (scope `D`) `name` of `domain`, its newest version unless `version`
    is given. 404 `Function:NotFound` for no such function, or one of another scope (it needs
    an instance)."""
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
    return function


def domain_function_run(
    *,
    domain: str,
    name: str,
    version: str | None,
    roles: frozenset[str],
    headers: dict[str, str],
    query: dict[str, Any],
    verb: str = "GET",
    body: BodyReader = _no_body,
) -> FunctionAnswer:
    """Run the domain function `name` (`domain_function`) without an instance
    (`context.instance` is empty), with the request's `verb` and `body`."""
    function = domain_function(domain, name, version)
    _check_roles(function, roles)
    verb, sent = _checked_call(function, verb, body)
    request = _request(_domain_workflow(function), _nobody(domain), headers, query, verb, sent)
    _check_input(function, request)
    return _cached_answer(function, request, headers, None)


def _nobody(domain: str) -> InstanceSnapshot:
    # No instance: an empty one, so scripts find the context they always do.
    return InstanceSnapshot(
        id=uuid.UUID(int=0),
        domain=domain,
        workflow_key="",
        workflow_version="",
        current_state="",
        status="",
    )


def _domain_workflow(function: FunctionDef) -> WorkflowDefinition:
    return WorkflowDefinition(
        {"domain": function.domain, "key": function.key, "version": function.version}
    )


def _check_roles(function: FunctionDef, roles: frozenset[str]) -> None:
    if not function_allows(function, roles):
        raise VNextError(
            Codes.AUTHORIZATION_DENIED, f"your roles may not run function {function.key!r}"
        )


def _checked_call(function: FunctionDef, verb: str, body: BodyReader) -> tuple[str, Any]:
    """The call's verb (HEAD is a GET) once the function answers it (405 otherwise, after the
    roles: a refused caller learns nothing of the function's shape), and its body: a POST's,
    PATCH's or DELETE's JSON object, None when none was sent."""
    verb = verb.upper()
    verb = "GET" if verb == "HEAD" else verb
    if not function.answers(verb):
        raise FunctionVerbRefused(function, verb)
    sent = body() if verb in BODY_VERBS else None
    if sent is not None and not isinstance(sent, dict):
        raise VNextError(
            Codes.APP_INVALID_REQUEST,
            "a function's request body is a JSON object",
            [Violation("", "must be an object")],
        )
    return verb, sent


def _request(
    definition: WorkflowDefinition,
    instance: InstanceSnapshot,
    headers: dict[str, str],
    query: dict[str, Any],
    verb: str = "GET",
    body: Any = None,
) -> Request:
    return Request(
        definition=definition,
        instance=instance,
        headers=header_deny_list().strip(headers),
        query=dict(query),
        configuration=dict(engine().config.script_configuration),
        body=body,
        verb=verb,
    )


# --- contracts ----------------------------------------------------------------------------------


def _contract(
    function: FunctionDef,
    entries: tuple[ContractEntry, ...],
    request: Request,
    slot: str,
    body: Any = None,
) -> ContractEntry | None:
    if not entries:
        return None
    return contract_choice(
        engine().tasks, entries, request, slot=slot, function_key=function.key, body=body
    )


def _schema_of(function: FunctionDef, entry: ContractEntry, slot: str) -> dict[str, Any]:
    """The JSON Schema of the schema component `entry` names (publish made sure it exists)."""
    document = engine().components.component(ComponentKind.SCHEMA, entry.reference)
    schema = (document.get("attributes") or {}).get("schema") if document else None
    if not isinstance(schema, dict):
        raise VNextError(
            Codes.APP_INTERNAL,
            f"the {slot} schema {entry.reference.get('key')} of function {function.key} is missing",
        )
    return schema


def _check_input(function: FunctionDef, request: Request) -> None:
    """400 `App:900002` with a pointer per problem when the sent body breaks the `inputSchema`
    entry that serves the request (a call without a body is not checked, as in vNext)."""
    if request.body is None:
        return
    entry = _contract(function, function.input_schema, request, "inputSchema")
    if entry is None:
        return
    schema = _schema_of(function, entry, "inputSchema")
    try:
        validate_attributes(schema, request.body, prefix="")
    except VNextError as exc:
        raise VNextError(
            Codes.APP_INVALID_REQUEST,
            f"the request body does not match the input schema of function {function.key} "
            f"({len(exc.violations)} problem(s))",
            exc.violations,
            instance_id=_instance_id(request),
        ) from exc


def _check_output(
    function: FunctionDef, request: Request, answer: FunctionAnswer, data: Any
) -> None:
    """A successful (2xx) answer's output breaking the `outputSchema` entry that serves the
    request is the function's contract failure: logged, 502 `Function:OutputInvalid` with the
    pointers, and the output is neither sent nor cached."""
    if not 200 <= answer.status <= 299:
        return
    entry = _contract(function, function.output_schema, request, "outputSchema")
    if entry is None:
        return
    schema = _schema_of(function, entry, "outputSchema")
    try:
        validate_attributes(schema, data, prefix="")
    except VNextError as exc:
        problems = "; ".join(f"{v.pointer or '/'}: {v.message}" for v in exc.violations)
        logger.error(
            "function %s (%s): the output breaks output schema %s: %s",
            function.key,
            request.instance.id,
            entry.reference.get("key"),
            problems,
        )
        raise VNextError(
            Codes.FUNCTION_OUTPUT_INVALID,
            f"function {function.key!r}: the output breaks its output schema "
            f"{entry.reference.get('key')} at {problems}",
            instance_id=_instance_id(request),
        ) from exc


# --- the cache ----------------------------------------------------------------------------------


def cache_store(name: str) -> BaseCache:
    """The Django cache a function's `storeName` names (`default` when empty);
    `InvalidCacheBackendError` when `CACHES` has no such alias."""
    return caches[name or DEFAULT_STORE]


def _digest(text: str, size: int = 24) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]


def generation_entry_key(domain: str, generation: str) -> str:
    """Where the current stamp of generation `generation` of `domain` is kept (in the store of
    the functions using it)."""
    return f"{GENERATION_PREFIX}:{domain}:{_digest(generation, 32)}"


def _generation_stamp(store: BaseCache, domain: str, generation: str) -> str:
    """The generation's current stamp. A generation never stamped (or whose stamp the store
    evicted) gets a fresh random one: losing a stamp invalidates, never revives, old entries."""
    key = generation_entry_key(domain, generation)
    stamp = store.get(key)
    if stamp is None:
        store.add(key, uuid.uuid4().hex, timeout=None)
        stamp = store.get(key)
    # A store that keeps nothing (the dummy cache): nothing is reused either.
    return str(stamp) if stamp is not None else uuid.uuid4().hex


def function_generation_bump(domain: str, generation: str, store: str = "") -> str:
    """Give generation `generation` of `domain` a new stamp in the cache alias `store`: every
    function entry made under the old stamp is unreachable from now on. The new stamp."""
    stamp = uuid.uuid4().hex
    cache_store(store).set(generation_entry_key(domain, generation), stamp, timeout=None)
    return stamp


def _key_source(function: FunctionDef, request: Request) -> str | None:
    """What keys the entry: `keyExpression`'s value, else `key`. None (run uncached, as vNext
    does: a key that cannot be computed is no reason to fail the call) when the expression
    fails or gives an empty key."""
    settings = function.cache
    assert settings is not None
    if settings.key_expression is None:
        return settings.key
    try:
        value = expression_value(engine().tasks, settings.key_expression, request)
    except ExpressionFailed as exc:
        logger.warning(
            "function %s: cache keyExpression failed, running uncached: %s", function.key, exc
        )
        return None
    return value or None


def _generation(function: FunctionDef, request: Request, store: BaseCache) -> str:
    """The entry key's generation part: empty without a generation, else the generation's name
    and current stamp (a computed name that changes makes old entries unreachable too)."""
    settings = function.cache
    assert settings is not None
    if not settings.has_generation:
        return ""
    name = settings.generation_key
    if settings.generation_expression is not None:
        try:
            name = expression_value(engine().tasks, settings.generation_expression, request)
        except ExpressionFailed as exc:
            raise _StoreFailed("generationKeyExpression", exc) from exc
    if not name:
        return ""
    try:
        stamp = _generation_stamp(store, function.domain, name)
    except Exception as exc:  # a cache backend's errors have no common base class
        raise _StoreFailed("generation read", exc) from exc
    return f":g:{_digest(name, 16)}:{stamp}"


class _StoreFailed(Exception):
    def __init__(self, what: str, cause: Exception) -> None:
        super().__init__(f"{what}: {cause}")
        self.what = what
        self.cause = cause


def _cached_answer(
    function: FunctionDef,
    request: Request,
    headers: dict[str, str],
    instance: InstanceSnapshot | None,
) -> FunctionAnswer:
    """The answer from the function's cache when it has one for this call, else a fresh one
    (kept for `ttlInSeconds`). An entry made for an instance is served only for that instance
    and while it is unchanged (its ETag), as the built-in function cache does; a domain
    function's entry lives its TTL (or until its generation moves on). Callers are authorized,
    and bodies checked, before it."""
    settings = function.cache
    if settings is None:
        return _answer(function, request)
    source = _key_source(function, request)
    if source is None:
        return _answer(function, request)
    try:
        store = cache_store(settings.store)
        generation = _generation(function, request, store)
    except _StoreFailed as failed:
        _cache_failed(function, failed.what, failed.cause, bypass=settings.bypass_on_error)
        return _answer(function, request)
    except Exception as exc:  # an alias no longer configured, a backend that cannot start
        _cache_failed(function, "store", exc, bypass=settings.bypass_on_error)
        return _answer(function, request)
    variant = json.dumps(settings.variant(headers), separators=(",", ":"))
    where = str(instance.id) if instance is not None else "-"
    key = (
        f"vnext:custom-function:{function.domain}:{function.key}@{function.version}:"
        f"{request.verb}:{_digest(source)}:{where}:{_digest(variant)}{generation}"
    )
    etag = instance.etag if instance is not None else None
    try:
        entry = store.get(key)
    except Exception as exc:  # a cache backend's errors have no common base class
        _cache_failed(function, "read", exc, bypass=settings.bypass_on_error)
        entry = None
    if isinstance(entry, tuple) and len(entry) == 4 and entry[0] == etag:
        return FunctionAnswer(entry[1], entry[2], entry[3])
    answer = _answer(function, request)
    try:
        store.set(key, (etag, answer.status, answer.headers, answer.body), settings.ttl_seconds)
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


# --- running and shaping ------------------------------------------------------------------------


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
    answer = _shaped(function, result, request)
    _check_output(function, request, answer, result.data)
    return answer


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


# --- catalogs -----------------------------------------------------------------------------------


def instance_function_catalog(
    *,
    definition: WorkflowDefinition,
    instance: InstanceSnapshot,
    roles: frozenset[str],
    headers: dict[str, str],
    query: dict[str, Any],
) -> list[dict[str, Any]]:
    """The functions the instance's workflow declares that the caller's roles may run, in
    declaration order, each with its contracts for this instance (the rules see the instance's
    data as `context.body`, as in vNext)."""
    request = _request(definition, instance, headers, query)
    base = f"/api/v1/{instance.domain}/workflows/{instance.workflow_key}/instances/{instance.id}"
    items = []
    for reference in definition.attributes.get("functions") or []:
        if not isinstance(reference, dict):
            continue
        document = engine().components.component(ComponentKind.FUNCTION, reference)
        if document is None:
            continue
        function = FunctionDef.parse(document)
        if function_allows(function, roles):
            items.append(
                _catalog_item(function, request, f"{base}/functions/{function.key}", instance.data)
            )
    return items


def domain_function_catalog(
    *, domain: str, roles: frozenset[str], headers: dict[str, str], query: dict[str, Any]
) -> list[dict[str, Any]]:
    """The domain functions (scope `D`, newest version of each key) the caller's roles may run,
    by key, each with its contracts (the rules see an empty instance and body)."""
    rows = (
        Component.objects.filter(kind=ComponentKind.FUNCTION, domain=domain)
        .order_by("key", *_NEWEST_FIRST)
        .values_list("key", "document")
    )
    newest: dict[str, FunctionDef] = {}
    for key, document in rows:
        if key not in newest:
            newest[key] = FunctionDef.parse(document)
    items = []
    for key, function in newest.items():
        if function.scope != FunctionScope.DOMAIN or not function_allows(function, roles):
            continue
        request = _request(_domain_workflow(function), _nobody(domain), headers, query)
        items.append(_catalog_item(function, request, f"/api/v1/{domain}/functions/{key}", {}))
    return items


def _catalog_item(
    function: FunctionDef, request: Request, href: str, rule_body: Any
) -> dict[str, Any]:
    def schema(entries: tuple[ContractEntry, ...], slot: str) -> dict[str, Any] | None:
        entry = _contract(function, entries, request, slot, rule_body)
        document = (
            engine().components.component(ComponentKind.SCHEMA, entry.reference) if entry else None
        )
        if document is None:
            return None
        attributes = document.get("attributes") or {}
        return {
            "key": document.get("key"),
            "version": document.get("version"),
            "type": attributes.get("type"),
            "schema": attributes.get("schema"),
        }

    def view(entries: tuple[ContractEntry, ...], slot: str) -> dict[str, Any] | None:
        entry = _contract(function, entries, request, slot, rule_body)
        document = (
            engine().components.component(ComponentKind.VIEW, entry.reference) if entry else None
        )
        if entry is None or document is None:
            return None
        attributes = document.get("attributes") or {}
        return {
            "key": document.get("key"),
            "version": document.get("version"),
            "content": attributes.get("content"),
            "type": attributes.get("type"),
            "display": attributes.get("display"),
            "label": attributes.get("labels") or attributes.get("label"),
            "loadData": entry.load_data,
        }

    return {
        "key": function.key,
        "domain": function.domain,
        "version": function.version,
        "scope": function.scope,
        "verbs": list(function.verbs),
        "rawResponse": function.raw_response,
        "cacheable": function.cache is not None,
        "labels": [dict(label) for label in function.labels],
        "href": href,
        "inputSchema": schema(function.input_schema, "inputSchema"),
        "outputSchema": schema(function.output_schema, "outputSchema"),
        "inputView": view(function.input_view, "inputView"),
        "outputView": view(function.output_view, "outputView"),
    }
