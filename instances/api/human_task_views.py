"""The human-task inbox function (task type 5): `GET /api/v1/{domain}/functions/human-task` and
one task's `GET`, `POST .../claim`, `.../release`, `.../complete` under it
(`instances.human_tasks` decides; these views parse and render).

Who may: any authenticated caller sees and claims the tasks assigned to one of their roles (their
groups and token roles) or to them by name; completing one runs a transition, which needs the
`drive_instances` grant on its workflow (and the transition's own roles); an operator
(`operate_instances` on the workflow) may also read and release any task."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from instances.api.read_views import PAGE_SIZE
from instances.api.request_data import query_flag, request_caller, request_info
from instances.api.run_views import answer_response
from instances.engine.errors import Codes, Violation, VNextError
from instances.filters import parse_page
from instances.human_task_table import HumanTask
from instances.human_tasks import (
    MAX_INBOX_PAGE,
    InboxFilter,
    human_task_body,
    human_task_claim,
    human_task_complete,
    human_task_get,
    human_task_release,
    inbox_page,
)
from vnext.openapi import responses
from vnext.views import ApiView
from workflows.access import Right, has_right

DOMAIN = OpenApiParameter("domain", str, OpenApiParameter.PATH, description="the domain")
TASK = OpenApiParameter("task", str, OpenApiParameter.PATH, description="the human task's id")
_MAX_NAME = 200
_NAME = {"type": "string", "minLength": 1, "maxLength": _MAX_NAME}
INBOX_FILTERS = [
    OpenApiParameter("workflow", _NAME, description="only tasks of this workflow"),
    OpenApiParameter("state", _NAME, description="only tasks of this state"),
    OpenApiParameter(
        "claimed", bool, description="true: only claimed tasks; false: only unclaimed ones"
    ),
    OpenApiParameter("mine", bool, description="true: only the tasks the caller claimed"),
    OpenApiParameter(
        "page",
        {"type": "integer", "minimum": 1, "maximum": MAX_INBOX_PAGE},
        description=f"1..{MAX_INBOX_PAGE} (narrow the inbox rather than page deeper)",
    ),
    PAGE_SIZE,
]


class AssignedToSerializer(serializers.Serializer):
    roles = serializers.ListField(child=serializers.CharField())
    users = serializers.ListField(child=serializers.CharField())


class HumanTaskLinksSerializer(serializers.Serializer):
    claim = serializers.CharField()
    release = serializers.CharField()
    complete = serializers.CharField()


class HumanTaskSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    domain = serializers.CharField()
    workflow = serializers.CharField()
    instanceId = serializers.UUIDField()
    state = serializers.CharField()
    taskKey = serializers.CharField()
    title = serializers.CharField()
    instructions = serializers.CharField()
    assignedTo = AssignedToSerializer()
    form = serializers.JSONField(allow_null=True)
    context = serializers.JSONField(allow_null=True)  # type: ignore[assignment]
    status = serializers.ChoiceField(choices=["open", "claimed", "completed", "cancelled"])
    claimedBy = serializers.CharField(allow_null=True)
    claimedAt = serializers.DateTimeField(allow_null=True)
    completedBy = serializers.CharField(allow_null=True)
    completedAt = serializers.DateTimeField(allow_null=True)
    dueDate = serializers.DateTimeField(allow_null=True)
    overdue = serializers.BooleanField()
    createdAt = serializers.DateTimeField()
    href = serializers.CharField()
    links = HumanTaskLinksSerializer()


class HumanTaskPageSerializer(serializers.Serializer):
    items = HumanTaskSerializer(many=True)
    page = serializers.IntegerField()
    pageSize = serializers.IntegerField()
    hasNext = serializers.BooleanField()


class CompleteBodySerializer(serializers.Serializer):
    transition = serializers.CharField(
        required=False,
        max_length=200,
        help_text="the manual transition of the task's state to run (default: its only one)",
    )
    data = serializers.JSONField(  # type: ignore[assignment]
        required=False, help_text="the form data: the transition's body attributes"
    )


class CompletedSerializer(serializers.Serializer):
    task = HumanTaskSerializer()
    instance = serializers.JSONField(help_text="the transition's answer (the instance envelope)")


def _href(request: Request, task: HumanTask) -> str:
    return f"/api/v1/{task.domain}/functions/human-task/{task.pk}"


def _is_operator(request: Request, task: HumanTask) -> bool:
    return has_right(request.user, Right.OPERATE, task.domain, task.workflow_key)


def _filter(request: Request) -> InboxFilter:
    params = request.query_params
    for name in ("workflow", "state"):
        value = params.get(name)
        if value is not None and (not value or len(value) > _MAX_NAME):
            raise VNextError(
                Codes.APP_INVALID_QUERY,
                f"{name} is a name of 1 to {_MAX_NAME} characters",
                [Violation(f"/{name}", f"1 to {_MAX_NAME} characters")],
            )
    claimed = params.get("claimed")
    return InboxFilter(
        workflow=params.get("workflow") or None,
        state=params.get("state") or None,
        claimed=None if claimed is None else query_flag(claimed, "claimed"),
        mine=query_flag(params.get("mine"), "mine"),
    )


class HumanTaskInboxView(ApiView):
    """The caller's human tasks: open work assigned to their roles or to them."""

    permission_classes = [IsAuthenticated]

    @extend_schema(
        operation_id="human_task_inbox",
        tags=["human-tasks"],
        parameters=[DOMAIN, *INBOX_FILTERS],
        responses=responses({200: HumanTaskPageSerializer}),
        summary="Human-task inbox",
        description="The open and claimed human tasks (task type 5) of the domain's instances, "
        "root and sub instances alike, assigned to one of the caller's roles (groups, token "
        "roles) or to the caller by name; oldest first, ties by id.",
    )
    def get(self, request: Request, domain: str) -> Response:
        """`{items, page, pageSize, hasNext}`."""
        where = _filter(request)
        page, size = parse_page(
            request.query_params.get("page"), request.query_params.get("pageSize")
        )
        rows, has_next = inbox_page(
            domain=domain, caller=request_caller(request), where=where, page=page, page_size=size
        )
        items = [human_task_body(row, _href(request, row)) for row in rows]
        return Response({"items": items, "page": page, "pageSize": size, "hasNext": has_next})


class _OneTaskView(ApiView):
    permission_classes = [IsAuthenticated]

    def task_for(self, request: Request, domain: str, task: str) -> tuple[HumanTask, bool]:
        """The task as the caller may see it (assigned to them, claimed by them, or any to an
        operator of its workflow; 404 otherwise), and whether they are such an operator."""
        caller = request_caller(request)
        try:
            return human_task_get(domain=domain, task_id=task, caller=caller), False
        except VNextError:
            row = human_task_get(domain=domain, task_id=task, caller=caller, operator=True)
            if not _is_operator(request, row):
                raise
            return row, True


class HumanTaskDetailView(_OneTaskView):
    """One human task."""

    @extend_schema(
        operation_id="human_task_get",
        tags=["human-tasks"],
        parameters=[DOMAIN, TASK],
        responses=responses({200: HumanTaskSerializer}),
        summary="One human task",
    )
    def get(self, request: Request, domain: str, task: str) -> Response:
        """The task, assigned to the caller (or any, to an operator); 404 otherwise."""
        row, _ = self.task_for(request, domain, task)
        return Response(human_task_body(row, _href(request, row)))


def _require_drive(request: Request, row: HumanTask) -> None:
    # Completing runs a transition of the task's workflow: the caller's drive grant.
    if not has_right(request.user, Right.DRIVE, row.domain, row.workflow_key):
        raise VNextError(
            Codes.AUTHORIZATION_DENIED,
            f"you have no grant to drive instances of {row.workflow_key}",
        )


class HumanTaskClaimView(_OneTaskView):
    """Claim a human task."""

    @extend_schema(
        operation_id="human_task_claim",
        tags=["human-tasks"],
        parameters=[DOMAIN, TASK],
        request=None,
        responses=responses({200: HumanTaskSerializer}, 409),
        summary="Claim a human task",
        description="One compare-and-set: of callers claiming at once, one wins; the others get "
        "409 `HumanTask:AlreadyClaimed` (a closed task: 409 `HumanTask:NotOpen`). Claiming a "
        "task one holds already answers it again. It needs the drive grant that completing "
        "it needs (403).",
    )
    def post(self, request: Request, domain: str, task: str) -> Response:
        """The claimed task."""
        caller = request_caller(request)
        row = human_task_get(domain=domain, task_id=task, caller=caller)
        # A task one may not complete is not claimed either: it would be held from the others.
        _require_drive(request, row)
        claimed = human_task_claim(task=row, caller=caller)
        return Response(human_task_body(claimed, _href(request, claimed)))


class HumanTaskReleaseView(_OneTaskView):
    """Release a claimed human task."""

    @extend_schema(
        operation_id="human_task_release",
        tags=["human-tasks"],
        parameters=[DOMAIN, TASK],
        request=None,
        responses=responses({200: HumanTaskSerializer}, 409),
        summary="Release a human task",
        description="Back to the inbox, unclaimed: by its claimer, or an operator "
        "(`operate_instances` on the workflow); anyone else gets 409 `HumanTask:NotClaimer`.",
    )
    def post(self, request: Request, domain: str, task: str) -> Response:
        """The released task."""
        row, operator = self.task_for(request, domain, task)
        operator = operator or _is_operator(request, row)
        released = human_task_release(task=row, caller=request_caller(request), operator=operator)
        return Response(human_task_body(released, _href(request, released)))


class HumanTaskCompleteView(_OneTaskView):
    """Complete a claimed human task with its form data."""

    @extend_schema(
        operation_id="human_task_complete",
        tags=["human-tasks"],
        parameters=[DOMAIN, TASK],
        request=CompleteBodySerializer,
        responses=responses({200: CompletedSerializer}, 409, 422, body=True),
        summary="Complete a human task",
        description="By its claimer: the form data (checked against the task's `form` when it "
        "is a JSON Schema: 400 `HumanTask:InvalidForm` with pointers) becomes the body of a "
        "manual transition of the task's state (`transition`, or the state's only one), run "
        "sync. A transition refused (400, 403, 409) leaves the task claimed, and is the answer.",
    )
    def post(self, request: Request, domain: str, task: str) -> Response:
        """The completed task and the transition's answer."""
        caller = request_caller(request)
        row = human_task_get(domain=domain, task_id=task, caller=caller)
        _require_drive(request, row)
        body = request.data if isinstance(request.data, dict) else None
        if body is None:
            raise VNextError(
                Codes.APP_INVALID_REQUEST, "the body is an object", [Violation("", "an object")]
            )
        transition = body.get("transition")
        if transition is not None and (not isinstance(transition, str) or len(transition) > 200):
            raise VNextError(
                Codes.APP_INVALID_REQUEST,
                "transition is a transition key",
                [Violation("/transition", "a string of at most 200 characters")],
            )
        completed, answer = human_task_complete(
            task=row,
            caller=caller,
            transition=transition or None,
            data=body.get("data", {}),
            info=request_info(request),
        )
        instance = answer_response(answer, request)
        return Response(
            {
                "task": human_task_body(completed, _href(request, completed)),
                "instance": instance.data,
            },
            status=instance.status_code,
        )
