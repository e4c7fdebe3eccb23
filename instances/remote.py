"""Trigger tasks (11 start, 12 direct trigger) whose target domain another vNext runtime serves:
the operator maps such domains to that runtime's API (`VNEXT_REMOTE_DOMAINS`), and the task is
then a call to its public REST API over HTTP, with the task's `timeoutSeconds` and
`validateSsl`, under the egress policy (a runtime on a private address needs an allow-list
entry); every other domain is served in-process by `ServiceInstanceWriter`.

A SubProcess (14) child is correlated with its parent in this runtime's database, so it always
starts here: a remote target domain fails with `Task:Trigger:Config` (and publish refuses it)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from instances.engine.egress import EgressRefused, shared_client
from instances.engine.errors import Codes
from instances.engine.ports import CallOptions, InstanceAnswer, SubprocessParent
from instances.engine.task_types.base import StandardResponse, TaskFailure
from instances.job_handlers import ServiceInstanceWriter
from vnext.conf import remote_base_url, vnext_setting

DEFAULT_TIMEOUT_SECONDS = 30.0


class RoutingInstanceWriter:
    """`InstanceWriter`: a remote domain over HTTP, any other in-process."""

    def __init__(self) -> None:
        self.local = ServiceInstanceWriter()

    def start(
        self,
        *,
        domain: str,
        flow: str,
        version: str | None,
        key: str | None,
        tags: list[str],
        body: dict[str, Any],
        sync: bool,
        headers: dict[str, str],
        parent: SubprocessParent | None = None,
        options: CallOptions | None = None,
    ) -> InstanceAnswer:
        """Start an instance of `flow`, here or on the runtime serving `domain`."""
        base = remote_base_url(domain)
        if base is None:
            return self.local.start(
                domain=domain, flow=flow, version=version, key=key, tags=tags, body=body,
                sync=sync, headers=headers, parent=parent,
            )  # fmt: skip
        if parent is not None:
            raise TaskFailure(
                Codes.TASK_TRIGGER_CONFIG,
                f"a SubProcess child starts in this runtime; domain {domain!r} is served by {base}",
            )
        request: dict[str, Any] = {"attributes": body, "tags": tags}
        if key:
            request["key"] = key
        query = {"sync": "true" if sync else "false", **({"version": version} if version else {})}
        path = f"/{_segment(domain)}/workflows/{_segment(flow)}/instances/start"
        return _call("POST", base, path, domain, query, request, headers, options)

    def trigger(
        self,
        *,
        domain: str,
        flow: str,
        ref: str,
        transition: str,
        body: dict[str, Any],
        sync: bool,
        headers: dict[str, str],
        options: CallOptions | None = None,
    ) -> InstanceAnswer:
        """Run `transition` on instance `ref` of `flow`, here or on the runtime serving
        `domain`."""
        base = remote_base_url(domain)
        if base is None:
            return self.local.trigger(
                domain=domain, flow=flow, ref=ref, transition=transition, body=body, sync=sync,
                headers=headers,
            )  # fmt: skip
        path = (
            f"/{_segment(domain)}/workflows/{_segment(flow)}/instances/{_segment(ref)}"
            f"/transitions/{_segment(transition)}"
        )
        query = {"sync": "true" if sync else "false"}
        return _call("PATCH", base, path, domain, query, {"attributes": body}, headers, options)


def _segment(value: str) -> str:
    return quote(value, safe="")


def _call(
    method: str,
    base: str,
    path: str,
    domain: str,
    query: dict[str, str],
    body: dict[str, Any],
    headers: dict[str, str],
    options: CallOptions | None,
) -> InstanceAnswer:
    options = options or CallOptions()
    timeout = options.timeout_seconds or DEFAULT_TIMEOUT_SECONDS
    sent = dict(headers)
    token = (vnext_setting("REMOTE_TOKENS") or {}).get(domain)
    if token:
        # The operator's credential for that runtime wins over any the workflow's task set.
        sent = {k: v for k, v in sent.items() if k.lower() != "authorization"}
        sent["Authorization"] = f"Token {token}"
    try:
        response = shared_client(options.validate_ssl).request(
            method, base + path, params=query, json=body, headers=sent, timeout=timeout
        )
    except EgressRefused as exc:
        raise TaskFailure(Codes.TASK_EGRESS_REFUSED, f"{method} {base}{path}: {exc}") from exc
    except httpx.TimeoutException as exc:
        message = f"{method} {base}{path} timed out after {timeout:g} s"
        raise TaskFailure(Codes.TASK_HTTP_TIMEOUT, message, _unanswered(message)) from exc
    except httpx.HTTPError as exc:
        message = f"{method} {base}{path} failed: {exc}"
        raise TaskFailure(Codes.TASK_HTTP_TRANSPORT, message, _unanswered(message)) from exc
    try:
        answer = response.json()
    except ValueError:
        answer = {"detail": response.text[:500]}
    return InstanceAnswer(
        response.status_code, answer if isinstance(answer, dict) else {"body": answer}
    )


def _unanswered(message: str) -> StandardResponse:
    return StandardResponse(status_code=None, is_success=False, error_message=message)
