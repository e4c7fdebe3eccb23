"""`TaskTargets` over the settings: each call reads `PUBSUB_TARGETS` / `STATE_STORES` afresh and
hands out the adapter built for that name and entry (kept while the entry stays the same, so
connections are reused; a changed entry gets a new one)."""

from __future__ import annotations

import json
import threading
from typing import Any

from instances.engine.ports import Publisher, StateStore
from instances.task_backends import config
from instances.task_backends.brokers import RabbitMqTarget, RedisStreamsTarget
from instances.task_backends.redis_state import RedisStateStore


class SettingsTaskTargets:
    """The named pub/sub targets and state stores of settings."""

    def __init__(self) -> None:
        self._built: dict[tuple[str, str], tuple[str, Any]] = {}
        self._lock = threading.Lock()

    def publisher(self, name: str) -> Publisher | None:
        adapter: Publisher | None = self._adapter(config.PUBSUB_SETTING, name)
        return adapter

    def state_store(self, name: str) -> StateStore | None:
        adapter: StateStore | None = self._adapter(config.STATE_STORES_SETTING, name)
        return adapter

    def default_state_store(self) -> str:
        return config.default_state_store()

    def _adapter(self, setting: str, name: str) -> Any:
        if config.entry_problem(setting, name) is not None:
            return None
        entry = dict(config.entries(setting)[name])
        fingerprint = json.dumps(entry, sort_keys=True, default=str)
        with self._lock:
            built = self._built.get((setting, name))
            if built is not None and built[0] == fingerprint:
                return built[1]
            if built is not None:
                built[1].close()
            adapter = _build(setting, name, entry)
            self._built[(setting, name)] = (fingerprint, adapter)
            return adapter


def _build(setting: str, name: str, entry: dict[str, Any]) -> Any:
    if setting == config.STATE_STORES_SETTING:
        return RedisStateStore(name, entry)
    if entry["kind"] == "rabbitmq":
        return RabbitMqTarget(name, entry)
    return RedisStreamsTarget(name, entry)
