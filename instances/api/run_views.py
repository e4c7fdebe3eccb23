"""The instances views that run something (API.md sections 2 and 5): start, transition, retry,
the long-poll acknowledgement, the internal subflow relay and event delivery. Each parses, calls
one use case of `instances.answers` (or a service) and renders; errors are `VNextError`s
rendered by the project's exception handler."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from instances.answers import (
    RunAnswer,
    instance_long_poll_ack_answer,
    instance_relay_answer,
    instance_retry_answer,
    instance_start_answer,
    instance_transition_answer,
)
from instances.api.openapi import INSTANCE_PATH, WORKFLOW_PATH
from instances.api.request_data import (
    PAYLOAD_PARSERS,
    request_headers,
    request_info,
    sync_requested,
    with_etags,
)
from instances.api.serializers import (
    AcceptedSerializer,
    EnvelopeSerializer,
    EventOutcomeSerializer,
    RetryBodySerializer,
    StartBodySerializer,
    TransitionBodySerializer,
)
from instances.engine.errors import Codes, Violation, VNextError
from instances.events import event_deliver
from vnext.openapi import PAYLOAD_MODE, SYNC, responses, with_form
from vnext.throttling import StartPerCallerThrottle, StartPerWorkflowThrottle
from vnext.views import ApiView
from workflows.access import Right, has_right

TRANSITION_PATH = OpenApiParameter(
    "transition", str, OpenApiParameter.PATH, description="the transition key"
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
START_EXAMPLE = OpenApiExample(
    "instance-management-test-workflow",
    value={"key": "order-42", "attributes": {"category": "priority", "priority": 2}},
    request_only=True,
)


def answer_response(answer: RunAnswer, request: Request | None) -> Response:
    """`answer` as a DRF response; a 202's `Location` made absolute against `request` (None:
    the path alone)."""
    response = Response(answer.body, status=answer.status)
    for name, value in answer.headers.items():
        response[name] = value
    if answer.location is not None:
        location = answer.location
        response["Location"] = request.build_absolute_uri(location) if request else location
    if answer.tagged is not None:
        with_etags(response, answer.tagged)
    return response


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
        answer = instance_start_answer(
            domain=domain,
            workflow=workflow,
            body=lambda: request.data,
            info=request_info(request),
            version=version,
            sync_requested=sync_requested(request),
        )
        return answer_response(answer, request)


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
        answer = instance_transition_answer(
            domain=domain,
            workflow=workflow,
            ref=instance,
            transition_key=transition,
            sync_requested=sync_requested(request),
            body=lambda: request.data,
            info=request_info(request),
        )
        return answer_response(answer, request)


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
        sync = sync_requested(request)
        answer = instance_retry_answer(
            domain=domain,
            workflow=workflow,
            ref=instance,
            body=request.data,
            info=request_info(request),
            sync=sync,
        )
        return answer_response(answer, request)


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
        answer = instance_long_poll_ack_answer(
            domain=domain, workflow=workflow, ref=instance, info=request_info(request)
        )
        return answer_response(answer, request)

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
        answer = instance_relay_answer(
            domain=domain,
            ref=instance,
            transition_key=str(key),
            reservation=str(reservation),
            attributes=data.get("attributes"),
            info=request_info(request),
        )
        # A service reads the answer: the Location of a 202 stays a path.
        return answer_response(answer, None)


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
            headers=request_headers(request),
            info=request_info(request),
        )
        return Response(outcome.as_dict())
