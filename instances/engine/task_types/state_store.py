"""Task type 17 (StateStoreTask): `get`, `set` or `delete` keyed state in the state store
`storeName` (a name in settings, `STATE_STORES`; without one, `DEFAULT_STATE_STORE`).

Every key the task gives is stored under the fixed `custom:` prefix (shared with the cache-aside
task, so the two reach the same entries); the response's `Metadata.Key` is the prefixed key.
An input handler may set `task.key`, `task.keys`, `task.etag`; its value, when it returns one,
is what `set` writes (else `config.value`).

- `get`: `data` the value (null on a miss, which is a success with `Found` false),
  `metadata` `{Found, ETag, Key, StoreName}`.
- `set`: writes with `ttlInSeconds` (an expiry) and optimistic concurrency: with `etag` only
  over that version, with `concurrency: FirstWrite` and no etag only when the key holds nothing;
  otherwise it fails with `Task:StateStore:ETagMismatch` (409). `metadata` `{ETag, Key, ...}`.
- `delete`: `key` or `keys[]`; `metadata.DeletedCount`.

A store that is down or does not answer in its `timeout_seconds` fails with
`Task:StateStore:Unavailable`. `consistency` needs nothing more of a single Redis (every read
sees the last acknowledged write: `Strong` holds, `Eventual` too). `query` and `metadata` are
refused at publish (workflows/validation/named_targets.py)."""

from __future__ import annotations

from typing import Any

from instances.engine.errors import Codes, ErrorCode
from instances.engine.ports import ETagMismatch, StateStore, TargetUnavailable
from instances.engine.task_types.base import StandardResponse, TaskCall, TaskFailure
from instances.engine.task_types.stores import setting, task_targets, ttl_seconds

KEY_PREFIX = "custom:"
COMMANDS = ("get", "set", "delete")


def resolve_store(
    call: TaskCall, unknown: ErrorCode = Codes.TASK_STATE_STORE_UNKNOWN
) -> tuple[str, StateStore]:
    """The task's store name (the default one when it names none) and the store."""
    targets = task_targets()
    name = str(setting(call, "store_name", "storeName") or "")
    if not name and targets is not None:
        name = targets.default_state_store()
    store = targets.state_store(name) if targets is not None and name else None
    if store is None:
        raise TaskFailure(unknown, f"state store {name!r} is not configured (VNEXT STATE_STORES)")
    return name, store


def execute_state_store(call: TaskCall) -> StandardResponse:
    """Run the task's command against its store."""
    command = str(setting(call, "command", "command") or "")
    if command not in COMMANDS:
        raise TaskFailure(
            Codes.TASK_STATE_STORE_CONFIG, f"command {command!r} is not one of get, set, delete"
        )
    name, store = resolve_store(call)
    described: dict[str, Any] = {"StoreName": name}
    try:
        if command == "delete":
            keys = _keys(call)
            described["Keys"] = keys
            described["DeletedCount"] = store.delete(keys)
            return StandardResponse(status_code=200, metadata=described)
        key = _key(call)
        described["Key"] = key
        if command == "get":
            found = store.get(key)
            described.update(Found=found is not None, ETag=found.etag if found else None)
            return StandardResponse(
                status_code=200, data=found.value if found else None, metadata=described
            )
        value = call.input_data if call.input_data is not None else setting(call, "value", "value")
        ttl = setting(call, "ttl_seconds", "ttlInSeconds")
        etag = setting(call, "etag", "etag")
        first_write = setting(call, "concurrency", "concurrency") == "FirstWrite"
        described["ETag"] = store.save(
            key,
            value,
            etag=str(etag) if etag not in (None, "") else None,
            first_write=first_write,
            ttl_seconds=ttl_seconds(ttl, Codes.TASK_STATE_STORE_CONFIG),
        )
        return StandardResponse(status_code=200, metadata=described)
    except ETagMismatch as exc:
        message = f"state store {name!r}: {exc}"
        failed = StandardResponse(
            status_code=409, is_success=False, error_message=message, metadata=described
        )
        raise TaskFailure(Codes.TASK_STATE_STORE_ETAG, message, failed) from exc
    except TargetUnavailable as exc:
        message = f"state store {name!r} {command} failed: {exc}"
        failed = StandardResponse(
            status_code=None, is_success=False, error_message=message, metadata=described
        )
        raise TaskFailure(Codes.TASK_STATE_STORE_UNAVAILABLE, message, failed) from exc


def _key(call: TaskCall) -> str:
    key = setting(call, "key", "key")
    if not isinstance(key, str) or not key.strip():
        raise TaskFailure(
            Codes.TASK_STATE_STORE_CONFIG,
            "a get or set needs a non-empty key (config.key, or task.key from the input handler)",
        )
    return KEY_PREFIX + key


def _keys(call: TaskCall) -> list[str]:
    keys = setting(call, "keys", "keys")
    if keys is None:
        return [_key(call)]
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys):
        raise TaskFailure(Codes.TASK_STATE_STORE_CONFIG, "keys must be a list of non-empty keys")
    return [KEY_PREFIX + k for k in keys]
