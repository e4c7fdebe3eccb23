"""Publish rules of the pub/sub (4), state-store (17) and cache-aside (18) tasks: the target a
task names (`pubSubName`, `storeName`, else `DEFAULT_STATE_STORE`) must be configured in
settings (`PUBSUB_TARGETS`, `STATE_STORES`; instances/task_backends/config.py), and every field
it gives must be one this runtime honours for its command: a field that would be ignored is
refused here, at its pointer, rather than at run time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from instances.engine.errors import Violation
from instances.status import TaskType
from instances.task_backends.config import (
    PUBSUB_SETTING,
    STATE_STORES_SETTING,
    default_state_store,
    entries,
    entry_problem,
)
from workflows.documents import ComponentKind, ComponentRef, json_pointer
from workflows.validation.scripts import Resolver

# The relay's fields of a Redis stream entry: metadata may not take their names.
STREAM_FIELDS = ("data", "id", "type")
# What each state-store field applies to (vNext's table); elsewhere it is refused.
STATE_STORE_FIELDS = {
    "value": ("set",),
    "ttlInSeconds": ("set",),
    "etag": ("set",),
    "concurrency": ("set",),
    "keys": ("delete",),
}


def named_store_violations(document: Any, kind: str, resolver: Resolver) -> list[Violation]:
    """The violations of a pub/sub, state-store or cache-aside task component."""
    if kind != ComponentKind.TASK or not isinstance(document, dict):
        return []
    attributes = document.get("attributes")
    config = attributes.get("config") if isinstance(attributes, dict) else None
    if not isinstance(attributes, dict) or not isinstance(config, dict):
        return []
    task_type = str(attributes.get("type"))
    if task_type == TaskType.DAPR_PUBSUB:
        problems = _pubsub(config)
    elif task_type == TaskType.STATE_STORE:
        problems = _state_store(config)
    elif task_type == TaskType.CACHE_ASIDE:
        problems = _cache_aside(config, resolver)
    else:
        return []
    return [
        Violation(json_pointer("attributes", "config", *path), message)
        for path, message in problems
    ]


Problems = Iterator[tuple[tuple[Any, ...], str]]


def _pubsub(config: dict[str, Any]) -> Problems:
    name = config.get("pubSubName")
    if isinstance(name, str) and name:
        problem = entry_problem(PUBSUB_SETTING, name)
        if problem is not None:
            yield ("pubSubName",), f"pub/sub target {name!r} is not configured: {problem}"
    metadata = config.get("metadata")
    if not isinstance(metadata, dict):
        return
    target = entries(PUBSUB_SETTING).get(name) if isinstance(name, str) else None
    streams = isinstance(target, dict) and target.get("kind") == "redis-streams"
    for key, value in metadata.items():
        if isinstance(value, dict | list):
            yield ("metadata", key), "metadata values are strings (a header each), not objects"
        elif streams and key in STREAM_FIELDS:
            yield (
                ("metadata", key),
                f"{key!r} is a field of every stream entry (data, id, type): name it otherwise",
            )


def _store(config: dict[str, Any]) -> Problems:
    name = config.get("storeName") or default_state_store()
    problem = entry_problem(STATE_STORES_SETTING, str(name)) if name else "no store named"
    if problem is None:
        return
    if config.get("storeName"):
        yield ("storeName",), f"state store {name!r} is not configured: {problem}"
    else:
        yield (
            (),
            f"no storeName, and the default state store (DEFAULT_STATE_STORE {name!r}) is not "
            f"configured: {problem}",
        )


def _state_store(config: dict[str, Any]) -> Problems:
    yield from _store(config)
    command = config.get("command")
    for name, commands in STATE_STORE_FIELDS.items():
        if config.get(name) is not None and command not in commands:
            yield (name,), f"applies to {' and '.join(commands)}, not to {command!r}"
    if config.get("query") is not None:
        yield (
            ("query",),
            "a query-based delete needs a store with a state query API, and the redis kind "
            "has none: delete by key or keys",
        )
    if config.get("metadata"):
        yield (
            ("metadata",),
            "state-store metadata is not passed to the store by this runtime: use "
            "ttlInSeconds, etag and concurrency",
        )
    if command == "delete" and config.get("key") is not None and config.get("keys") is not None:
        yield ("keys",), "give key or keys, not both"
    if config.get("etag") is not None and config.get("concurrency") == "LastWrite":
        yield ("etag",), "an etag is checked only under FirstWrite concurrency (or none)"


def _cache_aside(config: dict[str, Any], resolver: Resolver) -> Problems:
    yield from _store(config)
    if config.get("key") is not None and not isinstance(config.get("key"), str):
        yield (
            ("key",),
            "a computed key (a script) is not run here: give a string, or set task.key in the "
            "task-level input handler",
        )
    if config.get("keyExpression") is not None:
        yield (
            ("keyExpression",),
            "keyExpression was removed from the cache-aside task (vNext v0.0.99): set task.key "
            "in the task-level input handler",
        )
    source = config.get("sourceTask")
    if isinstance(source, dict):
        ref = ComponentRef.from_reference({"flow": "sys-tasks", **source})
        found = resolver.resolve(ref) if ref is not None else None
        attributes = found.get("attributes") if isinstance(found, dict) else None
        if isinstance(attributes, dict) and str(attributes.get("type")) in (
            TaskType.CACHE_ASIDE,
            TaskType.NOTIFICATION,
        ):
            yield (
                ("sourceTask",),
                f"the source task {source.get('key')!r} cannot be a cache-aside or "
                "notification task",
            )
