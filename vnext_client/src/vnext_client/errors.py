"""The server's refusals as exceptions: every problem+json answer (RFC 7807 with vNext's
`errorCode` and `error` block) becomes a `VNextError` subclass chosen by HTTP status and code."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

BUSY_CODE = "Instance:100031"
# The filter errors of the instance list (`GET …/instances?filter=`).
FILTER_CODES = frozenset({"invalid_filter", "unsupported_operator", "invalid_column"})


@dataclass(frozen=True)
class Violation:
    """One problem with the request: a JSON pointer into it (`/attributes/amount`) and why."""

    pointer: str
    message: str


class VNextError(Exception):
    """An error answer of the vNext API.

    `status` is the HTTP status, `code` the vNext error code (`Instance:100031`,
    `invalid_filter`, `App:900002`…), `title` / `detail` the RFC 7807 texts, `errors` the
    violations with their pointers, `instance_id` the instance it concerns (when the server
    says), `extra` what vNext's `error` block adds (`supportedOperators`, `validColumns`),
    `retry_after` the seconds of a `Retry-After` header, `body` the whole decoded answer."""

    def __init__(
        self,
        *,
        status: int,
        code: str = "",
        title: str = "",
        detail: str = "",
        errors: tuple[Violation, ...] = (),
        instance_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
        body: Any = None,
        method: str = "",
        url: str = "",
    ) -> None:
        self.status = status
        self.code = code
        self.title = title
        self.detail = detail
        self.errors = errors
        self.instance_id = instance_id
        self.extra: Mapping[str, Any] = dict(extra or {})
        self.retry_after = retry_after
        self.body = body
        self.method = method
        self.url = url
        super().__init__(self._message())

    def _message(self) -> str:
        head = f"{self.status} {self.code or self.title or 'error'}"
        text = f"{head}: {self.detail}" if self.detail else head
        if self.errors:
            text += " (" + "; ".join(f"{e.pointer or '/'}: {e.message}" for e in self.errors) + ")"
        return f"{text} [{self.method} {self.url}]" if self.method else text

    @property
    def pointers(self) -> list[str]:
        """The JSON pointers of the violations, in the server's order."""
        return [violation.pointer for violation in self.errors]


class ValidationError(VNextError):
    """400: the request (body, query parameter, filter) is invalid; see `errors`."""


class InvalidFilter(ValidationError):
    """400 `invalid_filter`, `unsupported_operator` or `invalid_column` from the instance list
    (`extra` carries `supportedOperators` or `validColumns`)."""


class Unauthorized(VNextError):
    """401: no or bad credentials."""


class Forbidden(VNextError):
    """403: the caller's grants or roles do not allow it (`Authorization:110001`,
    `Transition:100010`)."""


class NotFound(VNextError):
    """404: no such workflow (`Instance:100015`), instance (`Instance:100017`), transition
    (`Transition:100004`), endpoint (`App:900004`)…"""


class Conflict(VNextError):
    """409: the request collides with the instance's current situation (`ResourceLockConflict`,
    `Instance:100002`, `Instance:NoAckPending`…)."""


class Busy(Conflict):
    """409 `Instance:100031`: another run owns the instance. The client retries these with
    back-off; this is raised once its attempts are spent."""


class TooManyRequests(VNextError):
    """429: throttled; `retry_after` says when to come back."""


class ServerError(VNextError):
    """5xx: the server failed (503 `App:900009` when its database is away)."""


class WaitTimeout(TimeoutError):
    """A client-side wait (a 202 followed, `watch` with a `timeout`) ran out before the
    instance got where it was awaited."""


_BY_STATUS: dict[int, type[VNextError]] = {
    400: ValidationError,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    429: TooManyRequests,
}


def error_class(status: int, code: str) -> type[VNextError]:
    """The exception class for an answer with `status` and vNext error `code`."""
    if status == 409 and code == BUSY_CODE:
        return Busy
    if status == 400 and code in FILTER_CODES:
        return InvalidFilter
    if status >= 500:
        return ServerError
    return _BY_STATUS.get(status, VNextError)


def retry_after_seconds(response: httpx.Response) -> float | None:
    """The `Retry-After` header in seconds (the delta form; the HTTP-date form is not sent by
    vNext and is ignored), None when absent or unreadable."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def error_from_response(response: httpx.Response) -> VNextError:
    """The typed exception for an error answer: its problem body read when it is JSON, else
    the status and the start of the text."""
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    request = response.request
    common: dict[str, Any] = {
        "status": response.status_code,
        "retry_after": retry_after_seconds(response),
        "method": request.method if request is not None else "",
        "url": str(request.url) if request is not None else "",
    }
    if not isinstance(body, dict):
        text = response.text[:500]
        cls = error_class(response.status_code, "")
        return cls(title=response.reason_phrase, detail=text, body=text, **common)
    given = body.get("error")
    block: dict[str, Any] = given if isinstance(given, dict) else {}
    code = str(body.get("errorCode") or block.get("code") or "")
    violations = tuple(
        Violation(str(item.get("pointer", "")), str(item.get("message", "")))
        for item in body.get("errors") or ()
        if isinstance(item, dict)
    )
    extra = {k: v for k, v in block.items() if k not in ("code", "message", "validationErrors")}
    cls = error_class(response.status_code, code)
    return cls(
        code=code,
        title=str(body.get("title") or ""),
        detail=str(body.get("detail") or block.get("message") or ""),
        errors=violations,
        instance_id=body.get("instanceId"),
        extra=extra,
        body=body,
        **common,
    )
