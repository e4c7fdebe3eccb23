"""The state-store and cache-aside tasks' Redis store (`StateStore`). An entry is a hash at
`<prefix><key>` with `data` (the value as JSON) and `version` (its etag, a counter), as Dapr's
Redis state store keeps it; a write is one Lua script, so the etag check (or first-write-wins)
and the write are atomic, and the TTL (EXPIRE, or PERSIST without one) goes with it."""

from __future__ import annotations

import json
from typing import Any

import redis
from django.core.serializers.json import DjangoJSONEncoder

from instances.engine.ports import ETagMismatch, StoredState, TargetUnavailable
from instances.task_backends.config import timeout_of

# KEYS[1] the entry; ARGV: the value's JSON, the etag expected ("" none), "1" for first-write
# (no etag: only when nothing is there), the TTL in seconds ("0": none). -1: the check failed.
SAVE = """
local current = redis.call('HGET', KEYS[1], 'version')
if ARGV[2] ~= '' then
  if current ~= ARGV[2] then return -1 end
elseif ARGV[3] == '1' and current then
  return -1
end
local version = redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], 'data', ARGV[1])
if tonumber(ARGV[4]) > 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[4])
else
  redis.call('PERSIST', KEYS[1])
end
return version
"""


class RedisStateStore:
    """A `StateStore` on one Redis database, its keys under the entry's `prefix`."""

    def __init__(self, name: str, entry: dict[str, Any]) -> None:
        self.name = name
        self.prefix = str(entry.get("prefix") or "")
        self.timeout = timeout_of(entry)
        self.client = redis.Redis.from_url(
            str(entry["url"]), socket_timeout=self.timeout, socket_connect_timeout=self.timeout
        )
        self._save = self.client.register_script(SAVE)

    def get(self, key: str) -> StoredState | None:
        try:
            data, version = self.client.hmget(self.prefix + key, ["data", "version"])
        except redis.RedisError as exc:
            raise TargetUnavailable(self._described(exc)) from exc
        if data is None:
            return None
        return StoredState(json.loads(data), _text(version))

    def save(
        self, key: str, value: Any, *, etag: str | None, first_write: bool, ttl_seconds: int | None
    ) -> str:
        data = json.dumps(value, cls=DjangoJSONEncoder, separators=(",", ":"))
        args = [data, etag or "", "1" if first_write else "0", str(ttl_seconds or 0)]
        try:
            version = self._save(keys=[self.prefix + key], args=args)
        except redis.RedisError as exc:
            raise TargetUnavailable(self._described(exc)) from exc
        if int(version) < 0:
            if etag:
                raise ETagMismatch(f"{key}: the etag {etag!r} is not the entry's current one")
            raise ETagMismatch(f"{key}: first write wins, and the entry exists already")
        return str(version)

    def delete(self, keys: list[str]) -> int:
        try:
            return int(self.client.delete(*(self.prefix + key for key in keys)))
        except redis.RedisError as exc:
            raise TargetUnavailable(self._described(exc)) from exc

    def close(self) -> None:
        """Drop the pooled connections."""
        self.client.connection_pool.disconnect()

    def _described(self, exc: redis.RedisError) -> str:
        if isinstance(exc, redis.TimeoutError):
            return f"no answer within {self.timeout:g} s"
        return str(exc) or type(exc).__name__


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
