"""Where the pub/sub (4), state-store (17) and cache-aside (18) tasks find their named targets:
a `TaskTargets` the wiring installs at start-up (`instances.wiring`, over the settings' adapters
in `instances/task_backends/`), so the engine never imports a broker or store client."""

from __future__ import annotations

from typing import Any

from instances.engine.errors import ErrorCode
from instances.engine.ports import TaskTargets
from instances.engine.task_types.base import TaskCall, TaskFailure

_targets: TaskTargets | None = None


def install_task_targets(targets: TaskTargets | None) -> None:
    """The targets the tasks reach from now on (None: none; every such task then fails with
    its `UnknownTarget`/`UnknownStore` code)."""
    global _targets
    _targets = targets


def task_targets() -> TaskTargets | None:
    """The targets installed, or None."""
    return _targets


def setting(call: TaskCall, attribute: str, name: str) -> Any:
    """A config value as the input handler left it: `task.<attribute>` when it set one, else
    `config.<name>`."""
    value = call.task.get(attribute)
    if value is None:
        value = (call.task.get("config") or {}).get(name)
    return value


def ttl_seconds(value: Any, refused: ErrorCode) -> int | None:
    """A `ttlInSeconds` as whole seconds (None or 0: no expiry); `refused` when an input
    handler set something else (text, a negative number)."""
    if value in (None, "", 0):
        return None
    try:
        seconds = int(value)
    except (TypeError, ValueError):
        raise TaskFailure(refused, f"ttlInSeconds is a number of seconds, not {value!r}") from None
    if seconds < 0:
        raise TaskFailure(refused, f"ttlInSeconds is not negative (got {seconds})")
    return seconds or None
