"""The engine's wiring: the pure engine on the ORM store, the registry, the instance reader and
the resource-lock store, built once per process."""

from __future__ import annotations

from functools import cache

from instances.engine.execution import EngineConfig
from instances.engine.pipeline import Engine
from instances.engine.ports import InstanceWriter
from instances.engine.task_types.stores import install_task_targets
from instances.instance_reader import OrmInstanceReader
from instances.orm_store import OrmStore
from instances.registry import COMPONENTS
from instances.task_backends.targets import SettingsTaskTargets
from locks.store import OrmLocks
from vnext.conf import vnext_setting

# The writer of the trigger task types calls the instance services, a layer above this one: it
# is not imported here but installed at start-up (`InstancesConfig.ready` installs
# `instances.writers.instance_writer()`), so every import between the two stays visible.
_writer: InstanceWriter | None = None
_task_targets = SettingsTaskTargets()


def writer_install(writer: InstanceWriter | None) -> None:
    """Give the engine the writer the trigger task types (11, 12, 14) start instances and run
    transitions with (None: those tasks fail with `Task:Unsupported`). An engine built before
    is rebuilt at its next use, with it."""
    global _writer
    _writer = writer
    engine.cache_clear()


@cache
def engine() -> Engine:
    """The process-wide engine on the ORM (published components cached in-process: they are
    immutable)."""
    # The pub/sub targets and state stores of settings (task types 4, 17, 18), read at each use.
    install_task_targets(_task_targets)
    config = EngineConfig(
        script_timeout_seconds=float(vnext_setting("SCRIPT_TIMEOUT_SECONDS")),
        script_configuration=dict(vnext_setting("SCRIPT_CONFIGURATION") or {}),
        fan_out_max_concurrent_items=int(vnext_setting("FAN_OUT_MAX_CONCURRENT_ITEMS")),
    )
    return Engine(
        OrmStore(),
        COMPONENTS,
        reader=OrmInstanceReader(),
        writer=_writer,
        locks=OrmLocks(),
        config=config,
    )
