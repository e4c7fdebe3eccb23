"""The instances views that read (API.md section 2): one instance, the list, its transition
history and its incidents. Each parses, calls selectors and renders; errors are `VNextError`s
rendered by the project's exception handler."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, PolymorphicProxySerializer, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from instances.answers import history_row, instance_detail, listed_items
from instances.api.openapi import EXTENSIONS, INSTANCE_PATH, NOT_MODIFIED, WORKFLOW_PATH
from instances.api.request_data import (
    check_readable,
    not_modified,
    readable_snapshot,
    request_caller,
    request_extensions,
    request_headers,
    request_query,
    shown_extensions,
    with_etag,
    with_etags,
)
from instances.api.serializers import (
    GroupsSerializer,
    HistorySerializer,
    IncidentPageSerializer,
    IncidentSerializer,
    InstancePageSerializer,
    InstanceSerializer,
)
from instances.engine.errors import Codes, VNextError
from instances.engine.functions import ReadKind
from instances.extensions import extensions_etag
from instances.filters import MAX_FILTER_LENGTH, MAX_OPERAND_LENGTH, OPERATORS, parse_page
from instances.selectors import (
    Groups,
    Page,
    incident_active_get,
    incident_body,
    incident_list,
    instance_list,
    readable_instances,
    shown_attributes,
    transition_list,
)
from instances.services import instance_snapshot, workflow_definition
from vnext.conf import vnext_setting
from vnext.openapi import IF_NONE_MATCH, responses
from vnext.views import ApiView
from workflows.access import Right

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
# The list answers a page, or the groups of a groupBy.
INSTANCE_LISTING = PolymorphicProxySerializer(
    component_name="InstanceListing",
    serializers=[InstancePageSerializer, GroupsSerializer],
    resource_type_field_name=None,
)
UNINDEXED_HEADER = "X-VNext-Unindexed"


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
        requested = request_extensions(request)
        snapshot = instance_snapshot(domain=domain, workflow=workflow, ref=instance)
        definition = workflow_definition(domain, snapshot.workflow_key, snapshot.workflow_version)
        roles = check_readable(request, definition, snapshot)
        extensions = shown_extensions(request, definition, snapshot, ReadKind.INSTANCE, requested)
        etag = extensions_etag(snapshot.etag, extensions)
        if not_modified(request, etag):
            response = with_etags(Response(status=status.HTTP_304_NOT_MODIFIED), snapshot)
            return with_etag(response, etag)
        body = instance_detail(snapshot, incident_active_get(instance=snapshot))
        body["attributes"] = shown_attributes(definition, snapshot, roles)
        body["extensions"] = extensions
        return with_etag(with_etags(Response(body), snapshot), etag)


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
        requested = request_extensions(request)
        caller = request_caller(request)
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
        items = listed_items(
            page.items,
            caller=caller,
            requested=requested,
            headers=request_headers(request),
            query=request_query(request),
        )
        response = Response(
            {
                "items": items,
                "page": page.page,
                "pageSize": page.page_size,
                "hasNext": page.has_next,
                "nextCursor": page.next_cursor,
                "links": _page_links(request, page),
            }
        )
        return _unindexed(response, page.unindexed)


def _page_links(request: Request, page: Page) -> dict[str, str]:
    """The `links` of a page of instances: the same query, another page."""
    params = request.query_params

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
    return {
        "self": link(cursor=params["cursor"]) if by_cursor else link(page.page),
        "first": link(1),
        # Strings always, as vNext sends them: "" where there is no such page.
        "next": next_link,
        # Keyset pages go forward only: back by number while one reaches it.
        "prev": link(page.page - 1)
        if page.page > 1 and (page.page - 2) * page.page_size <= _max_page_offset()
        else "",
    }


def _max_page_offset() -> int:
    return int(vnext_setting("MAX_PAGE_OFFSET"))


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
        snapshot = readable_snapshot(request, domain, workflow, instance)
        return Response({"items": [history_row(row) for row in transition_list(instance=snapshot)]})


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
        snapshot = readable_snapshot(request, domain, workflow, instance)
        page, size = parse_page(
            request.query_params.get("page"), request.query_params.get("pageSize")
        )
        rows, has_next = incident_list(instance=snapshot, page=page, page_size=size)
        return Response(
            {
                "hasActiveIncident": incident_active_get(instance=snapshot) is not None,
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
        snapshot = readable_snapshot(request, domain, workflow, instance)
        incident = incident_active_get(instance=snapshot)
        if incident is None:
            raise VNextError(
                Codes.NO_ACTIVE_INCIDENT,
                "the instance has no open incident",
                instance_id=str(snapshot.id),
            )
        return Response(incident)
