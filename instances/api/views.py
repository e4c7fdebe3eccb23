"""Instances API (API.md sections 2 and 3): thin views that parse, call a service or selector,
and render. Errors are `VNextError`s rendered by the project's exception handler."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from instances.api.presenters import envelope, history_row, instance_detail, list_item
from instances.engine.errors import Codes, Violation, VNextError
from instances.engine.outcomes import PipelineFault
from instances.engine.records import InstanceSnapshot
from instances.filters import parse_page
from instances.job_handlers import instance_settle, relays_run
from instances.selectors import (
    active_correlations,
    active_incident,
    active_incidents,
    data_function,
    incident_body,
    incident_page,
    instance_by_id,
    instance_history,
    instance_list,
    newest_transition_id,
    schema_function,
    state_function,
    subflow_chain,
    view_function,
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
    instance_transition,
    instance_transition_accept,
    workflow_definition,
)
from instances.status import InstanceStatus
from vnext.conf import vnext_setting

SYNC = OpenApiParameter("sync", bool, description="true: run to the next rest point, answer 200")


def _info(request: Request) -> RequestInfo:
    return RequestInfo(
        actor=request.user.get_username() if request.user.is_authenticated else "",
        headers={k.lower(): v for k, v in request.headers.items()},
        query=dict(request.query_params.items()),
    )


def _is_sync(request: Request) -> bool:
    return str(request.query_params.get("sync", "false")).lower() in ("true", "1", "yes")


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
) -> Response:
    """Run a start/transition/retry and answer: 202 `{id, status}` when accepted for a job;
    else 200 with the instance envelope. A run that faults its instance answers 200 as well,
    status `F`, with an `error` block (code, detail, the open incident), as vNext does (but
    `CALLER_FAULTS`). A run
    an error boundary stopped for a retry answers once the retries settle (they run here when
    no worker has them) or `SYNC_RETRY_WAIT_SECONDS` pass, whichever is first."""
    try:
        outcome = run()
    except PipelineFault as fault:
        if fault.code in CALLER_FAULTS:
            raise  # the exception handler answers with the code's own status
        # The faulted instance may be the active subflow a transition was forwarded to.
        instance = instance_by_id(fault.instance_id) or instance_snapshot(
            domain=domain, workflow=workflow, ref=str(fault.instance_id)
        )
        return _faulted(instance, fault.code, fault.message, retried)
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
    if accepted:
        body = {"id": str(instance.id), "status": str(instance.status), **extra}
        return Response(body, status=status.HTTP_202_ACCEPTED)
    execution = outcome.execution
    if execution is not None and execution.awaiting_retry is not None:
        wait = float(vnext_setting("SYNC_RETRY_WAIT_SECONDS"))
        instance = instance_settle(instance.id, within=wait) or instance
        incident = active_incident(instance) if instance.status == InstanceStatus.FAULTED else None
        if incident is not None:
            code, detail = incident["errorCode"], incident["message"]
            return _faulted(instance, code, detail, retried)
    return _with_etags(Response({**envelope(instance), **extra}), instance)


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
) -> Response:
    path = _instance_path(instance)
    error = {"errorCode": code, "detail": detail, "incident": {"href": f"{path}/incidents/active"}}
    extra = _retried(instance) if retried else {}
    return _with_etags(Response({**envelope(instance), **extra, "error": error}), instance)


class InstanceStartView(APIView):
    """Start an instance of a workflow."""

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        parameters=[SYNC, OpenApiParameter("version", str, description="workflow version")],
        responses={200: OpenApiTypes.OBJECT, 202: OpenApiTypes.OBJECT},
        summary="Start an instance",
    )
    def post(self, request: Request, domain: str, workflow: str) -> Response:
        """Start (idempotent by business key); 200 envelope with `sync=true`, else 202."""
        sync = _is_sync(request)
        start = instance_start if sync else instance_start_accept

        def run() -> InstanceOutcome:
            return start(
                domain=domain,
                workflow=workflow,
                body=request.data,
                info=_info(request),
                version=request.query_params.get("version") or None,
            )

        if sync:
            return _answer(domain, workflow, run, accepted=False)
        outcome = run()
        # An idempotent start answers with the instance that already exists.
        return _answer(domain, workflow, lambda: outcome, accepted=outcome.created)


class InstanceTransitionView(APIView):
    """Fire a transition on an instance."""

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        parameters=[SYNC],
        responses={200: OpenApiTypes.OBJECT, 202: OpenApiTypes.OBJECT},
        summary="Run a transition",
    )
    def patch(
        self, request: Request, domain: str, workflow: str, instance: str, transition: str
    ) -> Response:
        """Admit and run the transition; 409 `Instance:100031` when the instance is busy."""
        sync = _is_sync(request)
        run = instance_transition if sync else instance_transition_accept
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
            ),
            accepted=not sync,
        )


class InstanceRetryView(APIView):
    """Retry a Faulted instance."""

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        parameters=[SYNC],
        responses={200: OpenApiTypes.OBJECT, 202: OpenApiTypes.OBJECT},
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
        )


class InstanceLongPollAckView(APIView):
    """Acknowledge a long-poll that stopped at a `terminate` state."""

    @extend_schema(
        request=None,
        responses={200: OpenApiTypes.OBJECT},
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
        )

    @extend_schema(
        request=None,
        responses={200: OpenApiTypes.OBJECT},
        summary="Acknowledge a terminated long-poll",
    )
    def post(self, request: Request, domain: str, workflow: str, instance: str) -> Response:
        """The same as PATCH."""
        return self.patch(request, domain, workflow, instance)


class InstanceDetailView(APIView):
    """One instance."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT}, summary="Get an instance")
    def get(self, request: Request, domain: str, workflow: str, instance: str) -> Response:
        """The instance with its metadata; 304 for a matching If-None-Match."""
        snapshot = instance_snapshot(domain=domain, workflow=workflow, ref=instance)
        if _not_modified(request, snapshot.etag):
            return _with_etags(Response(status=status.HTTP_304_NOT_MODIFIED), snapshot)
        body = instance_detail(snapshot, active_incident(snapshot))
        return _with_etags(Response(body), snapshot)


class InstanceListView(APIView):
    """Instances of a workflow."""

    @extend_schema(
        parameters=[
            OpenApiParameter("filter", str, description='JSON, e.g. {"status": {"eq": "A"}}'),
            OpenApiParameter(
                "sort", str, description='{"field": "createdAt", "direction": "desc"}'
            ),
            OpenApiParameter("page", int),
            OpenApiParameter("pageSize", int),
        ],
        responses={200: OpenApiTypes.OBJECT},
        summary="List instances",
    )
    def get(self, request: Request, domain: str, workflow: str) -> Response:
        """A page of instances with next/prev links."""
        params = request.query_params
        page = instance_list(
            domain=domain,
            workflow=workflow,
            filter_text=params.get("filter"),
            sort=params.get("sort"),
            page=params.get("page"),
            page_size=params.get("pageSize"),
        )

        def link(number: int) -> str:
            query = params.copy()
            query["page"] = str(number)
            query["pageSize"] = str(page.page_size)
            return request.build_absolute_uri(f"{request.path}?{query.urlencode()}")

        incidents = active_incidents([row.pk for row in page.items])
        return Response(
            {
                "items": [list_item(row, incidents.get(row.pk)) for row in page.items],
                "page": page.page,
                "pageSize": page.page_size,
                "hasNext": page.has_next,
                "links": {
                    "next": link(page.page + 1) if page.has_next else None,
                    "prev": link(page.page - 1) if page.page > 1 else None,
                },
            }
        )


class InstanceHistoryView(APIView):
    """The transition history of an instance."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT}, summary="Transition history")
    def get(self, request: Request, domain: str, workflow: str, instance: str) -> Response:
        """Every transition attempt, oldest first."""
        snapshot = instance_snapshot(domain=domain, workflow=workflow, ref=instance)
        return Response({"items": [history_row(row) for row in instance_history(snapshot)]})


class InstanceIncidentListView(APIView):
    """The incidents of an instance, newest first."""

    @extend_schema(
        parameters=[OpenApiParameter("page", int), OpenApiParameter("pageSize", int)],
        responses={200: OpenApiTypes.OBJECT},
        summary="Incidents of an instance",
    )
    def get(self, request: Request, domain: str, workflow: str, instance: str) -> Response:
        """`{hasActiveIncident, items, page, pageSize, hasNext}`."""
        snapshot = instance_snapshot(domain=domain, workflow=workflow, ref=instance)
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


class InstanceActiveIncidentView(APIView):
    """The open incident of an instance."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT}, summary="Open incident")
    def get(self, request: Request, domain: str, workflow: str, instance: str) -> Response:
        """The newest open incident; 404 `Instance:100037` (a normal answer) when none."""
        snapshot = instance_snapshot(domain=domain, workflow=workflow, ref=instance)
        incident = active_incident(snapshot)
        if incident is None:
            raise VNextError(
                Codes.NO_ACTIVE_INCIDENT,
                "the instance has no open incident",
                instance_id=str(snapshot.id),
            )
        return Response(incident)


class InstanceFunctionView(APIView):
    """Built-in functions: state, data, view, schema."""

    @extend_schema(
        parameters=[
            OpenApiParameter("transitionKey", str),
            OpenApiParameter(
                "wait",
                float,
                description="state only: with If-None-Match = the current eTag, hold the "
                "request up to this many seconds for a change (long-poll), then 304",
            ),
        ],
        responses={200: OpenApiTypes.OBJECT, 304: None},
        summary="Built-in instance function",
    )
    def get(
        self, request: Request, domain: str, workflow: str, instance: str, function: str
    ) -> Response:
        """`state` and `data` carry an ETag and answer 304 to a matching If-None-Match."""
        snapshot = instance_snapshot(domain=domain, workflow=workflow, ref=instance)
        definition = workflow_definition(domain, snapshot.workflow_key, snapshot.workflow_version)
        transition_key = request.query_params.get("transitionKey")
        if function == "state":
            # A parent waiting on a SubFlow chain describes its leaf (seed 000).
            levels = subflow_chain(snapshot)
            base = request.path.rsplit("/functions/", 1)[0]
            correlations = active_correlations(snapshot, levels)
            if not levels:
                body = state_function(definition, snapshot, base, correlations=correlations)
            else:
                leaf = levels[-1].child
                body = state_function(
                    workflow_definition(leaf.domain, leaf.workflow_key, leaf.workflow_version),
                    leaf,
                    base,
                    correlations=correlations,
                    data_base=(
                        f"/api/v1/{leaf.domain}/workflows/{leaf.workflow_key}/instances/{leaf.id}"
                    ),
                )
            body = with_state_etag(body)
            etag = body["eTag"]
            if _not_modified(request, etag):
                return _etag(Response(status=status.HTTP_304_NOT_MODIFIED), etag)
            return _etag(Response(body), etag)
        if function == "data":
            etag = snapshot.entity_etag
            if _not_modified(request, etag):
                return _etag(Response(status=status.HTTP_304_NOT_MODIFIED), etag)
            return _etag(Response(data_function(snapshot)), etag)
        if function == "view":
            return Response(view_function(definition, snapshot, transition_key))
        if function == "schema":
            return Response(schema_function(definition, snapshot, transition_key))
        raise VNextError(Codes.APP_NOT_FOUND, f"unknown function {function!r}")


def _etag(response: Response, etag: str) -> Response:
    response["ETag"] = f'"{etag}"'
    return response


class SubflowForwardView(APIView):
    """Internal relay of a chain-reserved transition (API.md 5): service credential only."""

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
