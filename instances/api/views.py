"""Instances API (API.md sections 2 and 3): thin views that parse, call a service or selector,
and render. Errors are `VNextError`s rendered by the project's exception handler."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
)
from rest_framework import status
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from instances.api.presenters import envelope, history_row, instance_detail, list_item
from instances.api.serializers import (
    AcceptedSerializer,
    AuthorizeSerializer,
    DataFunctionSerializer,
    EnvelopeSerializer,
    EventOutcomeSerializer,
    FunctionCatalogSerializer,
    GroupsSerializer,
    HistorySerializer,
    IncidentPageSerializer,
    IncidentSerializer,
    InstancePageSerializer,
    InstanceSerializer,
    RetryBodySerializer,
    SchemaFunctionSerializer,
    StartBodySerializer,
    StateFunctionSerializer,
    TransitionBodySerializer,
    ViewFunctionSerializer,
)
from instances.engine.definition import WorkflowDefinition
from instances.engine.errors import Codes, Violation, VNextError
from instances.engine.functions import ReadKind
from instances.engine.outcomes import PipelineFault, PipelineSuperseded
from instances.engine.records import LONG_POLL_OWNER_PREFIX, InstanceSnapshot
from instances.engine.roles import Caller, allowed
from instances.engine.visibility import accepted_languages, readable
from instances.events import event_deliver
from instances.extensions import (
    extensions_etag,
    instance_extensions,
    listed_extensions,
    requested_extensions,
)
from instances.filters import MAX_FILTER_LENGTH, MAX_OPERAND_LENGTH, OPERATORS, parse_page
from instances.functions import (
    FunctionAnswer,
    FunctionVerbRefused,
    declared_function,
    domain_function_catalog,
    domain_function_run,
    function_allows,
    instance_function_catalog,
    instance_function_run,
)
from instances.job_handlers import instance_settle, relays_run
from instances.selectors import (
    Groups,
    active_correlations,
    active_incident,
    active_incidents,
    data_at_version,
    data_function,
    function_cached,
    incident_body,
    incident_page,
    instance_by_id,
    instance_history,
    instance_list,
    instance_matches,
    listed_attributes,
    master_schema,
    newest_transition_id,
    readable_instances,
    schema_function,
    shown_attributes,
    state_function,
    subflow_chain,
    view_function,
    view_variant,
    with_state_etag,
)
from instances.services import (
    InstanceOutcome,
    RequestInfo,
    instance_long_poll_ack,
    instance_relay,
    instance_retry,
    instance_snapshot,
    instance_start,
    instance_start_accept,
    instance_transition_accept,
    output_answer,
    start_runs_sync,
    transition_runs_sync,
    workflow_definition,
)
from instances.status import InstanceStatus
from instances.sync_transitions import instance_transition_run
from vnext.conf import header_deny_list, vnext_setting
from vnext.openapi import (
    ACCEPT_LANGUAGE,
    IF_NONE_MATCH,
    PAYLOAD_MODE,
    PROBLEM_MEDIA_TYPE,
    SYNC,
    problem,
    responses,
    with_form,
)
from vnext.parsers import BracketFormParser, JsonParser
from vnext.throttling import (
    LongPollPerCallerThrottle,
    StartPerCallerThrottle,
    StartPerWorkflowThrottle,
)
from vnext.views import ApiView
from workflows.access import Right, caller_of, has_right

NOT_MODIFIED = OpenApiResponse(description="Nothing changed since the eTag sent")
WORKFLOW_PATH = [
    OpenApiParameter("domain", str, OpenApiParameter.PATH, description="e.g. core"),
    OpenApiParameter(
        "workflow", str, OpenApiParameter.PATH, description="e.g. instance-management-test-workflow"
    ),
]
INSTANCE_PATH = [
    *WORKFLOW_PATH,
    OpenApiParameter(
        "instance", str, OpenApiParameter.PATH, description="the instance's UUID or business key"
    ),
]
TRANSITION_PATH = OpenApiParameter(
    "transition", str, OpenApiParameter.PATH, description="the transition key"
)
FILTER = OpenApiParameter(
    "filter",
    {"type": "string", "maxLength": MAX_FILTER_LENGTH},
    description="vNext's query language (doc/en/flow/instance-filtering.md). GraphQL-style JSON: "
    'instance columns at the top level (`{"status": {"in": ["Active", "Busy"]}}`), data fields '
    'under `attributes` (`{"attributes": {"amount": {"gt": "500"}}}`, nested objects or dotted '
    "paths), several fields at one level ANDed, `and` / `or` / `not`; operators "
    f"{', '.join(OPERATORS)} (`like`: contains, case-insensitive). Or the legacy "
    "`field=operator:value` (`customerId=eq:C-1`; lists comma separated). May carry `groupBy` "
    '(`{"filter": {...}, "groupBy": {...}}`). Operands at most '
    f"{MAX_OPERAND_LENGTH} characters; repeated `filter` parameters must all hold",
)
SORT = OpenApiParameter(
    "sort",
    {"type": "string", "maxLength": MAX_FILTER_LENGTH},
    description='`{"field": "createdAt", "direction": "desc"}`, `{"fields": [{"field": '
    '"status"}, {"field": "createdAt", "direction": "desc"}]}`, or `-createdAt,key`; '
    "default: newest first",
)
ORDER_BY = OpenApiParameter(
    "orderBy", {"type": "string", "maxLength": MAX_FILTER_LENGTH}, description="the same as sort"
)
GROUP_BY = OpenApiParameter(
    "groupBy",
    {"type": "string", "maxLength": MAX_FILTER_LENGTH},
    description='`{"field": "attributes.currency"}` or `{"fields": [...]}`, optionally with '
    '`"aggregations": {"count": true, "sum": "attributes.amount", "avg": ..., "min": ..., '
    '"max": ...}`: the answer is `{"groups": [{"name", "count", ...}]}`',
)
AGGREGATIONS = OpenApiParameter(
    "aggregations",
    {"type": "string", "maxLength": MAX_FILTER_LENGTH},
    description='the aggregations of groupBy, given apart: `{"count": true, "sum": '
    '"attributes.amount"}`',
)
DATA_FILTER = OpenApiParameter(
    "filter",
    {"type": "string", "maxLength": MAX_FILTER_LENGTH},
    description="the instance list's filter language: when it does not select this instance, "
    "the answer is 200 with `data: null` (filtered answers carry no ETag and are never 304)",
)
PAGE = OpenApiParameter(
    "page", {"type": "integer", "minimum": 1, "maximum": 1000}, description="1..1000"
)
PAGE_SIZE = OpenApiParameter(
    "pageSize", {"type": "integer", "minimum": 1, "maximum": 100}, description="1..100"
)
CURSOR = OpenApiParameter(
    "cursor",
    {"type": "string", "maxLength": 4000},
    description="the next page after the one that gave this token (`links.next`, "
    "`nextCursor`): keyset paging in the same order, at any depth (not with `page`; a page "
    "number may skip at most VNEXT_MAX_PAGE_OFFSET rows)",
)
EXTENSIONS = OpenApiParameter(
    "extensions",
    {
        "type": "array",
        "maxItems": 20,
        "items": {"type": "string", "pattern": r"^[a-z0-9-]+(,[a-z0-9-]+)*$", "maxLength": 2000},
    },
    explode=True,
    description="extensions to run on request (types 2 and 4), comma separated and/or "
    "repeated: `?extensions=a,b&extensions=c`. A name that is no extension of the workflow "
    "for this read gets an error object under its key in `extensions`",
)
# An accepted (202) start, transition or retry says where to poll.
ACCEPTED_LOCATION = OpenApiParameter(
    "Location",
    str,
    location=OpenApiParameter.HEADER,
    response=[202],
    required=True,
    description="the instance's URL (GET it, or its functions/state, to follow the job)",
)
# The list answers a page, or the groups of a groupBy.
INSTANCE_LISTING = PolymorphicProxySerializer(
    component_name="InstanceListing",
    serializers=[InstancePageSerializer, GroupsSerializer],
    resource_type_field_name=None,
)
START_EXAMPLE = OpenApiExample(
    "instance-management-test-workflow",
    value={"key": "order-42", "attributes": {"category": "priority", "priority": 2}},
    request_only=True,
)


def _caller(request: Request) -> Caller:
    # Built once per request: the groups query runs only when a role rule needs it.
    caller = getattr(request, "_vnext_caller", None)
    if caller is None:
        caller = caller_of(request.user, request.auth)
        request._vnext_caller = caller  # type: ignore[attr-defined]
    return caller


def _roles_on(request: Request, instance: InstanceSnapshot) -> frozenset[str]:
    return _caller(request).on(instance.created_by, instance.modified_by)


def _languages(request: Request) -> list[str]:
    return accepted_languages(request.headers.get("Accept-Language"))


def _check_readable(
    request: Request, definition: WorkflowDefinition, instance: InstanceSnapshot
) -> frozenset[str]:
    """The caller's roles on `instance`, or 403 when the current state's query roles (else
    the workflow's; a parent's SubFlow override replaces the state's) refuse them."""
    roles = _roles_on(request, instance)
    if not readable(definition, instance.current_state, roles, instance.overrides):
        raise VNextError(
            Codes.AUTHORIZATION_DENIED,
            f"your roles may not read instances in state {instance.current_state!r}",
            instance_id=str(instance.id),
        )
    return roles


def _readable_snapshot(request: Request, domain: str, workflow: str, ref: str) -> InstanceSnapshot:
    snapshot = instance_snapshot(domain=domain, workflow=workflow, ref=ref)
    definition = workflow_definition(domain, snapshot.workflow_key, snapshot.workflow_version)
    _check_readable(request, definition, snapshot)
    return snapshot


def _headers(request: Request) -> dict[str, str]:
    # Credential-like headers are dropped where the request is read: no script, job row or
    # event sees them (HEADER_DENY_PATTERNS).
    return header_deny_list().strip(request.headers)


def _info(request: Request) -> RequestInfo:
    return RequestInfo(
        actor=request.user.get_username() if request.user.is_authenticated else "",
        headers=_headers(request),
        query=dict(request.query_params.items()),
        caller=lambda: _caller(request),
    )


def _is_sync(request: Request) -> bool:
    return _flag(request.query_params.get("sync"), "sync")


def _with_etags(response: Response, instance: InstanceSnapshot) -> Response:
    response["ETag"] = f'"{instance.etag}"'
    response["X-Entity-ETag"] = f'"{instance.entity_etag}"'
    return response


def _not_modified(request: Request, etag: str) -> bool:
    sent = request.headers.get("If-None-Match", "")
    return bool(sent) and etag in {
        tag.strip().strip('"').removeprefix("W/").strip('"') for tag in sent.split(",")
    }


# Faults the caller's request caused, answered with their own status (409 lock conflict, 400 data
# the database refused) although the instance faulted; any other fault is the workflow's own work
# failing, answered 200 with the instance in status `F`.
CALLER_FAULTS = frozenset({Codes.RESOURCE_LOCK_CONFLICT.code, Codes.DATA_REFUSED.code})


def _instance_path(instance: InstanceSnapshot) -> str:
    return f"/api/v1/{instance.domain}/workflows/{instance.workflow_key}/instances/{instance.id}"


def _answer(
    domain: str,
    workflow: str,
    run: Callable[[], InstanceOutcome],
    *,
    accepted: bool,
    retried: bool = False,
    request: Request | None = None,
    shaped_by: str | None = None,
) -> Response:
    """Run a start/transition/retry and answer: 202 `{id, status}` when accepted for a job;
    else 200 with the instance envelope, or what the workflow's output mapping makes of it
    (`shaped_by` names the start or transition for its context; retries are never shaped).
    A run that faults its instance answers 200 as well, status `F`, with an `error` block
    (code, detail, the open incident), as vNext does (but `CALLER_FAULTS`). A run an error
    boundary stopped for a retry answers once the retries settle (they run here when no
    worker has them) or `SYNC_RETRY_WAIT_SECONDS` pass, whichever is first."""
    try:
        outcome = run()
    except PipelineSuperseded as superseded:
        # A cancel, exit or timeout took the instance over while this run was on its way:
        # the answer is what the instance is now, and what became of the request.
        instance = instance_by_id(superseded.instance_id) or instance_snapshot(
            domain=domain, workflow=workflow, ref=str(superseded.instance_id)
        )
        error = {"errorCode": superseded.code, "detail": superseded.message}
        body = {**_shown_envelope(instance, request), "error": error}
        return _with_etags(Response(body), instance)
    except PipelineFault as fault:
        if fault.code in CALLER_FAULTS:
            raise  # the exception handler answers with the code's own status
        # The faulted instance may be the active subflow a transition was forwarded to.
        instance = instance_by_id(fault.instance_id) or instance_snapshot(
            domain=domain, workflow=workflow, ref=str(fault.instance_id)
        )
        return _faulted(instance, fault.code, fault.message, retried, request, shaped_by)
    instance = outcome.instance
    execution = outcome.execution
    if not accepted and execution is not None and execution.relays:
        # Children started or a parent resumes: run those hand-offs before answering.
        relays_run(execution.instance.id)
        instance = instance_by_id(instance.id) or instance
    if outcome.addressed is not None:
        # Forwarded to the active subflow: the answer describes the instance the caller named.
        instance = instance_by_id(outcome.addressed) or instance
    extra = _retried(instance, outcome) if retried else {}
    if accepted or outcome.queued:
        body = {"id": str(instance.id), "status": str(instance.status), **extra}
        response = Response(body, status=status.HTTP_202_ACCEPTED)
        # Where to poll: the instance the caller named.
        path = _instance_path(instance)
        response["Location"] = request.build_absolute_uri(path) if request is not None else path
        return response
    execution = outcome.execution
    if execution is not None and execution.awaiting_retry is not None:
        wait = float(vnext_setting("SYNC_RETRY_WAIT_SECONDS"))
        instance = instance_settle(instance.id, within=wait) or instance
        incident = active_incident(instance) if instance.status == InstanceStatus.FAULTED else None
        if incident is not None:
            code, detail = incident["errorCode"], incident["message"]
            return _faulted(instance, code, detail, retried, request, shaped_by)
    return _sync_answer(instance, {**_shown_envelope(instance, request), **extra}, shaped_by)


def _sync_answer(
    instance: InstanceSnapshot, standard: dict[str, Any], shaped_by: str | None
) -> Response:
    """The standard envelope, or the workflow's output mapping's answer for it."""
    shaped = output_answer(instance, standard, transition_key=shaped_by) if shaped_by else None
    if shaped is None:
        return _with_etags(Response(standard), instance)
    response = Response(shaped.body, status=shaped.status)
    for name, value in shaped.headers.items():
        response[name] = value
    return _with_etags(response, instance)


def _shown_envelope(instance: InstanceSnapshot, request: Request | None) -> dict[str, Any]:
    """The envelope with the data the caller may see: none when the state's query roles
    refuse them, else through the master schema's field rules, and then the extensions of a
    single-instance read. No request: as stored, without extensions."""
    body = envelope(instance)
    if request is None:
        return body
    definition = workflow_definition(
        instance.domain, instance.workflow_key, instance.workflow_version
    )
    overrides = instance.overrides
    rules = definition.query_roles(instance.current_state, overrides)
    if rules or master_schema(definition) is not None:  # else nothing to decide: no groups query
        roles = _roles_on(request, instance)
        if not readable(definition, instance.current_state, roles, overrides):
            body["attributes"] = {}
            return body  # nor extensions: they would show what the caller may not read
        body["attributes"] = shown_attributes(definition, instance, roles)
    body["extensions"] = _extensions(request, definition, instance, ReadKind.INSTANCE, ())
    return body


def _requested_extensions(request: Request) -> tuple[str, ...]:
    return requested_extensions(request.query_params.getlist("extensions"))


def _extensions(
    request: Request,
    definition: WorkflowDefinition,
    instance: InstanceSnapshot,
    read: ReadKind,
    requested: tuple[str, ...],
) -> dict[str, Any]:
    """The `extensions` of an instance in this answer (the caller may read it)."""
    return instance_extensions(
        definition,
        instance,
        read,
        requested=requested,
        headers=_headers(request),
        query=dict(request.query_params.items()),
    )


def _retried(instance: InstanceSnapshot, outcome: InstanceOutcome | None = None) -> dict[str, Any]:
    # The history row of the re-run (its first hop), or the newest row when the run faulted.
    execution = outcome.execution if outcome is not None else None
    if execution is not None and execution.hops and execution.hops[0].row is not None:
        return {"retriedTransitionId": str(execution.hops[0].row.id)}
    newest = newest_transition_id(instance)
    return {"retriedTransitionId": str(newest) if newest else None}


def _faulted(
    instance: InstanceSnapshot,
    code: str,
    detail: str,
    retried: bool,
    request: Request | None = None,
    shaped_by: str | None = None,
) -> Response:
    path = _instance_path(instance)
    error = {"errorCode": code, "detail": detail, "incident": {"href": f"{path}/incidents/active"}}
    extra = _retried(instance) if retried else {}
    body = {**_shown_envelope(instance, request), **extra, "error": error}
    return _sync_answer(instance, body, shaped_by)


# Start, transition and retry bodies: JSON, or a form with bracket paths (API.md section 1).
PAYLOAD_PARSERS = [JsonParser, BracketFormParser]


class InstanceStartView(ApiView):
    """Start an instance of a workflow."""

    parser_classes = PAYLOAD_PARSERS
    required_right = Right.START
    throttle_classes = [StartPerCallerThrottle, StartPerWorkflowThrottle]

    @extend_schema(
        operation_id="instance_start",
        tags=["instances"],
        request=with_form(StartBodySerializer),
        parameters=[
            *WORKFLOW_PATH,
            SYNC,
            PAYLOAD_MODE,
            OpenApiParameter("version", str, description="workflow version (default: newest)"),
            ACCEPTED_LOCATION,
        ],
        responses=responses(
            {200: EnvelopeSerializer, 202: AcceptedSerializer}, 409, 422, body=True
        ),
        summary="Start an instance",
        examples=[START_EXAMPLE],
    )
    def post(self, request: Request, domain: str, workflow: str) -> Response:
        """Start (idempotent by business key); 200 envelope with `sync=true`, else 202 (the
        definition's `executionType` decides when it sets one)."""
        version = request.query_params.get("version") or None
        sync = start_runs_sync(domain, workflow, version, _is_sync(request))
        start = instance_start if sync else instance_start_accept

        def run() -> InstanceOutcome:
            return start(
                domain=domain,
                workflow=workflow,
                body=request.data,
                info=_info(request),
                version=version,
            )

        if sync:
            return _answer(
                domain, workflow, run, accepted=False, request=request, shaped_by="start"
            )
        outcome = run()
        # An idempotent start answers with the instance that already exists.
        return _answer(domain, workflow, lambda: outcome, accepted=outcome.created, request=request)


class InstanceTransitionView(ApiView):
    """Fire a transition on an instance."""

    parser_classes = PAYLOAD_PARSERS
    required_right = Right.DRIVE

    @extend_schema(
        operation_id="instance_transition_run",
        tags=["instances"],
        request=with_form(TransitionBodySerializer),
        parameters=[*INSTANCE_PATH, TRANSITION_PATH, SYNC, PAYLOAD_MODE, ACCEPTED_LOCATION],
        responses=responses(
            {200: EnvelopeSerializer, 202: AcceptedSerializer}, 409, 422, body=True
        ),
        summary="Run a transition",
    )
    def patch(
        self, request: Request, domain: str, workflow: str, instance: str, transition: str
    ) -> Response:
        """Admit and run the transition; 409 `Instance:100031` when the instance is busy. The
        transition's (else the workflow's) `executionType` overrides `?sync`."""
        sync, addressed = transition_runs_sync(
            domain=domain,
            workflow=workflow,
            ref=instance,
            transition_key=transition,
            requested=_is_sync(request),
        )
        run = instance_transition_run if sync else instance_transition_accept
        return _answer(
            domain,
            workflow,
            lambda: run(
                domain=domain,
                workflow=workflow,
                ref=instance,
                transition_key=transition,
                body=request.data,
                info=_info(request),
                addressed=addressed,
            ),
            accepted=not sync,
            request=request,
            shaped_by=transition,
        )


class InstanceRetryView(ApiView):
    """Retry a Faulted instance."""

    parser_classes = PAYLOAD_PARSERS
    required_right = Right.DRIVE

    @extend_schema(
        operation_id="instance_retry",
        tags=["instances"],
        request=with_form(RetryBodySerializer),
        parameters=[*INSTANCE_PATH, SYNC, ACCEPTED_LOCATION],
        responses=responses(
            {200: EnvelopeSerializer, 202: AcceptedSerializer}, 409, 422, body=True
        ),
        summary="Retry a faulted instance",
    )
    def post(self, request: Request, domain: str, workflow: str, instance: str) -> Response:
        """Merge the body's attributes, then re-run the faulting transition from the step that
        failed; 400 `Instance:100027` when the instance is not faulted, 409 when another retry
        has it. `sync=true`: 200 envelope; default: 202 and a job runs it."""
        sync = _is_sync(request)
        return _answer(
            domain,
            workflow,
            lambda: instance_retry(
                domain=domain,
                workflow=workflow,
                ref=instance,
                body=request.data,
                info=_info(request),
                sync=sync,
            ),
            accepted=not sync,
            retried=True,
            request=request,
        )


class InstanceLongPollAckView(ApiView):
    """Acknowledge a long-poll that stopped at a `terminate` state."""

    required_right = Right.DRIVE

    @extend_schema(
        operation_id="instance_long_poll_ack",
        tags=["instances"],
        request=None,
        parameters=INSTANCE_PATH,
        responses=responses({200: EnvelopeSerializer}, 409, 422),
        summary="Acknowledge a terminated long-poll",
    )
    def patch(self, request: Request, domain: str, workflow: str, instance: str) -> Response:
        """The client rendered the state: the paused run goes on; 200 envelope. 409
        `Instance:NoAckPending` when the instance awaits no acknowledgement (a second ack, or
        after the fallback)."""
        return _answer(
            domain,
            workflow,
            lambda: instance_long_poll_ack(
                domain=domain, workflow=workflow, ref=instance, info=_info(request)
            ),
            accepted=False,
            request=request,
        )

    @extend_schema(
        operation_id="instance_long_poll_ack_post",
        tags=["instances"],
        request=None,
        parameters=INSTANCE_PATH,
        responses=responses({200: EnvelopeSerializer}, 409, 422),
        summary="Acknowledge a terminated long-poll (POST form)",
    )
    def post(self, request: Request, domain: str, workflow: str, instance: str) -> Response:
        """The same as PATCH."""
        return self.patch(request, domain, workflow, instance)


class InstanceDetailView(ApiView):
    """One instance."""

    required_right = Right.READ_INSTANCES

    @extend_schema(
        operation_id="instance_get",
        tags=["instances"],
        parameters=[*INSTANCE_PATH, IF_NONE_MATCH, EXTENSIONS],
        responses=responses({200: InstanceSerializer, 304: NOT_MODIFIED}),
        summary="Get an instance",
    )
    def get(self, request: Request, domain: str, workflow: str, instance: str) -> Response:
        """The instance with its metadata and extensions; 304 for a matching If-None-Match
        (with extensions, the ETag covers their output too)."""
        requested = _requested_extensions(request)
        snapshot = instance_snapshot(domain=domain, workflow=workflow, ref=instance)
        definition = workflow_definition(domain, snapshot.workflow_key, snapshot.workflow_version)
        roles = _check_readable(request, definition, snapshot)
        extensions = _extensions(request, definition, snapshot, ReadKind.INSTANCE, requested)
        etag = extensions_etag(snapshot.etag, extensions)
        if _not_modified(request, etag):
            response = _with_etags(Response(status=status.HTTP_304_NOT_MODIFIED), snapshot)
            return _etag(response, etag)
        body = instance_detail(snapshot, active_incident(snapshot))
        body["attributes"] = shown_attributes(definition, snapshot, roles)
        body["extensions"] = extensions
        return _etag(_with_etags(Response(body), snapshot), etag)


class InstanceListView(ApiView):
    """Instances of a workflow."""

    required_right = Right.READ_INSTANCES

    @extend_schema(
        operation_id="instance_list",
        tags=["instances"],
        parameters=[
            *WORKFLOW_PATH,
            FILTER,
            SORT,
            ORDER_BY,
            GROUP_BY,
            AGGREGATIONS,
            PAGE,
            PAGE_SIZE,
            CURSOR,
            EXTENSIONS,
        ],
        responses=responses({200: INSTANCE_LISTING}),
        summary="List instances",
    )
    def get(self, request: Request, domain: str, workflow: str) -> Response:
        """A page of instances with `self`/`first`/`next`/`prev` links (`""` where there is no
        such page), each with its extensions; or `{"groups": [...]}` for a `groupBy`. `next`
        asks the next page by number while the number may skip its rows
        (`VNEXT_MAX_PAGE_OFFSET`), by cursor after that or when this page was read by one;
        `nextCursor` is the cursor always."""
        params = request.query_params
        requested = _requested_extensions(request)
        caller = _caller(request)
        listing = instance_list(
            domain=domain,
            workflow=workflow,
            filters=params.getlist("filter"),
            sort=params.get("sort"),
            order_by=params.get("orderBy"),
            group_by=params.get("groupBy"),
            aggregations=params.get("aggregations"),
            page=params.get("page"),
            page_size=params.get("pageSize"),
            cursor=params.get("cursor"),
            visible=readable_instances(domain, workflow, caller),
            roles=caller.roles,
        )
        if isinstance(listing, Groups):
            return _unindexed(Response({"groups": listing.groups}), listing.unindexed)
        page = listing

        def link(number: int | None = None, cursor: str | None = None) -> str:
            query = params.copy()
            query.pop("page", None)
            query.pop("cursor", None)
            if cursor:
                query["cursor"] = cursor
            else:
                query["page"] = str(number)
            query["pageSize"] = str(page.page_size)
            return request.build_absolute_uri(f"{request.path}?{query.urlencode()}")

        by_cursor = "cursor" in params
        if not page.has_next:
            next_link = ""
        elif by_cursor or not page.next_page_numbered:
            next_link = link(cursor=page.next_cursor)
        else:
            next_link = link(page.page + 1)

        incidents = active_incidents([row.pk for row in page.items])
        extensions = listed_extensions(
            page.items,
            requested=requested,
            headers=_headers(request),
            query=dict(params.items()),
        )
        response = Response(
            {
                "items": [
                    {
                        **list_item(row, incidents.get(row.pk)),
                        "attributes": listed_attributes(row, caller),
                        "extensions": extensions.get(row.pk, {}),
                    }
                    for row in page.items
                ],
                "page": page.page,
                "pageSize": page.page_size,
                "hasNext": page.has_next,
                "nextCursor": page.next_cursor,
                "links": {
                    "self": link(cursor=params["cursor"]) if by_cursor else link(page.page),
                    "first": link(1),
                    # Strings always, as vNext sends them: "" where there is no such page.
                    "next": next_link,
                    # Keyset pages go forward only: back by number while one reaches it.
                    "prev": link(page.page - 1)
                    if page.page > 1 and (page.page - 2) * page.page_size <= _max_page_offset()
                    else "",
                },
            }
        )
        return _unindexed(response, page.unindexed)


def _max_page_offset() -> int:
    return int(vnext_setting("MAX_PAGE_OFFSET"))


UNINDEXED_HEADER = "X-VNext-Unindexed"


def _unindexed(response: Response, fields: tuple[str, ...]) -> Response:
    """Name, in `X-VNext-Unindexed`, the data fields a listing on a big table filtered or
    sorted on without an index (the answer is right, only slow)."""
    if fields:
        response[UNINDEXED_HEADER] = ", ".join(fields)
    return response


class InstanceHistoryView(ApiView):
    """The transition history of an instance."""

    required_right = Right.READ_INSTANCES

    @extend_schema(
        operation_id="instance_history",
        tags=["instances"],
        parameters=INSTANCE_PATH,
        responses=responses({200: HistorySerializer}),
        summary="Transition history",
    )
    def get(self, request: Request, domain: str, workflow: str, instance: str) -> Response:
        """Every transition attempt, oldest first."""
        snapshot = _readable_snapshot(request, domain, workflow, instance)
        return Response({"items": [history_row(row) for row in instance_history(snapshot)]})


class InstanceIncidentListView(ApiView):
    """The incidents of an instance, newest first."""

    required_right = Right.READ_INSTANCES

    @extend_schema(
        operation_id="instance_incident_list",
        tags=["incidents"],
        parameters=[*INSTANCE_PATH, PAGE, PAGE_SIZE],
        responses=responses({200: IncidentPageSerializer}),
        summary="Incidents of an instance",
    )
    def get(self, request: Request, domain: str, workflow: str, instance: str) -> Response:
        """`{hasActiveIncident, items, page, pageSize, hasNext}`."""
        snapshot = _readable_snapshot(request, domain, workflow, instance)
        page, size = parse_page(
            request.query_params.get("page"), request.query_params.get("pageSize")
        )
        rows, has_next = incident_page(snapshot, page, size)
        return Response(
            {
                "hasActiveIncident": active_incident(snapshot) is not None,
                "items": [incident_body(row) for row in rows],
                "page": page,
                "pageSize": size,
                "hasNext": has_next,
            }
        )


class InstanceActiveIncidentView(ApiView):
    """The open incident of an instance."""

    required_right = Right.READ_INSTANCES

    @extend_schema(
        operation_id="instance_incident_active",
        tags=["incidents"],
        parameters=INSTANCE_PATH,
        responses=responses({200: IncidentSerializer}),
        summary="Open incident",
    )
    def get(self, request: Request, domain: str, workflow: str, instance: str) -> Response:
        """The newest open incident; 404 `Instance:100037` (a normal answer) when none."""
        snapshot = _readable_snapshot(request, domain, workflow, instance)
        incident = active_incident(snapshot)
        if incident is None:
            raise VNextError(
                Codes.NO_ACTIVE_INCIDENT,
                "the instance has no open incident",
                instance_id=str(snapshot.id),
            )
        return Response(incident)


# Longest `?version=` of the data function (a data version is `major.minor.patch`).
MAX_VERSION_LENGTH = 64


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
        transition_key = request.query_params.get("transitionKey")
        if function == "state":
            return self._state(request, definition, snapshot)
        if function == "authorize":
            return _authorize(request, definition, snapshot)
        if function == "data" and request.query_params.get("version") is None:
            # A parent waiting on a SubFlow chain answers with the data of the leaf its state
            # function describes (vNext: the leaf is what a client drives, through the parent's
            # URL); `GET` instance keeps the parent's own data.
            levels = subflow_chain(snapshot)
            if levels:
                snapshot = levels[-1].child
                definition = workflow_definition(
                    snapshot.domain, snapshot.workflow_key, snapshot.workflow_version
                )
        roles = _check_readable(request, definition, snapshot)
        if function == "data":
            requested = _requested_extensions(request)
            filters = request.query_params.getlist("filter")
            filtered = any(text.strip() for text in filters)
            if filtered and not instance_matches(snapshot, filters, roles):
                return Response(data_function(snapshot) | {"data": None, "extensions": {}})
            version = request.query_params.get("version")
            if version is not None and len(version) > MAX_VERSION_LENGTH:
                raise VNextError(
                    Codes.APP_INVALID_QUERY,
                    f"version is at most {MAX_VERSION_LENGTH} characters",
                    [Violation("/version", f"a data version of at most {MAX_VERSION_LENGTH}")],
                )
            if version is not None:
                # The data as of one of its versions (`null` for one it never had): history,
                # so no ETag.
                past = data_at_version(snapshot, version)
                shown = shown_attributes(definition, past, roles) if past is not None else None
                extensions = _extensions(
                    request, definition, snapshot, ReadKind.INSTANCE, requested
                )
                body = data_function(snapshot, shown) | {"data": shown, "extensions": extensions}
                return Response(body)

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
            extensions = _extensions(request, definition, snapshot, ReadKind.INSTANCE, requested)
            etag = extensions_etag(etag, extensions)
            body = data_function(snapshot, shown, etag=etag) | {"extensions": extensions}
            if filtered:
                # Whether the filter selects the instance is no part of the ETag: never 304.
                return Response(body)
            if _not_modified(request, etag):
                return _etag(Response(status=status.HTTP_304_NOT_MODIFIED), etag)
            return _etag(Response(body), etag)
        if function == "view":
            headers, query = _headers(request), dict(request.query_params.items())
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
                        definition,
                        snapshot,
                        transition_key,
                        roles=roles,
                        headers=headers,
                        query=query,
                    ),
                )
            )
        if function == "schema":
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
        raise VNextError(Codes.APP_NOT_FOUND, f"unknown function {function!r}")

    def _state(
        self, request: Request, definition: WorkflowDefinition, snapshot: InstanceSnapshot
    ) -> Response:
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
        # A parent waiting on a SubFlow chain describes its leaf (seed 000).
        levels = subflow_chain(snapshot)
        base = request.path.rsplit("/functions/", 1)[0]
        correlations = active_correlations(snapshot, levels)
        leaf, leaf_definition, data_base = snapshot, definition, None
        if levels:
            leaf = levels[-1].child
            leaf_definition = workflow_definition(
                leaf.domain, leaf.workflow_key, leaf.workflow_version
            )
            data_base = f"/api/v1/{leaf.domain}/workflows/{leaf.workflow_key}/instances/{leaf.id}"
        roles = _check_readable(request, leaf_definition, leaf)
        body = state_function(
            leaf_definition,
            leaf,
            base,
            correlations=correlations,
            data_base=data_base,
            roles=roles,
            languages=_languages(request),
            headers=_headers(request),
            query=dict(request.query_params.items()),
        )
        body = with_state_etag(body)
        etag = body["eTag"]
        if _not_modified(request, etag):
            return _etag(Response(status=status.HTTP_304_NOT_MODIFIED), etag)
        return _etag(Response(body), etag)


def _authorize(
    request: Request, definition: WorkflowDefinition, instance: InstanceSnapshot
) -> Response:
    """`functions/authorize` (API.md 3): may the caller (or the roles named by `role`) fire
    `transitionKey`, acknowledge its long-poll (`ack=true`), run the custom function
    `functionKey` (its `roles`) or read the instance (`queryRoles=true`, the default
    question)? 200 `{"allowed": true}` or 403 `{"allowed": false}`."""
    params = request.query_params
    named = [r for value in params.getlist("role") for r in value.split(",") if r.strip()]
    if named:
        caller = Caller(_caller(request).actor, frozenset(r.strip() for r in named))
        roles = caller.on(instance.created_by, instance.modified_by)
    else:
        roles = _roles_on(request, instance)
    state = instance.current_state
    # Every flag is checked, whichever question is asked: `ack=maybe` is 400 in any company.
    ack = _flag(params.get("ack"), "ack")
    _flag(params.get("queryRoles"), "queryRoles")
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


_TRUE, _FALSE = ("true",), ("false",)


def _flag(value: str | None, name: str = "flag") -> bool:
    """A boolean query parameter (absent: false); anything but true or false (any case), the
    empty string included, is 400."""
    if value is None:
        return False
    text = str(value).lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise VNextError(
        Codes.APP_INVALID_QUERY,
        f"{name} must be true or false, not {value!r}",
        [Violation(f"/{name}", "must be true or false")],
    )


def _etag(response: Response, etag: str) -> Response:
    response["ETag"] = f'"{etag}"'
    return response


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

FUNCTION_PATH = OpenApiParameter(
    "function",
    {"type": "string", "maxLength": 100},
    OpenApiParameter.PATH,
    description="the custom function's key (lower-case letters, digits, '-')",
)
FUNCTION_ANSWER = OpenApiResponse(
    OpenApiTypes.ANY,
    description="`{<functionKey in camelCase>: <output>}`: the output of the function's "
    "task (its mapping's output handler's object, else the task's response data) or of its "
    "output script. With `rawResponse: true` the output itself, with the status (and headers) "
    "its output script or task gave",
)
# A function's request body: a JSON object (its inputSchema, if any, says more), or a form with
# bracket paths spelling one.
FUNCTION_BODY = with_form(OpenApiTypes.OBJECT)
# GET reads; a verb that may change something through the function's tasks needs the drive grant.
FUNCTION_RIGHTS = {
    "GET": Right.READ_INSTANCES,
    "HEAD": Right.READ_INSTANCES,
    "OPTIONS": Right.READ_INSTANCES,
    "*": Right.DRIVE,
}
VERB_TEXT = {
    "get": "",
    "post": " with a body (POST)",
    "patch": " with a body (PATCH)",
    "delete": " (DELETE)",
}


def _function_responses(body: bool = False) -> dict[Any, Any]:
    answers = responses({200: FUNCTION_ANSWER}, body=body)
    answers[(405, PROBLEM_MEDIA_TYPE)] = problem(
        405,
        "`Function:VerbNotAllowed`: the function does not answer this verb (`Allow` lists "
        "the ones it does)",
    )
    answers[(502, PROBLEM_MEDIA_TYPE)] = problem(
        502,
        "`Function:ExecutionFailed`: a task or script of the function failed; "
        "`Function:OutputInvalid`: its output breaks its outputSchema",
    )
    answers[(503, PROBLEM_MEDIA_TYPE)] = problem(
        503, "`Function:CacheFailed`: its cache failed and bypassOnCacheError is false"
    )
    return answers


def _function_response(answer: FunctionAnswer) -> Response:
    response = Response(answer.body, status=answer.status)
    for name, value in answer.headers.items():
        response[name] = value
    return response


def _function_body(request: Request) -> Any:
    """The body a POST, PATCH or DELETE sent (JSON or a bracket-path form), None without one."""
    data = request.data
    return None if request.stream is None else data


def _functions_called(view: ApiView, run: Callable[[], FunctionAnswer]) -> Response:
    """Run a function call; a verb the function does not answer is 405 with its `Allow`."""
    try:
        return _function_response(run())
    except FunctionVerbRefused as refused:
        # DRF writes the view's headers over the response's: the function's verbs, not the
        # route's.
        view.headers["Allow"] = ", ".join(refused.allowed)
        raise


def _custom_function_schema(verb: str) -> Callable[[Any], Any]:
    return extend_schema(
        operation_id="instance_function_custom" + ("" if verb == "get" else f"_{verb}"),
        tags=["functions"],
        parameters=[*INSTANCE_PATH, FUNCTION_PATH],
        request=FUNCTION_BODY if verb in ("post", "patch") else None,
        responses=_function_responses(body=verb != "get"),
        summary=f"Custom function: run a function the workflow declares{VERB_TEXT[verb]}",
        description="Runs the function's task(s) with this instance as the scripts' context "
        "(`context.headers`: the request's headers without credentials; `context.query`: its "
        "query parameters, all passed on; `context.body`: the body of a POST, PATCH or DELETE, "
        "a JSON object or a bracket-path form). The built-in state, data, view, schema and "
        "authorize functions have their own routes and always win. GET needs the "
        "read-instances grant, the other verbs the drive grant. 403 when the state's query "
        "roles or the function's `roles` refuse the caller; 404 `Function:NotFound` when the "
        "workflow declares no such function; 405 `Function:VerbNotAllowed` when the function's "
        "`verbs` do not include this one (`Allow` lists them); 400 `App:900002` when the body "
        "breaks the function's `inputSchema` (one pointer per problem); 502 "
        "`Function:ExecutionFailed` when a task or script fails, `Function:OutputInvalid` when "
        "the output breaks its `outputSchema`. A function with `cache` answers from it while "
        "the instance is unchanged, for its `ttlInSeconds`.",
    )


class InstanceCustomFunctionView(ApiView):
    """A custom function (`sys-functions`) the instance's workflow declares."""

    parser_classes = PAYLOAD_PARSERS
    required_right = FUNCTION_RIGHTS

    def _call(
        self, request: Request, domain: str, workflow: str, instance: str, function: str
    ) -> Response:
        snapshot = instance_snapshot(domain=domain, workflow=workflow, ref=instance)
        definition = workflow_definition(domain, snapshot.workflow_key, snapshot.workflow_version)
        roles = _check_readable(request, definition, snapshot)
        return _functions_called(
            self,
            lambda: instance_function_run(
                definition=definition,
                instance=snapshot,
                name=function,
                roles=roles,
                headers=_headers(request),
                query=dict(request.query_params.items()),
                verb=request.method or "GET",
                body=lambda: _function_body(request),
            ),
        )

    @_custom_function_schema("get")
    def get(
        self, request: Request, domain: str, workflow: str, instance: str, function: str
    ) -> Response:
        """Run the declared function `function` on the instance (see the OpenAPI text)."""
        return self._call(request, domain, workflow, instance, function)

    @_custom_function_schema("post")
    def post(
        self, request: Request, domain: str, workflow: str, instance: str, function: str
    ) -> Response:
        """The same with a body (POST)."""
        return self._call(request, domain, workflow, instance, function)

    @_custom_function_schema("patch")
    def patch(
        self, request: Request, domain: str, workflow: str, instance: str, function: str
    ) -> Response:
        """The same with a body (PATCH)."""
        return self._call(request, domain, workflow, instance, function)

    @_custom_function_schema("delete")
    def delete(
        self, request: Request, domain: str, workflow: str, instance: str, function: str
    ) -> Response:
        """The same (DELETE; a body, if sent, is read like a POST's)."""
        return self._call(request, domain, workflow, instance, function)


DOMAIN_FUNCTION_VERSION = OpenApiParameter(
    "version",
    {"type": "string", "maxLength": MAX_VERSION_LENGTH},
    description="the function's version (default: the newest)",
)


def _domain_function_schema(verb: str) -> Callable[[Any], Any]:
    return extend_schema(
        operation_id="domain_function" + ("" if verb == "get" else f"_{verb}"),
        tags=["functions"],
        parameters=[WORKFLOW_PATH[0], FUNCTION_PATH, DOMAIN_FUNCTION_VERSION],
        request=FUNCTION_BODY if verb in ("post", "patch") else None,
        responses=_function_responses(body=verb != "get"),
        summary=f"Domain function: run a domain-scoped function{VERB_TEXT[verb]}",
        description="Runs a function of scope `D` of the domain (its newest version unless "
        "`version` is given) without an instance: `context.instance` is empty, "
        "`context.headers` and `context.query` are the request's, `context.body` the body of a "
        "POST, PATCH or DELETE (a JSON object or a bracket-path form). Needs a domain-wide "
        "read-instances grant for GET, a domain-wide drive grant for the other verbs. 403 when "
        "the function's `roles` refuse the caller; 404 `Function:NotFound` for no such "
        "function or one of another scope; 405 `Function:VerbNotAllowed` when its `verbs` do "
        "not include this one (`Allow` lists them); 400 `App:900002` when the body breaks its "
        "`inputSchema`; 502 `Function:ExecutionFailed` when a task or script fails, "
        "`Function:OutputInvalid` when the output breaks its `outputSchema`.",
    )


class DomainFunctionView(ApiView):
    """A domain function (`sys-functions`, scope `D`), run without an instance."""

    parser_classes = PAYLOAD_PARSERS
    # A domain-wide grant: the URL names no workflow.
    required_right = FUNCTION_RIGHTS

    def _call(self, request: Request, domain: str, function: str) -> Response:
        version = request.query_params.get("version")
        if version is not None and len(version) > MAX_VERSION_LENGTH:
            raise VNextError(
                Codes.APP_INVALID_QUERY,
                f"version is at most {MAX_VERSION_LENGTH} characters",
                [Violation("/version", f"a version of at most {MAX_VERSION_LENGTH} characters")],
            )
        query = {k: v for k, v in request.query_params.items() if k != "version"}
        return _functions_called(
            self,
            lambda: domain_function_run(
                domain=domain,
                name=function,
                version=version,
                roles=_caller(request).roles,
                headers=_headers(request),
                query=query,
                verb=request.method or "GET",
                body=lambda: _function_body(request),
            ),
        )

    @_domain_function_schema("get")
    def get(self, request: Request, domain: str, function: str) -> Response:
        """Run the domain function (see the OpenAPI text)."""
        return self._call(request, domain, function)

    @_domain_function_schema("post")
    def post(self, request: Request, domain: str, function: str) -> Response:
        """The same with a body (POST)."""
        return self._call(request, domain, function)

    @_domain_function_schema("patch")
    def patch(self, request: Request, domain: str, function: str) -> Response:
        """The same with a body (PATCH)."""
        return self._call(request, domain, function)

    @_domain_function_schema("delete")
    def delete(self, request: Request, domain: str, function: str) -> Response:
        """The same (DELETE; a body, if sent, is read like a POST's)."""
        return self._call(request, domain, function)


CATALOG_TEXT = (
    " Each item: key, domain, version, scope, the verbs it answers, rawResponse, cacheable, "
    "labels, href (where to call it) and its contracts: inputSchema / outputSchema "
    "`{key, version, type, schema}` and inputView / outputView `{key, version, content, type, "
    "display, label, loadData}`, each the entry its rules choose for this caller (null: none "
    "declared or none holds). Functions whose `roles` refuse the caller are left out."
)


class InstanceFunctionCatalogView(ApiView):
    """The custom functions of an instance's workflow, with their contracts."""

    required_right = Right.READ_INSTANCES

    @extend_schema(
        operation_id="instance_function_catalog",
        tags=["functions"],
        parameters=INSTANCE_PATH,
        responses=responses({200: FunctionCatalogSerializer}),
        summary="Function catalog: the custom functions of this instance",
        description="The functions the instance's workflow declares (attributes.functions), in "
        "declaration order; the contracts' rules see the instance's data as `context.body`. "
        "403 when the state's query roles refuse the caller." + CATALOG_TEXT,
    )
    def get(self, request: Request, domain: str, workflow: str, instance: str) -> Response:
        """The catalog (see the OpenAPI text)."""
        snapshot = instance_snapshot(domain=domain, workflow=workflow, ref=instance)
        definition = workflow_definition(domain, snapshot.workflow_key, snapshot.workflow_version)
        roles = _check_readable(request, definition, snapshot)
        items = instance_function_catalog(
            definition=definition,
            instance=snapshot,
            roles=roles,
            headers=_headers(request),
            query=dict(request.query_params.items()),
        )
        return Response({"items": items})


class DomainFunctionCatalogView(ApiView):
    """The domain functions of a domain, with their contracts."""

    # A domain-wide grant: the URL names no workflow.
    required_right = Right.READ_INSTANCES

    @extend_schema(
        operation_id="domain_function_catalog",
        tags=["functions"],
        parameters=[WORKFLOW_PATH[0]],
        responses=responses({200: FunctionCatalogSerializer}),
        summary="Function catalog: the domain functions",
        description="The domain's functions of scope `D` (the newest version of each), by key; "
        "needs a domain-wide read-instances grant." + CATALOG_TEXT,
    )
    def get(self, request: Request, domain: str) -> Response:
        """The catalog (see the OpenAPI text)."""
        items = domain_function_catalog(
            domain=domain,
            roles=_caller(request).roles,
            headers=_headers(request),
            query=dict(request.query_params.items()),
        )
        return Response({"items": items})


class SubflowForwardView(ApiView):
    """Internal relay of a chain-reserved transition (API.md 5): service credential only."""

    permission_classes = [IsAuthenticated]  # and the relay permission, checked below

    # Internal (service credential only): not part of the public API document.
    @extend_schema(exclude=True)
    def post(self, request: Request, domain: str, instance: str) -> Response:
        """Body `{transitionKey, reservation, attributes?}`: run the transition under the
        chain-reserve claim `reservation`. 403 without the `instances.relay_subflow`
        permission; 409 `Instance:100031` when the instance does not hold that claim."""
        if not request.user.has_perm("instances.relay_subflow"):
            raise VNextError(
                Codes.AUTHORIZATION_DENIED, "the subflow relay needs a service credential"
            )
        data = request.data if isinstance(request.data, dict) else {}
        key, reservation = data.get("transitionKey"), data.get("reservation")
        missing = [
            Violation(f"/{name}", "a non-empty string is required")
            for name, value in (("transitionKey", key), ("reservation", reservation))
            if not isinstance(value, str) or not value
        ]
        if missing:
            raise VNextError(Codes.APP_INVALID_REQUEST, "invalid relay request", missing)
        return _answer(
            domain,
            "",
            lambda: instance_relay(
                domain=domain,
                ref=instance,
                transition_key=str(key),
                reservation=str(reservation),
                body={"attributes": data.get("attributes") or {}},
                info=_info(request),
            ),
            accepted=False,
        )


class InstanceEventView(ApiView):
    """Deliver an event: start an instance, or run an event transition (seed 001)."""

    required_right = Right.DRIVE

    @extend_schema(
        operation_id="instance_event_deliver",
        tags=["instances"],
        request=OpenApiTypes.OBJECT,
        parameters=[
            *WORKFLOW_PATH,
            OpenApiParameter(
                "action", {"type": "string", "enum": ["start", "transition"]}, required=True
            ),
            OpenApiParameter(
                "transitionKey",
                {"type": "string", "minLength": 1},
                description="the event transition; required with action=transition",
            ),
        ],
        responses=responses({200: EventOutcomeSerializer}, 404, 422, body=True),
        summary="Deliver an event (start, or an event transition)",
    )
    def post(self, request: Request, domain: str, workflow: str) -> Response:
        """200 `{eventId, matched, instances, duplicate}` — also when no instance matches (0)
        and for an event id seen before (`duplicate`, nothing changes). The work is accepted as
        jobs. 400 `NotAnEventTransition` for a transition without `triggerType: 3`."""
        action = request.query_params.get("action") or ""
        if action == "start" and not has_right(request.user, Right.START, domain, workflow):
            raise VNextError(
                Codes.AUTHORIZATION_DENIED, "you have no grant to start instances of this workflow"
            )
        outcome = event_deliver(
            domain=domain,
            workflow=workflow,
            action=action,
            transition_key=request.query_params.get("transitionKey") or None,
            body=request.data,
            headers=_headers(request),
            info=_info(request),
        )
        return Response(outcome.as_dict())
