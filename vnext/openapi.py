"""What the OpenAPI document says of every operation beside its own bodies: the problem body
(RFC 7807 with `errorCode` and vNext's `error` block, API.md section 1) on each error status,
served as `application/problem+json`, and the headers clients send."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers

PROBLEM_MEDIA_TYPE = "application/problem+json"


class ViolationSerializer(serializers.Serializer):
    """One field-level error: the JSON pointer that failed and why."""

    pointer = serializers.CharField(help_text="JSON pointer into the request, e.g. /attributes/a")
    message = serializers.CharField()


class ValidationEntrySerializer(serializers.Serializer):
    """One entry of vNext's `validationErrors`: the members (the dotted path into the data that
    was validated, `root` for all of it) and what is wrong there."""

    members = serializers.ListField(child=serializers.CharField())
    message = serializers.CharField()


class ProblemErrorSerializer(serializers.Serializer):
    """vNext's own error block, beside the RFC 7807 fields."""

    code = serializers.CharField(help_text="the errorCode: App:900002, invalid_filter, ...")
    message = serializers.CharField(
        help_text='the detail; "schema validation failed: ..." when a body breaks its schema'
    )
    validationErrors = ValidationEntrySerializer(many=True, required=False)
    supportedOperators = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="unsupported_operator: the operators that would do",
    )
    validColumns = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="invalid_column: the instance columns",
    )


class ProblemSerializer(serializers.Serializer):
    """An error answer (RFC 7807, with the platform's `errorCode`) carrying vNext's `error`
    block too."""

    type = serializers.CharField()
    title = serializers.CharField()
    status = serializers.IntegerField()
    detail = serializers.CharField()
    errorCode = serializers.CharField(help_text="e.g. Instance:100031, Transition:100010")
    instanceId = serializers.CharField(required=False, allow_null=True)
    errors = ViolationSerializer(many=True, required=False)  # type: ignore[assignment]
    error = ProblemErrorSerializer()


_WHY = {
    400: "Bad input: the pointer of each violation in `errors`",
    401: "No or invalid credentials",
    403: "No grant for this, or the workflow's roles refuse the caller",
    404: "Unknown workflow, instance, transition or component",
    405: "Method not allowed on this path",
    406: "Only JSON is served",
    409: "Conflict: busy instance, lock held, or nothing to acknowledge",
    413: "Request body too large",
    415: "Unsupported request media type",
    422: "The run went deeper than the automatic-transition limit",
    429: "Too many requests (the rate limits of starts, long-polls and publish, the cap on "
    "parked long-polls; `Retry-After` says when to come back) or too many failed logins",
}
# Every operation may answer these, whatever it does.
COMMON_ERRORS = (400, 401, 403, 404, 405, 406, 429)


def problem(status: int, why: str | None = None) -> OpenApiResponse:
    """The problem body as the response of `status`."""
    return OpenApiResponse(ProblemSerializer, description=why or _WHY.get(status, "Error"))


def responses(success: dict[int, Any], *extra_errors: int, body: bool = False) -> dict[Any, Any]:
    """`success` (status -> serializer/response) plus the problem body on the common error
    statuses and `extra_errors`; with `body`, also 413 and 415 (the operation reads one)."""
    answers: dict[Any, Any] = dict(success)
    errors = set(COMMON_ERRORS) | set(extra_errors) | ({413, 415} if body else set())
    for status in sorted(errors):
        answers[(status, PROBLEM_MEDIA_TYPE)] = problem(status)
    return answers


SYNC = OpenApiParameter(
    "sync",
    OpenApiTypes.BOOL,
    description="true: run to the next rest point and answer 200 with the instance; "
    "false (default): accept the work as a job and answer 202. A definition's executionType "
    "(S or A, the transition's, else the workflow's) overrides it",
)
PAYLOAD_MODE = OpenApiParameter(
    "x-vnext-payload-mode",
    str,
    location=OpenApiParameter.HEADER,
    enum=["raw", "standard"],
    description="Read the body as the standard envelope or as free data (API.md 1)",
)
# A form body (start, transition, retry): flat fields whose bracket paths spell the JSON object
# (`attributes[customer][id]=7`, `tags[]=a`); values are strings.
FORM_BODY: dict[str, Any] = {
    "type": "object",
    "description": "application/x-www-form-urlencoded: each field name is a bracket path "
    "(`attributes[customer][id]`, `tags[]`, `items[0][name]`) into the JSON body it stands for; "
    "values are strings. A field that is both a value and an object, or array indices with "
    "gaps, is a 400 at the field's pointer.",
    "propertyNames": {"pattern": r"^[^\[\]]+(\[[^\[\]]*\])*$"},
    "additionalProperties": {
        "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
    },
}


def with_form(serializer: Any) -> dict[str, Any]:
    """A request body documented as JSON (`serializer`) or as a bracket-path form."""
    return {"application/json": serializer, "application/x-www-form-urlencoded": FORM_BODY}


IF_NONE_MATCH = OpenApiParameter(
    "If-None-Match",
    str,
    location=OpenApiParameter.HEADER,
    description="An eTag from an earlier answer: 304 while nothing changed",
)
ACCEPT_LANGUAGE = OpenApiParameter(
    "Accept-Language",
    str,
    location=OpenApiParameter.HEADER,
    description="Labels and the state alias in this language (e.g. tr-TR, en;q=0.8)",
)


def archived_instances_hook(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """drf-spectacular postprocessing: every operation on one instance (`{instance}` in its
    path) may answer 410 `Instance:Archived` for an instance archived after its retention."""
    gone = {
        "description": "The instance was archived after its retention: `error.archive` says "
        "where it went (an operator restores it with manage.py instances_restore)",
        "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }
    for path, operations in result.get("paths", {}).items():
        if "{instance}" not in path:
            continue
        for operation in operations.values():
            if isinstance(operation, dict) and "responses" in operation:
                operation["responses"].setdefault("410", gone)
    return result
