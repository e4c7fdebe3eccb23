"""What the instances views read from a DRF request — the caller and their roles, languages,
headers without credentials, query flags, the `RequestInfo` the services take — and the ETag
headers they answer with."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

from instances.engine.definition import WorkflowDefinition
from instances.engine.errors import Codes, Violation, VNextError
from instances.engine.functions import ReadKind
from instances.engine.records import InstanceSnapshot
from instances.engine.roles import Caller
from instances.engine.visibility import accepted_languages, readable
from instances.extensions import instance_extensions, requested_extensions
from instances.services import RequestInfo, instance_snapshot, workflow_definition
from vnext.conf import header_deny_list
from vnext.parsers import BracketFormParser, JsonParser
from workflows.access import caller_of

# Start, transition and retry bodies: JSON, or a form with bracket paths (API.md section 1).
PAYLOAD_PARSERS = [JsonParser, BracketFormParser]


def request_caller(request: Request) -> Caller:
    """The caller the definition's role rules judge."""
    # Built once per request: the groups query runs only when a role rule needs it.
    caller = getattr(request, "_vnext_caller", None)
    if caller is None:
        caller = caller_of(request.user, request.auth)
        request._vnext_caller = caller  # type: ignore[attr-defined]
    return caller


def request_roles_on(request: Request, instance: InstanceSnapshot) -> frozenset[str]:
    """The caller's roles on `instance` (its starter and last modifier count)."""
    return request_caller(request).on(instance.created_by, instance.modified_by)


def request_languages(request: Request) -> list[str]:
    """The languages of `Accept-Language`, preferred first."""
    return accepted_languages(request.headers.get("Accept-Language"))


def check_readable(
    request: Request, definition: WorkflowDefinition, instance: InstanceSnapshot
) -> frozenset[str]:
    """The caller's roles on `instance`, or 403 when the current state's query roles (else
    the workflow's; a parent's SubFlow override replaces the state's) refuse them."""
    roles = request_roles_on(request, instance)
    if not readable(definition, instance.current_state, roles, instance.overrides):
        raise VNextError(
            Codes.AUTHORIZATION_DENIED,
            f"your roles may not read instances in state {instance.current_state!r}",
            instance_id=str(instance.id),
        )
    return roles


def readable_snapshot(request: Request, domain: str, workflow: str, ref: str) -> InstanceSnapshot:
    """The instance `ref` names, or 403 when the caller may not read it."""
    snapshot = instance_snapshot(domain=domain, workflow=workflow, ref=ref)
    definition = workflow_definition(domain, snapshot.workflow_key, snapshot.workflow_version)
    check_readable(request, definition, snapshot)
    return snapshot


def request_headers(request: Request) -> dict[str, str]:
    """The request's headers without the credential-like ones."""
    # Credential-like headers are dropped where the request is read: no script, job row or
    # event sees them (HEADER_DENY_PATTERNS).
    return header_deny_list().strip(request.headers)


def request_query(request: Request) -> dict[str, Any]:
    """The query parameters, one value each (a repeated one: its last)."""
    return dict(request.query_params.items())


def request_info(request: Request) -> RequestInfo:
    """What the services take of the request besides its body."""
    return RequestInfo(
        actor=request.user.get_username() if request.user.is_authenticated else "",
        headers=request_headers(request),
        query=request_query(request),
        caller=lambda: request_caller(request),
    )


def sync_requested(request: Request) -> bool:
    """`?sync=true`."""
    return query_flag(request.query_params.get("sync"), "sync")


_TRUE, _FALSE = ("true",), ("false",)


def query_flag(value: str | None, name: str = "flag") -> bool:
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


def request_extensions(request: Request) -> tuple[str, ...]:
    """The extensions `?extensions=` asks for."""
    return requested_extensions(request.query_params.getlist("extensions"))


def shown_extensions(
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
        headers=request_headers(request),
        query=request_query(request),
    )


def with_etags(response: Response, instance: InstanceSnapshot) -> Response:
    """`response` with the instance's `ETag` and `X-Entity-ETag`."""
    response["ETag"] = f'"{instance.etag}"'
    response["X-Entity-ETag"] = f'"{instance.entity_etag}"'
    return response


def with_etag(response: Response, etag: str) -> Response:
    """`response` with the `ETag` of what it answers."""
    response["ETag"] = f'"{etag}"'
    return response


def not_modified(request: Request, etag: str) -> bool:
    """Whether `If-None-Match` names `etag` (weak or strong, among others)."""
    sent = request.headers.get("If-None-Match", "")
    return bool(sent) and etag in {
        tag.strip().strip('"').removeprefix("W/").strip('"') for tag in sent.split(",")
    }
