"""The operators' API: suspend, resume and migrate one instance, and batch operations over a
filter (`instances/repair.py`, `instances/batches.py`). Suspend and resume need the `drive
instances` grant; migrations and batches the operator-level `operate instances` grant."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from instances.answers import (
    instance_migrate_answer,
    instance_resume_answer,
    instance_suspend_answer,
)
from instances.api.openapi import INSTANCE_PATH, WORKFLOW_PATH
from instances.api.request_data import (
    PAYLOAD_PARSERS,
    query_flag,
    request_caller,
    request_info,
)
from instances.api.run_views import answer_response
from instances.api.serializers import (
    BatchBodySerializer,
    EnvelopeSerializer,
    MigrateBodySerializer,
    ReasonBodySerializer,
)
from instances.batches import (
    batch_cancel,
    batch_count,
    batch_create,
    batch_get,
    batch_items,
    batch_request,
)
from instances.engine.errors import Codes, Violation, VNextError
from instances.models import Batch
from instances.repair import Actor
from instances.selectors import readable_instances
from instances.status import BatchOutcome, BatchStatus
from vnext.openapi import responses
from vnext.views import ApiView
from workflows.access import Right

DRY_RUN = OpenApiParameter(
    "dryRun", OpenApiTypes.BOOL, description="report what would happen; change nothing"
)
BATCH_PATH = [
    *WORKFLOW_PATH,
    OpenApiParameter("batch", str, OpenApiParameter.PATH, description="the batch id"),
]
ITEMS_PAGE = [
    OpenApiParameter("outcome", str, description="only items of this outcome"),
    OpenApiParameter("after", int, description="items after this position (paging)"),
    OpenApiParameter("pageSize", int, description="items per page (1-1000, default 100)"),
]


def _reason(request: Request) -> str:
    body = request.data if isinstance(request.data, dict) else {}
    reason = body.get("reason", "")
    if reason is None:
        return ""
    if not isinstance(reason, str):
        raise VNextError(
            Codes.APP_INVALID_REQUEST,
            "reason is text",
            [Violation("/reason", "must be a string")],
        )
    return reason


class InstanceSuspendView(ApiView):
    """Suspend an Active instance."""

    parser_classes = PAYLOAD_PARSERS
    required_right = Right.DRIVE

    @extend_schema(
        operation_id="instance_suspend",
        tags=["operators"],
        request=ReasonBodySerializer,
        parameters=INSTANCE_PATH,
        responses=responses({200: EnvelopeSerializer}, 400, 409, body=True),
        summary="Suspend an instance",
    )
    def post(self, request: Request, domain: str, workflow: str, instance: str) -> Response:
        """Status `P`: transitions and retries answer 409 `Instance:100029`, its timers and
        workflow timeout wait; body `{"reason"}` optional. 409 `Instance:NotSuspendable` for
        an instance that is not Active."""
        return answer_response(
            instance_suspend_answer(
                domain=domain,
                workflow=workflow,
                ref=instance,
                reason=_reason(request),
                info=request_info(request),
            ),
            request,
        )


class InstanceResumeView(ApiView):
    """Resume a suspended instance."""

    parser_classes = PAYLOAD_PARSERS
    required_right = Right.DRIVE

    @extend_schema(
        operation_id="instance_resume",
        tags=["operators"],
        request=ReasonBodySerializer,
        parameters=INSTANCE_PATH,
        responses=responses({200: EnvelopeSerializer}, 400, 409, body=True),
        summary="Resume a suspended instance",
    )
    def post(self, request: Request, domain: str, workflow: str, instance: str) -> Response:
        """Active again; timers that came due while it was suspended fire now, the others
        at their time. 409 `Instance:NotSuspended` when it is not suspended."""
        return answer_response(
            instance_resume_answer(
                domain=domain,
                workflow=workflow,
                ref=instance,
                reason=_reason(request),
                info=request_info(request),
            ),
            request,
        )


class InstanceMigrateView(ApiView):
    """Migrate a running instance to another published version of its workflow."""

    parser_classes = PAYLOAD_PARSERS
    required_right = Right.OPERATE

    @extend_schema(
        operation_id="instance_migrate",
        tags=["operators"],
        request=MigrateBodySerializer,
        parameters=[*INSTANCE_PATH, DRY_RUN],
        responses=responses({200: OpenApiTypes.OBJECT}, 400, 404, 409, body=True),
        summary="Migrate an instance to another version",
    )
    def post(self, request: Request, domain: str, workflow: str, instance: str) -> Response:
        """Body `{"targetVersion", "stateMapping"?}`: the instance keeps its data and data
        version and lands in its state's counterpart (same key, or the mapping's); its
        timers follow the target. 200 report; refusals are 409/400/404 problems with their
        own `Migration:*` code. `dryRun=true`: the report, nothing changed (a refusal is in
        its `refused`)."""
        body = request.data if isinstance(request.data, dict) else {}
        return answer_response(
            instance_migrate_answer(
                domain=domain,
                workflow=workflow,
                ref=instance,
                target_version=body.get("targetVersion"),
                state_mapping=body.get("stateMapping"),
                dry_run=query_flag(request.query_params.get("dryRun"), "dryRun"),
                info=request_info(request),
            ),
            request,
        )


def batch_body(
    batch: Batch, items: list[Any] | None = None, *, next_after: int | None = None
) -> dict[str, Any]:
    """A batch's JSON: its progress, and a page of its items when given."""
    body: dict[str, Any] = {
        "id": str(batch.pk),
        "operation": batch.operation,
        "status": batch.status,
        "filter": batch.filter,
        "arguments": batch.arguments,
        "total": batch.total,
        "done": batch.done,
        "refused": batch.refused,
        "failed": batch.failed,
        "pending": max(batch.total - batch.handled, 0)
        if batch.status == BatchStatus.RUNNING
        else 0,
        "createdBy": batch.created_by,
        "createdAt": batch.created_at.isoformat().replace("+00:00", "Z"),
        "finishedAt": (
            batch.finished_at.isoformat().replace("+00:00", "Z") if batch.finished_at else None
        ),
    }
    if items is not None:
        body["items"] = [
            {
                "position": item.position,
                "instanceId": str(item.instance_id),
                "outcome": item.outcome,
                "reason": item.reason,
            }
            for item in items
        ]
        body["nextAfter"] = next_after
    return body


class BatchCreateView(ApiView):
    """Create a batch operation over the instances a filter matches."""

    parser_classes = PAYLOAD_PARSERS
    required_right = Right.OPERATE

    @extend_schema(
        operation_id="batch_create",
        tags=["operators"],
        request=BatchBodySerializer,
        parameters=WORKFLOW_PATH,
        responses=responses(
            {200: OpenApiTypes.OBJECT, 202: OpenApiTypes.OBJECT}, 400, 409, body=True
        ),
        summary="Start a batch operation",
    )
    def post(self, request: Request, domain: str, workflow: str) -> Response:
        """Body `{"operation": "retry|cancel|suspend|resume|migrate", "filter": <the list
        API's filter>, "dryRun": false, ...}` (retry: `attributes`, the correction; cancel,
        suspend, resume: `reason`; migrate: `targetVersion`, `stateMapping`). 202 `{id,
        total}`: the matching ids are frozen now and a job works them off; `dryRun`: 200
        `{total}` and nothing created."""
        body = request.data
        wanted = batch_request(body)
        dry_run = body.get("dryRun", False) if isinstance(body, dict) else False
        if not isinstance(dry_run, bool):
            raise VNextError(
                Codes.APP_INVALID_REQUEST, "dryRun is true or false", [Violation("/dryRun", "")]
            )
        caller = request_caller(request)
        visible = readable_instances(domain, workflow, caller)
        if dry_run:
            total = batch_count(
                domain=domain,
                workflow=workflow,
                request=wanted,
                visible=visible,
                roles=caller.roles,
            )
            return Response({"total": total, "dryRun": True})
        batch = batch_create(
            domain=domain,
            workflow=workflow,
            request=wanted,
            actor=Actor(request_info(request).actor),
            visible=visible,
            roles=caller.roles,
        )
        response = Response({"id": str(batch.pk), "total": batch.total}, status=202)
        response["Location"] = request.build_absolute_uri(
            f"/api/v1/{domain}/workflows/{workflow}/batches/{batch.pk}"
        )
        return response


class BatchDetailView(ApiView):
    """A batch's progress and a page of its items."""

    required_right = Right.OPERATE

    @extend_schema(
        operation_id="batch_get",
        tags=["operators"],
        parameters=[*BATCH_PATH, *ITEMS_PAGE],
        responses=responses({200: OpenApiTypes.OBJECT}, 404),
        summary="Get a batch operation",
    )
    def get(self, request: Request, domain: str, workflow: str, batch: str) -> Response:
        """`{id, operation, status, total, done, refused, failed, pending, items: [{position,
        instanceId, outcome, reason}], nextAfter}`; items in order, paged by `after` (the
        previous page's `nextAfter`) and `pageSize`, optionally of one `outcome`."""
        found = batch_get(domain=domain, workflow=workflow, batch_id=batch)
        params = request.query_params
        outcome = params.get("outcome")
        if outcome is not None and outcome not in BatchOutcome._value2member_map_:
            raise VNextError(
                Codes.APP_INVALID_QUERY,
                f"outcome is one of {', '.join(BatchOutcome)}",
                [Violation("/outcome", "unknown outcome")],
            )
        after = _int(params.get("after"), "after", 0, 0, 2**31)
        size = _int(params.get("pageSize"), "pageSize", 100, 1, 1000)
        items = batch_items(found, outcome=outcome, after=after, limit=size + 1)
        next_after = items[size - 1].position if len(items) > size else None
        return Response(batch_body(found, items[:size], next_after=next_after))


class BatchCancelView(ApiView):
    """Cancel a running batch."""

    required_right = Right.OPERATE

    @extend_schema(
        operation_id="batch_cancel",
        tags=["operators"],
        request=None,
        parameters=BATCH_PATH,
        responses=responses({200: OpenApiTypes.OBJECT}, 404, 409),
        summary="Cancel a batch operation",
    )
    def post(self, request: Request, domain: str, workflow: str, batch: str) -> Response:
        """Its pending items end `cancelled` (handled ones keep their outcome); 409
        `Batch:Finished` when it completed or was cancelled already."""
        found = batch_get(domain=domain, workflow=workflow, batch_id=batch)
        cancelled = batch_cancel(batch=found, actor=Actor(request_info(request).actor))
        return Response(batch_body(cancelled))


def _int(value: str | None, name: str, default: int, low: int, high: int) -> int:
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = low - 1
    if not low <= number <= high:
        raise VNextError(
            Codes.APP_INVALID_QUERY,
            f"{name} is a whole number from {low} to {high}",
            [Violation(f"/{name}", "out of range")],
        )
    return number
