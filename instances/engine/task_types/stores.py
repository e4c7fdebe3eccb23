"""Where the pub/sub (4), state-store (17) and cache-aside (18) tasks find their named targets:
a `TaskTargets` the wiring installs at start-up (`instances.wiring`, over the settings' adapters
in `instances/task_backends/`), so the engine never imports a broker or store client."""

from __future__ import annotations

from instances.engine.ports import TaskTargets

_targets: TaskTargets | None = None


def install_task_targets(targets: TaskTargets | None) -> None:
    """The targets the tasks reach from now on (None: none; every such task then fails with
    its `UnknownTarget`/`UnknownStore` code)."""
    global _targets
    _targets = targets


def task_targets() -> TaskTargets | None:
    """The targets installed, or None."""
    return _targets
