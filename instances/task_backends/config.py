"""The named pub/sub targets and state stores of settings, and what is wrong with an entry:
read at every call, so publish-time checks and running tasks see the settings in force.

    VNEXT["PUBSUB_TARGETS"] = {
        "orders-bus": {"kind": "rabbitmq", "url": "amqp://...", "exchange": "orders"},
        "audit": {"kind": "redis-streams", "url": "redis://...", "maxlen": 10000},
    }
    VNEXT["STATE_STORES"] = {"statestore": {"kind": "redis", "url": "redis://...",
                                            "prefix": "vnext:state:"}}
    VNEXT["DEFAULT_STATE_STORE"] = "statestore"   # the store of a task without `storeName`

Every entry may set `timeout_seconds` (default 5): how long connecting and each confirm or
command may take before the task fails as unavailable."""

from __future__ import annotations

from typing import Any

from vnext.conf import vnext_setting

PUBSUB_SETTING = "PUBSUB_TARGETS"
STATE_STORES_SETTING = "STATE_STORES"
PUBSUB_KINDS = ("rabbitmq", "redis-streams")
STATE_STORE_KINDS = ("redis",)
DEFAULT_TIMEOUT_SECONDS = 5.0


def entries(setting: str) -> dict[str, Any]:
    """The setting's entries by name (`{}` when unset or not an object)."""
    value = vnext_setting(setting) if setting else None
    return dict(value) if isinstance(value, dict) else {}


def default_state_store() -> str:
    """The store a state-store or cache-aside task without `storeName` uses."""
    return str(vnext_setting("DEFAULT_STATE_STORE") or "")


def entry_problem(setting: str, name: str) -> str | None:
    """Why the entry `name` of `setting` cannot be used (missing, of an unknown kind, without
    a url), or None."""
    kinds = PUBSUB_KINDS if setting == PUBSUB_SETTING else STATE_STORE_KINDS
    entry = entries(setting).get(name)
    where = f"VNEXT[{setting!r}]"
    if entry is None:
        configured = ", ".join(sorted(entries(setting))) or "none"
        return f"{where} has no entry {name!r} (configured: {configured})"
    if not isinstance(entry, dict):
        return f"{where}[{name!r}] must be an object"
    if entry.get("kind") not in kinds:
        return f"{where}[{name!r}] is of kind {entry.get('kind')!r}; kinds: {', '.join(kinds)}"
    if not str(entry.get("url") or ""):
        return f"{where}[{name!r}] needs a `url`"
    return None


def timeout_of(entry: dict[str, Any]) -> float:
    """The entry's `timeout_seconds` (default 5)."""
    return float(entry.get("timeout_seconds") or DEFAULT_TIMEOUT_SECONDS)
