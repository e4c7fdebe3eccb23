"""Task types 11 (Start flow), 12 (Direct trigger) and 14 (SubProcess): start an instance or
run a transition through the engine's `InstanceWriter` port, and answer like the public API.

A status outside 2xx fails the task with `Task:Trigger:<status>` (a duplicate start by key is
409) unless `acceptedStatusCodes` accepts it; the output handler sees the answer either way.
A SubProcess child is started fire-and-forget with a `P` correlation to the running instance:
the parent does not wait for it. A target domain the operator routes to another runtime
(`VNEXT_REMOTE_DOMAINS`) is called over HTTP with the task's `timeoutSeconds` and `validateSsl`.
"""

from __future__ import annotations

from typing import Any

from instances.engine.errors import Codes
from instances.engine.ports import CallOptions, InstanceAnswer, SubprocessParent
from instances.engine.task_types.base import (
    StandardResponse,
    TaskCall,
    TaskFailure,
    accepted,
    own_domain,
)


def execute_start_flow(call: TaskCall) -> StandardResponse:
    """Type 11: start an instance of `domain`/`flow` with `body` (or the input handler's data)."""
    return _start(call, parent=None)


def execute_subprocess(call: TaskCall) -> StandardResponse:
    """Type 14: start a SubProcess child of the running instance, fire-and-forget."""
    return _start(call, parent=call.parent)


def execute_direct_trigger(call: TaskCall) -> StandardResponse:
    """Type 12: run `transitionName` on the instance `instanceId` (or `key`) of `flow`."""
    task = call.task
    writer = _writer(call)
    ref = str(task.get("instance_id") or task.get("key") or "")
    if not ref:
        raise TaskFailure(Codes.TASK_TRIGGER_CONFIG, "a direct trigger needs instanceId or key")
    transition = str(task.get("transition_name") or "")
    if not transition:
        raise TaskFailure(Codes.TASK_TRIGGER_CONFIG, "a direct trigger needs transitionName")
    answer = writer.trigger(
        domain=own_domain(call),
        flow=str(task.get("flow") or ""),
        ref=ref,
        transition=transition,
        body=_body(call),
        sync=bool(task.get("sync")),
        headers=_headers(call),
        options=_options(call),
    )
    return _answered(call, answer, f"transition {transition} of {ref}")


def _start(call: TaskCall, *, parent: SubprocessParent | None) -> StandardResponse:
    task = call.task
    writer = _writer(call)
    flow = str(task.get("flow") or "")
    answer = writer.start(
        domain=own_domain(call),
        flow=flow,
        version=str(task.get("version")) if task.get("version") else None,
        key=str(task.get("key")) if task.get("key") else None,
        tags=[str(tag) for tag in task.get("tags") or []],
        body=_body(call),
        sync=bool(task.get("sync")),
        headers=_headers(call),
        parent=parent,
        options=_options(call),
    )
    return _answered(call, answer, f"start of {flow}")


def _writer(call: TaskCall) -> Any:
    if call.writer is None:
        raise TaskFailure(Codes.TASK_UNSUPPORTED, "no instance writer is configured")
    return call.writer


def _headers(call: TaskCall) -> dict[str, str]:
    # The task's `headers` (and what its input handler added): the target run's request
    # headers, which its scripts read as `context.headers` (credentials are dropped there).
    headers = call.task.get("headers") or {}
    return {str(name).lower(): str(value) for name, value in dict(headers).items()}


def _options(call: TaskCall) -> CallOptions:
    timeout = call.task.get("timeout_seconds")
    return CallOptions(
        timeout_seconds=float(timeout) if timeout else None,
        validate_ssl=call.task.get("validate_ssl") is not False,
    )


def _body(call: TaskCall) -> dict[str, Any]:
    # The input handler's data wins over the configured body (as for HTTP tasks).
    data = call.input_data if call.input_data is not None else call.task.get("body")
    return dict(data) if isinstance(data, dict) else {}


def _answered(call: TaskCall, answer: InstanceAnswer, what: str) -> StandardResponse:
    status = answer.status_code
    result = StandardResponse(status_code=status, data=answer.body, is_success=status < 300)
    if not result.is_success and not accepted(status, call.task.get("accepted") or []):
        code = answer.body.get("errorCode") if isinstance(answer.body, dict) else None
        result.error_message = f"{what} answered {status}" + (f" ({code})" if code else "")
        raise TaskFailure(Codes.task_trigger(status), result.error_message, result)
    result.is_success = True
    return result
