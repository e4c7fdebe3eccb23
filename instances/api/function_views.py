"""The built-in functions of an instance (API.md section 3): state, data, view, schema and
authorize, each a handler of one dispatch table behind its own documented route. Each parses,
calls selectors and renders; errors are `VNextError`s rendered by the project's exception
handler."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from instances.api.openapi import EXTENSIONS, INSTANCE_PATH, NOT_MODIFIED
from instances.api.request_data import (
    check_readable,
    not_modified,
    query_flag,
    request_caller,
    request_extensions,
    request_headers,
    request_languages,
    request_query,
    request_roles_on,
    shown_extensions,
    with_etag,
)
from instances.api.serializers import (
    AuthorizeSerializer,
    DataFunctionSerializer,
    SchemaFunctionSerializer,
    StateFunctionSerializer,
    ViewFunctionSerializer,
)
from instances.builtin_functions import (
    data_function,
    function_cached,
    schema_function,
    state_function,
    view_function,
    view_variant,
    with_state_etag,
)
from instances.engine.definition import WorkflowDefinition
from instances.engine.errors import Codes, Violation, VNextError
from instances.engine.functions import ReadKind
from instances.engine.records import LONG_POLL_OWNER_PREFIX, InstanceSnapshot
from instances.engine.roles import Caller, allowed
from instances.engine.visibility import readable
from instances.extensions import extensions_etag
from instances.filters import MAX_FILTER_LENGTH
from instances.functions import declared_function, function_allows
from instances.selectors import (
    correlation_active_list,
    instance_at_version_get,
    instance_matches,
    shown_attributes,
    subflow_level_list,
)
from instances.services import instance_snapshot, workflow_definition
from vnext.openapi import ACCEPT_LANGUAGE, IF_NONE_MATCH, responses
from vnext.throttling import LongPollPerCallerThrottle
from vnext.views import ApiView
from workflows.access import Right

# Longest `?version=` of the data function (a data version is `major.minor.patch`).
MAX_VERSION_LENGTH = 64
DATA_FILTER = OpenApiParameter(
    "filter",
    {"type": "string", "maxLength": MAX_FILTER_LENGTH},
    description="the instance list's filter language: when it does not select this instance, "
    "the answer is 200 with `data: null` (filtered answers carry no ETag and are never 304)",
)

# A built-in function's answer for an instance of a definition. Each handler decides whether
# the caller may read what it describes: for a parent waiting on a subflow chain, the state and
# data functions describe (and check) the leaf; authorize answers whatever the query roles say.
BuiltInFunction = Callable[[Request, WorkflowDefinition, InstanceSnapshot], Response]


def _state_function(
    request: Request, definition: WorkflowDefinition, snapshot: InstanceSnapshot
) -> Response:
    """`functions/state`: where the instance (a parent waiting on a SubFlow chain: its leaf,
    seed 000) is and what the caller may do next, with an ETag and 304."""
    wait = request.query_params.get("wait")
    if wait is not None:
        # Honoured by the long-poll route in front of this view; checked here all the same.
        try:
            seconds = float(wait)
        except ValueError:
            seconds = -1.0
        if not seconds >= 0:  # also NaN
            raise VNextError(
                Codes.APP_INVALID_QUERY,
                "wait must be a number of seconds (0 or more)",
                [Violation("/wait", "a number of seconds, 0 or more")],
            )
    levels = subflow_level_list(instance=snapshot)
    base = request.path.rsplit("/functions/", 1)[0]
    correlations = correlation_active_list(instance=snapshot, levels=levels)
    leaf, leaf_definition, data_base = snapshot, definition, None
    if levels:
        leaf = levels[-1].child
        leaf_definition = workflow_definition(leaf.domain, leaf.workflow_key, leaf.workflow_version)
        data_base = f"/api/v1/{leaf.domain}/workflows/{leaf.workflow_key}/instances/{leaf.id}"
    roles = check_readable(request, leaf_definition, leaf)
    body = state_function(
        leaf_definition,
        leaf,
        base,
        correlations=correlations,
        data_base=data_base,
        roles=roles,
        languages=request_languages(request),
        headers=request_headers(request),
        query=request_query(request),
    )
    body = with_state_etag(body)
    etag = body["eTag"]
    if not_modified(request, etag):
        return with_etag(Response(status=status.HTTP_304_NOT_MODIFIED), etag)
    return with_etag(Response(body), etag)


def _data_function(
    request: Request, definition: WorkflowDefinition, snapshot: InstanceSnapshot
) -> Response:
    """`functions/data`: the data the caller may see, now (with an ETag and 304, unless
    filtered) or as of `?version=`; `data: null` when `?filter=` does not select it."""
    version = request.query_params.get("version")
    if version is None:
        # A parent waiting on a SubFlow chain answers with the data of the leaf its state
        # function describes (vNext: the leaf is what a client drives, through the parent's
        # URL); `GET` instance keeps the parent's own data.
        levels = subflow_level_list(instance=snapshot)
        if levels:
            snapshot = levels[-1].child
            definition = workflow_definition(
                snapshot.domain, snapshot.workflow_key, snapshot.workflow_version
            )
    roles = check_readable(request, definition, snapshot)
    requested = request_extensions(request)
    filters = request.query_params.getlist("filter")
    filtered = any(text.strip() for text in filters)
    if filtered and not instance_matches(snapshot, filters, roles):
        return Response(data_function(snapshot) | {"data": None, "extensions": {}})
    if version is None:
        return _current_data(request, definition, snapshot, roles, requested, filtered)
    if len(version) > MAX_VERSION_LENGTH:
        raise VNextError(
            Codes.APP_INVALID_QUERY,
            f"version is at most {MAX_VERSION_LENGTH} characters",
            [Violation("/version", f"a data version of at most {MAX_VERSION_LENGTH}")],
        )
    # The data as of one of its versions (`null` for one it never had): history, so no ETag.
    past = instance_at_version_get(instance=snapshot, version=version)
    shown = shown_attributes(definition, past, roles) if past is not None else None
    extensions = shown_extensions(request, definition, snapshot, ReadKind.INSTANCE, requested)
    return Response(data_function(snapshot, shown) | {"data": shown, "extensions": extensions})


def _current_data(
    request: Request,
    definition: WorkflowDefinition,
    snapshot: InstanceSnapshot,
    roles: frozenset[str],
    requested: tuple[str, ...],
    filtered: bool,
) -> Response:
    """The data function's answer for the current data (cached while the instance is
    unchanged), tagged with what this caller sees."""

    def shown_data() -> tuple[Any, str]:
        shown = shown_attributes(definition, snapshot, roles)
        etag = snapshot.entity_etag
        if shown is not snapshot.data:
            # What this caller sees differs from the stored data: so does its tag.
            text = json.dumps(shown, sort_keys=True, default=str).encode()
            etag = f"{etag}-{hashlib.sha256(text).hexdigest()[:16]}"
        return shown, etag

    shown, etag = function_cached(definition, snapshot, "data", roles, (), shown_data)
    # Extensions carry live data: never cached, and part of the answer's tag.
    extensions = shown_extensions(request, definition, snapshot, ReadKind.INSTANCE, requested)
    etag = extensions_etag(etag, extensions)
    body = data_function(snapshot, shown, etag=etag) | {"extensions": extensions}
    if filtered:
        # Whether the filter selects the instance is no part of the ETag: never 304.
        return Response(body)
    if not_modified(request, etag):
        return with_etag(Response(status=status.HTTP_304_NOT_MODIFIED), etag)
    return with_etag(Response(body), etag)


def _view_function(
    request: Request, definition: WorkflowDefinition, snapshot: InstanceSnapshot
) -> Response:
    """`functions/view`: the view of the state or of `?transitionKey=` (cached per variant)."""
    roles = check_readable(request, definition, snapshot)
    transition_key = request.query_params.get("transitionKey")
    headers, query = request_headers(request), request_query(request)
    variant = view_variant(
        definition, snapshot, transition_key, roles=roles, headers=headers, query=query
    )
    return Response(
        function_cached(
            definition,
            snapshot,
            "view",
            roles,
            variant,
            lambda: view_function(
                definition, snapshot, transition_key, roles=roles, headers=headers, query=query
            ),
        )
    )


def _schema_function(
    request: Request, definition: WorkflowDefinition, snapshot: InstanceSnapshot
) -> Response:
    """`functions/schema`: the schema of `?transitionKey=`, or the master schema (cached)."""
    roles = check_readable(request, definition, snapshot)
    transition_key = request.query_params.get("transitionKey")
    return Response(
        function_cached(
            definition,
            snapshot,
            "schema",
            roles,
            (transition_key,),
            lambda: schema_function(definition, snapshot, transition_key),
        )
    )


def _authorize_function(
    request: Request, definition: WorkflowDefinition, instance: InstanceSnapshot
) -> Response:
    """`functions/authorize` (API.md 3): may the caller (or the roles named by `role`) fire
    `transitionKey`, acknowledge its long-poll (`ack=true`), run the custom function
    `functionKey` (its `roles`) or read the instance (`queryRoles=true`, the default
    question)? 200 `{"allowed": true}` or 403 `{"allowed": false}`."""
    params = request.query_params
    named = [r for value in params.getlist("role") for r in value.split(",") if r.strip()]
    if named:
        caller = Caller(request_caller(request).actor, frozenset(r.strip() for r in named))
        roles = caller.on(instance.created_by, instance.modified_by)
    else:
        roles = request_roles_on(request, instance)
    state = instance.current_state
    # Every flag is checked, whichever question is asked: `ack=maybe` is 400 in any company.
    ack = query_flag(params.get("ack"), "ack")
    query_flag(params.get("queryRoles"), "queryRoles")
    transition_key = params.get("transitionKey")
    if transition_key:
        transition = definition.transition_for(state, transition_key)
        if transition is None:
            raise VNextError(
                Codes.TRANSITION_NOT_FOUND,
                f"no transition {transition_key!r} in state {state!r}",
                instance_id=str(instance.id),
            )
        verdict = transition.allows(state, roles, instance.overrides)
    elif ack:
        long_poll = definition.states[state].long_poll if state in definition.states else None
        awaiting = instance.busy_owner.startswith(LONG_POLL_OWNER_PREFIX)
        verdict = not awaiting or long_poll is None or allowed(long_poll.get("roles"), roles)
    elif params.get("functionKey"):
        function_key = str(params.get("functionKey"))
        function = declared_function(definition, function_key)
        if function is None:
            raise VNextError(
                Codes.FUNCTION_NOT_FOUND,
                f"workflow {definition.key} declares no function {function_key!r}",
                instance_id=str(instance.id),
            )
        # The function's own roles (running it also needs the instance to be readable).
        verdict = function_allows(function, roles)
    else:
        # `queryRoles=true`, and the question asked when none is: may the caller read it?
        verdict = readable(definition, state, roles, instance.overrides)
    code = status.HTTP_200_OK if verdict else status.HTTP_403_FORBIDDEN
    return Response({"allowed": verdict}, status=code)


_BUILT_INS: dict[str, BuiltInFunction] = {
    "state": _state_function,
    "data": _data_function,
    "view": _view_function,
    "schema": _schema_function,
    "authorize": _authorize_function,
}


class InstanceFunctionView(ApiView):
    """Built-in functions: state, data, view, schema."""

    required_right = Right.READ_INSTANCES
    # Counts only a long-poll's first read (`instances.api.longpoll` marks it).
    throttle_classes = [LongPollPerCallerThrottle]

    # The typed routes (`functions/state`, ...) are the documented ones; this one answers
    # 404 to a name that is none of them.
    schema: Any = None

    def get(
        self, request: Request, domain: str, workflow: str, instance: str, function: str
    ) -> Response:
        """`state` and `data` carry an ETag and answer 304 to a matching If-None-Match. Every
        function answers 403 when the current state's query roles refuse the caller; for a
        parent waiting on a subflow chain the leaf's state decides (the state it describes)."""
        snapshot = instance_snapshot(domain=domain, workflow=workflow, ref=instance)
        definition = workflow_definition(domain, snapshot.workflow_key, snapshot.workflow_version)
        answer = _BUILT_INS.get(function)
        if answer is None:
            check_readable(request, definition, snapshot)
            raise VNextError(Codes.APP_NOT_FOUND, f"unknown function {function!r}")
        return answer(request, definition, snapshot)


def _function_view(name: str, serializer: Any, **documented: Any) -> type[InstanceFunctionView]:
    """The route of one built-in function, documented with its own body."""

    class FunctionView(InstanceFunctionView):
        schema = AutoSchema()

        @extend_schema(
            operation_id=f"instance_function_{name}",
            tags=["functions"],
            responses=responses(
                {200: serializer, **documented.pop("more", {})}, *documented.pop("errors", ())
            ),
            **documented,
        )
        def get(  # type: ignore[override]
            self, request: Request, domain: str, workflow: str, instance: str
        ) -> Response:
            """The built-in function (see the class docstring)."""
            return super().get(request, domain, workflow, instance, name)

    FunctionView.__name__ = FunctionView.__qualname__ = f"Instance{name.title()}FunctionView"
    FunctionView.__doc__ = f"Built-in function `{name}`."
    return FunctionView


TRANSITION_KEY = OpenApiParameter("transitionKey", str, description="a transition of the state")
InstanceStateFunctionView = _function_view(
    "state",
    StateFunctionSerializer,
    more={304: NOT_MODIFIED},
    parameters=[
        *INSTANCE_PATH,
        IF_NONE_MATCH,
        ACCEPT_LANGUAGE,
        OpenApiParameter(
            "wait",
            {"type": "number", "minimum": 0},
            description="with If-None-Match = the current eTag, hold the request up to this "
            "many seconds for a change (long-poll), then 304",
        ),
    ],
    summary="State function: where the instance is, what the caller may do next",
)
InstanceDataFunctionView = _function_view(
    "data",
    DataFunctionSerializer,
    more={304: NOT_MODIFIED},
    parameters=[
        *INSTANCE_PATH,
        IF_NONE_MATCH,
        OpenApiParameter(
            "version",
            {"type": "string", "maxLength": MAX_VERSION_LENGTH},
            description="the data as of this data version (`1.0.3`); null when it never had it",
        ),
        DATA_FILTER,
        EXTENSIONS,
    ],
    summary="Data function: the instance data the caller may see",
)
InstanceViewFunctionView = _function_view(
    "view",
    ViewFunctionSerializer,
    parameters=[
        *INSTANCE_PATH,
        TRANSITION_KEY,
        OpenApiParameter("platform", str, description="web, ios, android"),
    ],
    summary="View function: the view of the state or of a transition",
)
InstanceSchemaFunctionView = _function_view(
    "schema",
    SchemaFunctionSerializer,
    parameters=[*INSTANCE_PATH, TRANSITION_KEY],
    summary="Schema function: the schema of a transition (or the master schema)",
)
InstanceAuthorizeFunctionView = _function_view(
    "authorize",
    AuthorizeSerializer,
    parameters=[
        *INSTANCE_PATH,
        TRANSITION_KEY,
        OpenApiParameter("queryRoles", OpenApiTypes.BOOL, description="may read the instance"),
        OpenApiParameter("ack", OpenApiTypes.BOOL, description="may acknowledge its long-poll"),
        OpenApiParameter(
            "functionKey",
            {"type": "string", "maxLength": 100},
            description="may run this custom function (its roles); 404 when the workflow "
            "declares none of that key",
        ),
        OpenApiParameter(
            "role", str, description="decide for these roles (comma separated) instead"
        ),
    ],
    summary="Authorize: may the caller (or the named roles) do this?",
)
