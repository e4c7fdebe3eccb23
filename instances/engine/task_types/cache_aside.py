"""Task type 18 (CacheAsideTask): read-through caching in a state store (`STATE_STORES`).

The key is `config.key` (verbatim) or what the task-level input handler set as `task.key`; an
empty one fails with `Task:CacheAside:KeyMissing` ("CacheAside requires a non-empty 'key'.").
It is stored under the state-store task's `custom:` prefix, so a `StateStoreTask` `set` or
`delete` of the same key pre-warms or invalidates the entry.

- Hit: the cached value is the task's data; `sourceTask` does not run.
- Miss, or `forceRefresh`: `sourceTask` runs as a task, with `sourceMapping` as its mapping
  (input handler, the call, output handler; no journal row and no boundary of its own); the
  output handler's value (else the source's raw `data`) is written with `ttlInSeconds` (0 or
  none: no expiry) and returned. A source that fails is this task's failure: nothing is cached.
- A store that is down: with `bypassOnCacheError` (the default) the read or write is skipped
  and the source's value returned; without it the task fails with `Task:CacheAside:ReadFailed`
  or `Task:CacheAside:WriteFailed`.

`consistency` (Eventual or Strong) asks nothing more of one Redis: every read sees the last
write, which is Strong. `metadata`: `{StoreName, Key, CacheHit, Refreshed, ETag}`, as vNext's."""

from __future__ import annotations

from typing import Any

from instances.engine.errors import Codes
from instances.engine.ports import StoredState, TargetUnavailable
from instances.engine.task_types.base import StandardResponse, TaskCall, TaskFailure
from instances.engine.task_types.state_store import KEY_PREFIX, resolve_store
from instances.engine.task_types.stores import setting, ttl_seconds


def execute_cache_aside(call: TaskCall) -> StandardResponse:
    """Answer from the cache, or from the source task (and cache its value)."""
    config = call.task.get("config") or {}
    key = setting(call, "key", "key")
    if not isinstance(key, str) or not key.strip():
        raise TaskFailure(Codes.TASK_CACHE_ASIDE_KEY, "CacheAside requires a non-empty 'key'.")
    name, store = resolve_store(call)
    stored_key = KEY_PREFIX + key
    bypass = config.get("bypassOnCacheError") is not False
    metadata: dict[str, Any] = {
        "StoreName": name,
        "Key": stored_key,
        "CacheHit": False,
        "Refreshed": False,
        "ETag": None,
    }
    if not config.get("forceRefresh"):
        found: StoredState | None = None
        try:
            found = store.get(stored_key)
        except TargetUnavailable as exc:
            if not bypass:
                raise TaskFailure(
                    Codes.TASK_CACHE_ASIDE_READ, f"CacheAside read failed: {exc}"
                ) from exc
            metadata["CacheError"] = f"read: {exc}"
        if found is not None:
            metadata.update(CacheHit=True, ETag=found.etag)
            return StandardResponse(status_code=200, data=found.value, metadata=metadata)
    if call.run_source is None:
        raise TaskFailure(
            Codes.TASK_CACHE_ASIDE_SOURCE, "a cache-aside task's source cannot run here"
        )
    value = call.run_source(dict(config.get("sourceTask") or {}), config.get("sourceMapping"))
    ttl = ttl_seconds(config.get("ttlInSeconds"), Codes.TASK_CACHE_ASIDE_WRITE)
    try:
        etag = store.save(stored_key, value, etag=None, first_write=False, ttl_seconds=ttl)
    except TargetUnavailable as exc:
        if not bypass:
            raise TaskFailure(
                Codes.TASK_CACHE_ASIDE_WRITE, f"CacheAside write failed: {exc}"
            ) from exc
        earlier = metadata.get("CacheError")
        metadata["CacheError"] = f"{earlier}; write: {exc}" if earlier else f"write: {exc}"
    else:
        metadata.update(Refreshed=True, ETag=etag)
    return StandardResponse(status_code=200, data=value, metadata=metadata)
