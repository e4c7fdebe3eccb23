"""Task type 6: an HTTP call with httpx. An answer outside 2xx (and `acceptedStatusCodes`)
fails with `Task:Http:<status>`; a timeout with `Task:Http:Timeout`, a connection failure (or a
URL httpx cannot use) with `Task:Http:Transport`. Every such failure carries a response
(`is_success` false, `status_code`, `error_message`) for the output handler, as the vNext HTTP
task does. A call the egress policy refuses (`instances.engine.egress`) never left: it fails
with `Task:EgressRefused` and no response, so it faults unless an error boundary handles it."""

from __future__ import annotations

from typing import Any

import httpx

from instances.engine.egress import EgressRefused, pooled_client
from instances.engine.errors import Codes
from instances.engine.task_types.base import StandardResponse, TaskCall, TaskFailure, accepted


def execute_http(call: TaskCall) -> StandardResponse:
    """Send the request the task (after its input handler) describes; parse JSON answers."""
    task = call.task
    body = call.input_data if call.input_data is not None else task.get("body")
    method = str(task.get("method") or "GET").upper()
    response = http_send(
        method,
        str(task.get("url") or ""),
        headers={str(k): str(v) for k, v in (task.get("headers") or {}).items()},
        json=body if method not in ("GET", "DELETE") and body is not None else None,
        timeout=float(task.get("timeout_seconds") or 30),
        verify=bool(task.get("validate_ssl", True)),
    )
    return http_checked(method, http_answer(response), task.get("accepted") or [])


def http_send(
    method: str,
    url: str,
    *,
    headers: dict[str, str],
    timeout: float,
    verify: bool = True,
    json: Any = None,
    content: bytes | None = None,
) -> httpx.Response:
    """One request under the egress policy (the HTTP task's, and the named-service, endpoint,
    webhook-binding and SOAP tasks'). A refusal, a timeout or a connection failure raises the
    HTTP task's `TaskFailure` (`Task:EgressRefused` with no response, `Task:Http:Timeout` and
    `Task:Http:Transport` with an unanswered one)."""
    try:
        with pooled_client(verify) as client:
            return client.request(
                method, url, headers=headers, json=json, content=content, timeout=timeout
            )
    except EgressRefused as exc:
        raise TaskFailure(Codes.TASK_EGRESS_REFUSED, f"HTTP {method}: {exc}") from exc
    except httpx.TimeoutException as exc:
        message = f"HTTP {method} timed out after {timeout:g} s"
        raise TaskFailure(Codes.TASK_HTTP_TIMEOUT, message, _unanswered(message)) from exc
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        message = f"HTTP {method} failed: {exc}"
        raise TaskFailure(Codes.TASK_HTTP_TRANSPORT, message, _unanswered(message)) from exc


def http_answer(
    response: httpx.Response, data: Any = None, *, parsed: bool = False
) -> StandardResponse:
    """The standard response of an answer: its status, headers (lower-case names) and data (the
    JSON it carries, else its text; `data` when `parsed`)."""
    return StandardResponse(
        status_code=response.status_code,
        data=data if parsed else _payload(response),
        headers={k.lower(): v for k, v in response.headers.items()},
        is_success=response.is_success,
    )


def http_checked(
    method: str, result: StandardResponse, accepted_codes: list[str]
) -> StandardResponse:
    """`result` when it is a success or `acceptedStatusCodes` accepts its status; else the
    failure `Task:Http:<status>` carrying it."""
    status = result.status_code or 0
    if not result.is_success and not accepted(status, accepted_codes):
        result.error_message = f"HTTP {method} answered {status}"
        raise TaskFailure(Codes.task_http(status), result.error_message, result)
    result.is_success = True
    return result


def _unanswered(message: str) -> StandardResponse:
    return StandardResponse(status_code=None, is_success=False, error_message=message)


def _payload(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return response.text
