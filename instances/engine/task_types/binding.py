"""Task type 2 (`DaprBinding`): `operation` with `data` (or the input handler's data) and
`metadata` through the output binding `bindingName` names in settings (`VNEXT["BINDINGS"]`).

- `webhook`: an HTTP call to the binding's `url` through the egress policy, the operation its
  method (`create`/`post` POST, `get`, `put`, `patch`, `delete`); `metadata.path` is appended to
  the URL, the other metadata entries are sent as headers (the binding's own `headers`, its
  credentials, win). Its answer and failures are the HTTP task's (`Task:Http:<status>`, ...).
- `smtp` (and any kind an adapter is installed for): the adapter sends it
  (`instances.engine.targets.install_binding_sender`); a refusal fails with
  `Task:Binding:Refused` (its reply code the status an error boundary can match),
  no connection with `Task:Binding:Unavailable`, no answer in time with `Task:Binding:Timeout`;
  each carries a response for the output handler, as an HTTP failure does.
"""

from __future__ import annotations

from typing import Any

from instances.engine.errors import Codes
from instances.engine.ports import BindingError
from instances.engine.targets import (
    BINDING_OPERATIONS,
    BINDINGS_SETTING,
    WEBHOOK_OPERATIONS,
    BindingTarget,
    binding_sender,
    named_targets,
)
from instances.engine.task_types.base import StandardResponse, TaskCall, TaskFailure
from instances.engine.task_types.http import http_answer, http_checked, http_send
from instances.engine.task_types.named import target_url

_FAILURES = {
    "refused": Codes.TASK_BINDING_REFUSED,
    "unavailable": Codes.TASK_BINDING_UNAVAILABLE,
    "timeout": Codes.TASK_BINDING_TIMEOUT,
}


def execute_binding(call: TaskCall) -> StandardResponse:
    """Perform the task's operation on its binding."""
    task = call.task
    name = str(task.get("binding_name") or "")
    targets = named_targets()
    binding = targets.bindings.get(name)
    if binding is None:
        problem = targets.problem(BINDINGS_SETTING, name)
        raise TaskFailure(
            Codes.TASK_TARGET_UNKNOWN,
            problem
            or f"no binding {name!r} is configured (VNEXT[{BINDINGS_SETTING!r}] names "
            f"{', '.join(sorted(targets.bindings)) or 'none'})",
        )
    operation = str(task.get("operation") or "")
    if operation not in BINDING_OPERATIONS.get(binding.kind, frozenset()):
        raise TaskFailure(
            Codes.TASK_TARGET_UNKNOWN,
            f"binding {name!r} ({binding.kind}) has no operation {operation!r}",
        )
    data = call.input_data if call.input_data is not None else task.get("data")
    metadata = {str(k): str(v) for k, v in (task.get("metadata") or {}).items()}
    if binding.kind == "webhook":
        return _webhook(binding, operation, data, metadata, task.get("accepted") or [])
    return _through_adapter(binding, operation, data, metadata)


def _webhook(
    binding: BindingTarget,
    operation: str,
    data: Any,
    metadata: dict[str, str],
    accepted_codes: list[str],
) -> StandardResponse:
    method = WEBHOOK_OPERATIONS[operation]
    path = metadata.pop("path", "")
    base = str(binding.options["url"])
    try:
        url = target_url(base, path)
    except ValueError as exc:
        raise TaskFailure(Codes.TASK_TARGET_UNKNOWN, f"{binding.name}: {exc}") from exc
    headers = {
        **metadata,
        **{str(k): str(v) for k, v in binding.options.get("headers", {}).items()},
    }
    response = http_send(
        method,
        url,
        headers=headers,
        json=data if method not in ("GET", "DELETE") and data is not None else None,
        timeout=binding.timeout,
        verify=binding.options.get("verify", True) is not False,
    )
    return http_checked(method, http_answer(response), accepted_codes)


def _through_adapter(
    binding: BindingTarget, operation: str, data: Any, metadata: dict[str, str]
) -> StandardResponse:
    sender = binding_sender(binding.kind)
    if sender is None:
        raise TaskFailure(
            Codes.TASK_UNSUPPORTED,
            f"binding {binding.name!r} is of kind {binding.kind!r}, which no adapter sends here",
        )
    try:
        answered = sender.send(dict(binding.options), operation, data, metadata)
    except BindingError as exc:
        if exc.reason == "egress":
            raise TaskFailure(Codes.TASK_EGRESS_REFUSED, f"{binding.name}: {exc.message}") from exc
        message = f"binding {binding.name!r} ({binding.kind}) {operation}: {exc.message}"
        response = StandardResponse(status_code=exc.status, is_success=False, error_message=message)
        code = _FAILURES.get(exc.reason, Codes.TASK_BINDING_UNAVAILABLE)
        raise TaskFailure(code, message, response, status=exc.status) from exc
    return StandardResponse(status_code=None, data=answered)
