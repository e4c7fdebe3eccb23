"""The engine's wiring: the pure engine on the ORM store, the registry, the instance reader and
the resource-lock store, built once per process."""

from __future__ import annotations

from functools import cache

from instances.engine.pipeline import Engine, EngineConfig
from instances.orm_store import OrmInstanceReader, OrmStore, RegistryComponents
from locks.store import OrmLocks
from vnext.conf import vnext_setting


@cache
def engine() -> Engine:
    """The process-wide engine on the ORM (published components cached in-process: they are
    immutable)."""
    config = EngineConfig(
        script_timeout_seconds=float(vnext_setting("SCRIPT_TIMEOUT_SECONDS")),
        script_configuration=dict(vnext_setting("SCRIPT_CONFIGURATION") or {}),
    )
    return Engine(
        OrmStore(),
        RegistryComponents(),
        reader=OrmInstanceReader(),
        locks=OrmLocks(),
        config=config,
    )
