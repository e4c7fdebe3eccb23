"""Task types 3 (`DaprService`) and 1 (`DaprHttpEndpoint`): an HTTP call to a named target of
settings (`VNEXT["SERVICES"]` by `appId`, `VNEXT["HTTP_ENDPOINTS"]` by `endpointName`), the
Dapr service invocation and HTTP endpoint building blocks without a sidecar. The definition names
the target; its URL and the headers every call carries (credentials) come from settings.

DaprService: `methodName` (the path under the service's URL), `httpVerb` (POST when absent, as
Dapr's invocation), `queryString`, `headers`, `body` (or the input handler's data),
`timeoutSeconds` (else the service's `timeout`, else 30), `acceptedStatusCodes`.
DaprHttpEndpoint: `path`, `method`, `body` (or the input handler's data); the endpoint's
`timeout`. The call, its answer and its failures are the HTTP task's (`Task:Http:<status>`,
`Task:Http:Timeout`, `Task:Http:Transport`, `Task:EgressRefused`), through the egress policy.
A name settings do not have (a script set it, or settings changed after publish) fails with
`Task:Target:Unknown`; a path that would leave the target's host is refused the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

import httpx

from instances.engine.errors import Codes
from instances.engine.targets import ENDPOINTS_SETTING, SERVICES_SETTING, HttpTarget, named_targets
from instances.engine.task_types.base import StandardResponse, TaskCall, TaskFailure
from instances.engine.task_types.http import http_answer, http_checked, http_send


def execute_dapr_service(call: TaskCall) -> StandardResponse:
    """Call the service `appId` names at `methodName`."""
    task = call.task
    app_id = str(task.get("app_id") or "")
    target = _target(named_targets().services, SERVICES_SETTING, app_id, "service")
    method = str(task.get("http_verb") or "POST").upper()
    timeout = task.get("timeout_seconds") or target.timeout
    return _call(
        call,
        target,
        method,
        str(task.get("method_name") or ""),
        query=str(task.get("query_string") or ""),
        timeout=timeout,
    )


def execute_dapr_http_endpoint(call: TaskCall) -> StandardResponse:
    """Call the endpoint `endpointName` names at `path`."""
    task = call.task
    name = str(task.get("endpoint_name") or "")
    target = _target(named_targets().endpoints, ENDPOINTS_SETTING, name, "HTTP endpoint")
    method = str(task.get("method") or "GET").upper()
    return _call(call, target, method, str(task.get("path") or ""), timeout=target.timeout)


def _target(targets: Mapping[str, HttpTarget], setting: str, name: str, what: str) -> HttpTarget:
    target = targets.get(name)
    if target is None:
        raise TaskFailure(
            Codes.TASK_TARGET_UNKNOWN,
            f"no {what} {name!r} is configured (VNEXT[{setting!r}] names "
            f"{', '.join(sorted(targets)) or 'none'})",
        )
    return target


def target_url(base: str, path: str, query: str = "") -> str:
    """`path` under `base` (one slash between them), with `query` appended; raises
    `ValueError` when the result would reach another scheme, host or port than `base`."""
    # Dot segments are refused as written: httpx resolves them before the path can be read,
    # so `x/../../admin` would otherwise reach a route above the target's base path.
    raw_path = path.split("?", 1)[0].split("#", 1)[0]
    if any(segment in (".", "..") for segment in unquote(raw_path).split("/")):
        raise ValueError(f"the path {path!r} leaves {base}")
    url = base.rstrip("/") + "/" + path.lstrip("/") if path else base
    if query:
        url += ("&" if "?" in url else "?") + query.lstrip("?")
    parsed, origin = httpx.URL(url), httpx.URL(base)
    same = (parsed.scheme, parsed.host, parsed.port) == (origin.scheme, origin.host, origin.port)
    under = parsed.path == origin.path or parsed.path.startswith(origin.path.rstrip("/") + "/")
    if not same or not under:
        raise ValueError(f"the path {path!r} leaves {base}")
    return url


def _call(
    call: TaskCall,
    target: HttpTarget,
    method: str,
    path: str,
    *,
    query: str = "",
    timeout: Any = None,
) -> StandardResponse:
    task = call.task
    try:
        url = target_url(target.url, path, query)
    except (ValueError, httpx.InvalidURL) as exc:
        raise TaskFailure(Codes.TASK_TARGET_UNKNOWN, f"{target.name}: {exc}") from exc
    body = call.input_data if call.input_data is not None else task.get("body")
    # The target's own headers (its credentials) win over the definition's.
    headers = {str(k): str(v) for k, v in (task.get("headers") or {}).items()}
    headers.update(target.headers)
    response = http_send(
        method,
        url,
        headers=headers,
        json=body if method not in ("GET", "DELETE") and body is not None else None,
        timeout=float(timeout or 30),
        verify=target.verify,
    )
    return http_checked(method, http_answer(response), task.get("accepted") or [])
