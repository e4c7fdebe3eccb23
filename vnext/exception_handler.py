"""The one DRF exception handler: every error becomes an RFC 7807 body with a public `errorCode`
and vNext's `error` block, served as `application/problem+json`; and the view that answers every
unmatched `/api/v1` path."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import DataError, InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse
from rest_framework import exceptions, status
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from instances.engine.errors import Codes, ErrorCode, Violation, VNextError
from instances.engine.outcomes import PipelineFault
from vnext.problems import PROBLEM_JSON, problem_body

logger = logging.getLogger("vnext.api")


_DRF_CODES: list[tuple[type[exceptions.APIException], ErrorCode]] = [
    (exceptions.ParseError, Codes.APP_INVALID_REQUEST),
    (exceptions.ValidationError, Codes.APP_INVALID_REQUEST),
    (exceptions.NotAuthenticated, Codes.APP_AUTHENTICATION),
    (exceptions.AuthenticationFailed, Codes.APP_AUTHENTICATION),
    (exceptions.PermissionDenied, Codes.AUTHORIZATION_DENIED),
    (exceptions.NotFound, Codes.APP_NOT_FOUND),
    (exceptions.MethodNotAllowed, Codes.APP_METHOD_NOT_ALLOWED),
    (exceptions.UnsupportedMediaType, Codes.APP_UNSUPPORTED_MEDIA),
    (exceptions.Throttled, Codes.APP_THROTTLED),
]


def _flatten(detail: Any, path: tuple[str, ...] = ()) -> list[Violation]:
    if isinstance(detail, dict):
        return [v for key, value in detail.items() for v in _flatten(value, (*path, str(key)))]
    if isinstance(detail, list):
        if all(not isinstance(item, dict | list) for item in detail):
            return [Violation("".join(f"/{p}" for p in path), str(item)) for item in detail]
        return [v for i, item in enumerate(detail) for v in _flatten(item, (*path, str(i)))]
    return [Violation("".join(f"/{p}" for p in path), str(detail))]


def problem_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Turn `PipelineFault`, `VNextError`, DRF and Django exceptions into the error body; never
    a stack trace."""
    request = context.get("request")
    if isinstance(exc, PipelineFault):
        # The run faulted its instance: the fault's own code and status, and the instance.
        body = problem_body(
            ErrorCode(exc.code, exc.http_status, "Transition failed"),
            exc.message,
            instance_id=str(exc.instance_id),
        )
        return _problem(body, exc.http_status, request)
    if isinstance(exc, VNextError):
        body = problem_body(
            exc.error,
            exc.detail,
            violations=exc.violations,
            instance_id=exc.instance_id,
            extra=exc.extra,
        )
        return _problem(body, exc.http_status, request)
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        body = problem_body(
            Codes.APP_PAYLOAD_TOO_LARGE, f"the request body is larger than {limit} bytes"
        )
        return _problem(body, status.HTTP_413_REQUEST_ENTITY_TOO_LARGE, request)
    if isinstance(exc, DataError):
        # The database refused a value the request carried before anything was written (a NUL
        # character in a key, a reference or a filter): the request is at fault, not the server.
        body = problem_body(
            Codes.APP_INVALID_REQUEST,
            "the request carries a value the database cannot hold (a NUL character?)",
        )
        return _problem(body, status.HTTP_400_BAD_REQUEST, request)
    if isinstance(exc, OperationalError | InterfaceError):
        # The database went away (a restart, a failover) mid-request. A write may have committed
        # before the answer failed: the client retries an idempotent request, or reads first.
        logger.warning("database unavailable during %s: %s", getattr(request, "path", "?"), exc)
        body = problem_body(
            Codes.APP_DATABASE_UNAVAILABLE,
            "the database is unavailable; retry shortly (a write made before it went away may "
            "have been applied: read the instance before repeating a transition)",
        )
        response = _problem(body, status.HTTP_503_SERVICE_UNAVAILABLE, request)
        response["Retry-After"] = "1"
        return response
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "Not found.")
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    if isinstance(exc, exceptions.APIException):
        error = next((code for cls, code in _DRF_CODES if isinstance(exc, cls)), Codes.APP_INTERNAL)
        detail = exc.detail
        violations = _flatten(detail) if isinstance(detail, dict | list) else []
        text = "Request body is invalid." if violations else str(detail)
        body = problem_body(error, text, http_status=exc.status_code, violations=violations)
        response = _problem(body, exc.status_code, request)
        wait = getattr(exc, "wait", None)
        if isinstance(exc, exceptions.Throttled) and wait is not None:
            # Whole seconds, rounded up: a client that waits that long is let through.
            response["Retry-After"] = str(max(1, math.ceil(wait)))
        for header in ("WWW-Authenticate",):
            auth_header = getattr(exc, "auth_header", None)
            if auth_header:
                response[header] = auth_header
        return response
    logger.exception("unhandled error in %s", context.get("view"))
    body = problem_body(Codes.APP_INTERNAL, "Internal error; it has been logged.")
    return _problem(body, status.HTTP_500_INTERNAL_SERVER_ERROR, request)


def _problem(body: dict[str, Any], http_status: int, request: Any) -> Response:
    """The error response: `application/problem+json` when it is rendered as JSON (the browsable
    API keeps its HTML page for a browser that asked for one)."""
    response = Response(body, status=http_status)
    renderer = getattr(request, "accepted_renderer", None)
    if renderer is None or isinstance(renderer, JSONRenderer):
        response.content_type = PROBLEM_JSON
    return response


class _AlwaysJson(BaseContentNegotiation):
    """Whatever the Accept header says, the answer is the JSON error body."""

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        return JSONRenderer(), JSONRenderer.media_type

    def select_parser(self, request: Request, parsers: Iterable[BaseParser]) -> BaseParser | None:
        return None


class ApiNotFoundView(APIView):
    """Every path under `/api/v1` that no route matches, whatever the method: 404 `App:900004`
    as `application/problem+json`. Anyone may learn that a path does not exist."""

    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []
    renderer_classes = [JSONRenderer]
    content_negotiation_class = _AlwaysJson
    schema = None  # not an endpoint: left out of the OpenAPI schema

    @property
    def default_response_headers(self) -> dict[str, str]:
        """No `Allow` header: no method is allowed on a path that does not exist."""
        return {}

    def http_method_not_allowed(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Response:
        """Every method lands here (no handler is defined): the path does not exist."""
        raise VNextError(Codes.APP_NOT_FOUND, f"no API endpoint at {request.path}")

    def options(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Response:
        """OPTIONS too: there is nothing here to describe."""
        return self.http_method_not_allowed(request, *args, **kwargs)


def login_lockout_response(
    request: HttpRequest, original_response: Any = None, credentials: Any = None
) -> HttpResponse:
    """django-axes' answer to a locked-out login: the problem body (429 `App:900008`) on the
    API, a plain page elsewhere (the admin's login form)."""
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    detail = f"too many failed logins: try again in {minutes} minutes"
    if request.path.startswith(("/api/", "/internal/")):
        body = problem_body(Codes.APP_THROTTLED, detail)
        response = HttpResponse(
            json.dumps(body), status=429, content_type="application/problem+json"
        )
    else:
        response = HttpResponse(f"<h1>Login locked</h1><p>{detail.capitalize()}.</p>", status=429)
    response["Retry-After"] = str(int(settings.AXES_COOLOFF_TIME.total_seconds()))
    return response
