"""Master-schema fields encrypted at rest (`x-encryption` of type `encrypt`, the vocabulary's
`persisted`): where they are, their stored form, and keeping their clear values out of records.

Pure: the cipher is handed in (the ORM store builds it from the settings). The engine works on
clear data; the store seals these fields when it writes instance data (a JSON string
`enc:v1:<token>`) and opens them when it loads it, keeping each token so that a read can serve it
to a caller the field's exemption roles do not cover, and a write can keep it for a value that
did not change (a fresh token would look like a change of the data).

Only the schema's paths are opened, never a string because it looks like a token: a client that
sends a token it was shown gets that text stored (sealed again), not the value behind it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

TOKEN_PREFIX = "enc:v1:"
# What a caller outside the exemption roles is shown for a clear value under an encrypt rule
# (one written before the rule existed): never the value, and no token to show instead.
HIDDEN = "********"
# The `x-encryption` types: at rest (`encrypt`; `persisted` is the vnext-schema vocabulary's name
# for it), a digest on reads (`hash`), and explicitly nothing (`none`).
AT_REST_TYPES = frozenset({"encrypt", "persisted"})
HASH, NONE = "hash", "none"

Path = tuple[str, ...]


class Cipher(Protocol):
    """Seals a JSON value into token text and opens it again."""

    def seal(self, value: Any) -> str:
        """The token text (without `TOKEN_PREFIX`) of `value`."""
        ...

    def open(self, token: str) -> Any:
        """The value `token` (without `TOKEN_PREFIX`) holds."""
        ...


def is_token(value: Any) -> bool:
    """`value` has the stored form of a sealed field."""
    return isinstance(value, str) and value.startswith(TOKEN_PREFIX)


def at_rest_rule(node: Any) -> dict[str, Any] | None:
    """The property's `x-encryption` when it encrypts the value at rest, else None."""
    rule = node.get("x-encryption") if isinstance(node, dict) else None
    if isinstance(rule, dict) and str(rule.get("type", "")).lower() in AT_REST_TYPES:
        return rule
    return None


def encrypted_paths(schema: Any) -> frozenset[Path]:
    """The paths (property names from the root) of every field encrypted at rest, reached
    through nested `properties` (publish refuses the rule anywhere else)."""

    def walk(node: Any, path: Path) -> Iterator[Path]:
        properties = node.get("properties") if isinstance(node, dict) else None
        if not isinstance(properties, dict):
            return
        for name, child in properties.items():
            if at_rest_rule(child) is not None:
                yield (*path, str(name))
            else:
                yield from walk(child, (*path, str(name)))

    return frozenset(walk(schema, ()))


def value_at(data: Any, path: Path) -> tuple[bool, Any]:
    """`(True, value)` at `path` in `data`, or `(False, None)` when it is not there."""
    node = data
    for name in path:
        if not isinstance(node, dict) or name not in node:
            return False, None
        node = node[name]
    return True, node


def _replaced(data: Any, path: Path, value: Any) -> Any:
    # A copy of `data` with `value` at `path` (the objects on the way copied, nothing else).
    if not path:
        return value
    copied = dict(data)
    copied[path[0]] = _replaced(data[path[0]], path[1:], value)
    return copied


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class Opened:
    """One sealed field as loaded: its stored token and the clear value it opened to."""

    token: str
    clear: Any


def open_data(
    data: Any, paths: Iterable[Path], cipher: Cipher | None
) -> tuple[Any, dict[Path, Opened]]:
    """`data` with the tokens at `paths` opened, and what each one was. A clear value there
    (written before the rule existed) is left as it is. `cipher` None opens nothing: callers
    check first that some token needs it."""
    opened: dict[Path, Opened] = {}
    for path in paths:
        found, value = value_at(data, path)
        if not found or not is_token(value):
            continue
        if cipher is None:
            raise KeyError("no cipher to open a sealed field")
        clear = cipher.open(value[len(TOKEN_PREFIX) :])
        opened[path] = Opened(value, clear)
        data = _replaced(data, path, clear)
    return data, opened


def needs_opening(data: Any, paths: Iterable[Path]) -> bool:
    """Some field at `paths` holds a token."""
    return any(is_token(value_at(data, path)[1]) for path in paths)


def seal_patch(
    patch: Any, paths: Iterable[Path], cipher: Cipher, kept: Mapping[Path, Opened]
) -> Any:
    """`patch` (a data patch, merged key by key into the stored data) with every value it sets
    at `paths` sealed: the loaded token again when the value did not change (`kept`), else a
    new one. `null` stays `null` (no value: nothing to hide)."""
    for path in paths:
        found, value = value_at(patch, path)
        if not found or value is None:
            continue
        previous = kept.get(path)
        if previous is not None and _canonical(previous.clear) == _canonical(value):
            token = previous.token
        else:
            token = TOKEN_PREFIX + cipher.seal(value)
        patch = _replaced(patch, path, token)
    return patch


def stored_form(data: Any, paths: Iterable[Path], opened: Mapping[Path, Opened]) -> Any:
    """Clear `data` as another instance is shown it: the token at every sealed path, and
    `HIDDEN` for a clear value with none (a value set since the load has no token yet)."""
    for path in paths:
        found, value = value_at(data, path)
        if not found or value is None:
            continue
        previous = opened.get(path)
        if previous is not None and _canonical(previous.clear) == _canonical(value):
            data = _replaced(data, path, previous.token)
        elif not is_token(value) or previous is None:
            data = _replaced(data, path, HIDDEN)
    return data


def as_stored(data: Any, paths: Iterable[Path]) -> Any:
    """Stored `data` (never opened) as another instance is shown it: its tokens as they are,
    and `HIDDEN` for a clear value at a sealed path (one written before the rule existed)."""
    for path in paths:
        found, value = value_at(data, path)
        if found and value is not None and not is_token(value):
            data = _replaced(data, path, HIDDEN)
    return data


# --- redaction of write-only records ------------------------------------------------------------

# A secret shorter than this is not searched for inside longer text (an error message): a
# 1-3 character value would redact unrelated text everywhere.
MIN_REDACTED_LENGTH = 4
REDACTED = "[encrypted]"


def secrets_of(data: Any, paths: Iterable[Path]) -> set[str]:
    """The clear string values at `paths` (what a record of this instance must not hold)."""
    found: set[str] = set()
    for path in paths:
        present, value = value_at(data, path)
        if present and isinstance(value, str) and value and not is_token(value):
            found.add(value)
    return found


def redacted(value: Any, tokens: Mapping[str, str]) -> Any:
    """A copy of a JSON `value` with every string equal to a key of `tokens` replaced by its
    token: history bodies and task journal answers keep their shape, without the secrets."""
    if not tokens:
        return value
    if isinstance(value, str):
        return tokens.get(value, value)
    if isinstance(value, dict):
        return {key: redacted(item, tokens) for key, item in value.items()}
    if isinstance(value, list):
        return [redacted(item, tokens) for item in value]
    return copy.copy(value)


def redacted_text(text: str, secrets: Iterable[str]) -> str:
    """`text` (an error message) with each secret of `MIN_REDACTED_LENGTH` or more characters
    replaced by `REDACTED` wherever it occurs."""
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= MIN_REDACTED_LENGTH and secret in text:
            text = text.replace(secret, REDACTED)
    return text
