"""The problem body (RFC 7807 with vNext's `error` block) every refusal answers with, built from
the public error-code table alone: the API's exception handler and the serving layer in front of
Django (which answers before Django is set up in a worker process) share it."""

from __future__ import annotations

from typing import Any

from instances.engine.errors import ErrorCode, Violation

PROBLEM_JSON = "application/problem+json"

# How a request body that breaks its schema is reported (`instances.engine.payload`, and the
# input schema of a custom function): vNext words it "schema validation failed".
_SCHEMA_FAILURE = "the request body does not match"


def problem_body(
    error: ErrorCode,
    detail: str,
    *,
    http_status: int | None = None,
    violations: list[Violation] | None = None,
    instance_id: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The error body of API.md section 1: RFC 7807 (`type`, `title`, `status`, `detail`,
    `errorCode`, `instanceId`, `errors[{pointer, message}]`) with vNext's own block
    `error: {code, message, validationErrors?: [{members, message}], ...extra}` (the filter
    errors' `supportedOperators` / `validColumns` go there)."""
    body: dict[str, Any] = {
        "type": f"https://vnext.dev/errors/{error.code}",
        "title": error.title,
        "status": http_status or error.http_status,
        "detail": detail,
        "errorCode": error.code,
    }
    if instance_id:
        body["instanceId"] = instance_id
    schema_failure = detail.startswith(_SCHEMA_FAILURE)
    block: dict[str, Any] = {
        "code": error.code,
        "message": f"schema validation failed: {detail}" if schema_failure else detail,
    }
    if violations:
        body["errors"] = [violation.as_dict() for violation in violations]
        block["validationErrors"] = [
            {
                "members": [members_of(violation.pointer, data=schema_failure)],
                "message": violation.message,
            }
            for violation in violations
        ]
    if extra:
        block.update(extra)
    body["error"] = block
    return body


def members_of(pointer: str, *, data: bool = False) -> str:
    """A JSON pointer as vNext's `members` entry: the dotted path (`customer.ownerUserId`),
    `root` for the whole document. `data`: the pointer is into a request body's instance data
    (`/attributes/...`), so the path is given from the data down, as the schema saw it."""
    segments = [part.replace("~1", "/").replace("~0", "~") for part in pointer.split("/")[1:]]
    if data and segments[:1] == ["attributes"]:
        segments = segments[1:]
    return ".".join(segments) or "root"
