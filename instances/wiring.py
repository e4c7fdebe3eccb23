"""The engine's wiring: the pure engine on the ORM store, the registry, the instance reader and
the resource-lock store, built once per process."""

from __future__ import annotations

from functools import cache

from django.utils.module_loading import import_string

from instances.engine.execution import EngineConfig
from instances.engine.pipeline import Engine
from instances.orm_store import COMPONENTS, OrmInstanceReader, OrmStore
from locks.store import OrmLocks
from vnext.conf import vnext_setting


@cache
def engine() -> Engine:
    """The process-wide engine on the ORM (published components cached in-process: they are
    immutable)."""
    config = EngineConfig(
        script_timeout_seconds=float(vnext_setting("SCRIPT_TIMEOUT_SECONDS")),
        script_configuration=dict(vnext_setting("SCRIPT_CONFIGURATION") or {}),
        fan_out_max_concurrent_items=int(vnext_setting("FAN_OUT_MAX_CONCURRENT_ITEMS")),
    )
    # The writer of the trigger task types calls the instance services, a layer above this
    # one: it is named by a setting and imported here at first use.
    writer_path = vnext_setting("INSTANCE_WRITER")
    return Engine(
        OrmStore(),
        COMPONENTS,
        reader=OrmInstanceReader(),
        writer=import_string(writer_path)() if writer_path else None,
        locks=OrmLocks(),
        config=config,
    )
