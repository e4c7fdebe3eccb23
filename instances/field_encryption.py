"""Encryption at rest of master-schema fields (`x-encryption` `encrypt` / `persisted`): the keys,
the fields a workflow seals, and the sealing and opening the ORM store does at its boundary.

Keys: `VNEXT["ENCRYPTION_KEYS"]` (env `VNEXT_ENCRYPTION_KEYS`), Fernet keys; the first seals,
every one opens (`MultiFernet`), so a key is rotated by putting the new one first and keeping the
old ones until nothing sealed with them is left. A failure to seal or open answers
`Encryption:KeyUnavailable` (503) and writes nothing: a value is never stored in clear instead.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from instances.engine.definition import WorkflowDefinition
from instances.engine.errors import Codes, VNextError
from instances.engine.ports import Components
from instances.engine.protection import (
    REDACTED,
    TOKEN_PREFIX,
    Opened,
    Path,
    encrypted_paths,
    needs_opening,
    open_data,
    redacted,
    redacted_text,
    seal_patch,
    secrets_of,
    stored_form,
    value_at,
)
from instances.engine.records import InstanceSnapshot, PendingWrites
from vnext.conf import vnext_setting

KEYS_SETTING = "VNEXT_ENCRYPTION_KEYS"
# The job payload entry holding a transition request's `attributes` and `body` sealed together.
SEALED_REQUEST = "sealedRequest"
_REQUEST_PARTS = ("attributes", "body")


class FieldCipher:
    """`Cipher` on `MultiFernet`: a JSON value in, Fernet token text out, and back."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._fernet = MultiFernet([Fernet(key) for key in keys])

    def seal(self, value: Any) -> str:
        """The Fernet token of `value` as JSON, sealed with the first (current) key."""
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        return self._fernet.encrypt(text.encode()).decode("ascii")

    def open(self, token: str) -> Any:
        """The value sealed in `token`, by whichever configured key sealed it."""
        return json.loads(self._fernet.decrypt(token.encode("ascii")))


def key_problem(keys: Any) -> str | None:
    """Why `keys` (the setting's value) cannot be used, or None when they can: every key must
    be a Fernet key (32 url-safe base64-encoded bytes)."""
    if not isinstance(keys, list | tuple):
        return f"{KEYS_SETTING} must be a list of keys"
    for index, key in enumerate(keys):
        try:
            Fernet(key)
        except (TypeError, ValueError):
            return (
                f"{KEYS_SETTING} key #{index + 1} is not a Fernet key (32 url-safe "
                "base64-encoded bytes; make one with `Fernet.generate_key()`)"
            )
    return None


def configured_keys() -> tuple[str, ...]:
    """The keys in force, current first; empty when none is configured."""
    return tuple(str(key) for key in vnext_setting("ENCRYPTION_KEYS") or ())


def keys_configured() -> bool:
    """Whether a field encrypted at rest can be sealed (publish refuses one otherwise)."""
    return bool(configured_keys())


@functools.lru_cache(maxsize=4)
def _cipher_for(keys: tuple[str, ...]) -> FieldCipher:
    return FieldCipher(keys)


def field_cipher() -> FieldCipher | None:
    """The cipher of the configured keys, or None when there is none."""
    keys = configured_keys()
    return _cipher_for(keys) if keys else None


def _unavailable(detail: str, instance_id: Any) -> VNextError:
    return VNextError(
        Codes.ENCRYPTION_KEY_UNAVAILABLE,
        detail,
        instance_id=str(instance_id) if instance_id is not None else None,
    )


@dataclass(frozen=True)
class FieldProtection:
    """The fields one workflow version encrypts at rest, and what the store does with them."""

    paths: frozenset[Path]

    def open(self, data: Any, *, instance_id: Any = None) -> tuple[Any, dict[Path, Opened]]:
        """`data` as the engine works on it (sealed fields opened) and the loaded tokens."""
        if not needs_opening(data, self.paths):
            return data, {}
        cipher = field_cipher()
        if cipher is None:
            raise _unavailable(
                f"this instance holds fields encrypted at rest and no key is configured "
                f"({KEYS_SETTING})",
                instance_id,
            )
        try:
            return open_data(data, self.paths, cipher)
        except (InvalidToken, ValueError, UnicodeError) as exc:
            raise _unavailable(
                "a field encrypted at rest cannot be opened: none of the configured keys "
                f"({KEYS_SETTING}) sealed it",
                instance_id,
            ) from exc

    def seal(self, patch: Any, kept: Mapping[Path, Opened], *, instance_id: Any = None) -> Any:
        """A data patch with the values it sets on sealed fields sealed (`seal_patch`)."""
        if all(value_at(patch, path)[1] is None for path in self.paths):
            return patch  # sets none of them (or only to null): nothing to seal
        cipher = field_cipher()
        if cipher is None:
            raise _unavailable(
                f"the data sets fields encrypted at rest and no key is configured ({KEYS_SETTING})"
                ": nothing was written",
                instance_id,
            )
        return seal_patch(patch, self.paths, cipher, kept)

    def stored(self, data: Any, opened: Mapping[Path, Opened]) -> Any:
        """Clear `data` in its stored form (tokens; see `stored_form`)."""
        return stored_form(data, self.paths, opened)

    def replacements(
        self, data: Any, opened: Mapping[Path, Opened], *more: Mapping[Path, Opened]
    ) -> dict[str, str]:
        """Each clear secret of this instance and what a record shows instead: its token when
        one is known, else `REDACTED`."""
        found: dict[str, str] = {}
        for known in (opened, *more):
            for entry in known.values():
                if isinstance(entry.clear, str) and entry.clear:
                    found[entry.clear] = entry.token
        for secret in secrets_of(data, self.paths):
            found.setdefault(secret, REDACTED)
        return found


def protection_of(definition: WorkflowDefinition, components: Components) -> FieldProtection | None:
    """The fields `definition`'s master schema (`attributes.schema`) encrypts at rest, or None
    when it encrypts none (memoised on the definition: published versions are immutable)."""
    if "field_protection" in definition.memo:
        found: FieldProtection | None = definition.memo["field_protection"]
        return found
    reference = definition.master_schema_reference
    protection = None
    if reference is not None:
        document = components.component("schema", reference) or {}
        paths = encrypted_paths((document.get("attributes") or {}).get("schema"))
        protection = FieldProtection(paths) if paths else None
    definition.memo["field_protection"] = protection
    return protection


def opened_snapshot(snapshot: InstanceSnapshot, protection: FieldProtection | None) -> None:
    """Open `snapshot`'s sealed fields in place, keeping the tokens in `snapshot.sealed`."""
    if protection is None:
        return
    snapshot.data, snapshot.sealed = protection.open(snapshot.data, instance_id=snapshot.id)


def sealed_writes(
    snapshot: InstanceSnapshot, writes: PendingWrites, protection: FieldProtection
) -> PendingWrites:
    """The writes as stored: the data patch sealed, and the history bodies, task journal
    answers, error messages and incident messages without this instance's clear secrets (its
    token where one is known, else `REDACTED`). `writes` is left as it is (the engine may
    flush it again when its guard fails)."""
    patch = writes.data_patch
    new: dict[Path, Opened] = {}
    if patch:
        patch = protection.seal(patch, snapshot.sealed, instance_id=snapshot.id)
        for path in protection.paths:
            found, token = value_at(patch, path)
            clear = value_at(writes.data_patch, path)[1]
            if found and isinstance(token, str) and token.startswith(TOKEN_PREFIX):
                new[path] = Opened(token, clear)
    tokens = protection.replacements(snapshot.data, snapshot.sealed, new)
    if writes.data_patch:
        for secret in secrets_of(writes.data_patch, protection.paths):
            tokens.setdefault(secret, REDACTED)
    if not tokens:
        return replace(writes, data_patch=patch)
    secrets = list(tokens)
    transitions = {
        key: replace(
            row,
            body=redacted(row.body, tokens),
            error_message=redacted_text(row.error_message, secrets),
        )
        for key, row in writes.transitions.items()
    }
    tasks = [
        replace(
            row,
            response=redacted(row.response, tokens),
            error_message=redacted_text(row.error_message, secrets),
        )
        for row in writes.tasks
    ]
    incidents = [
        replace(row, message=redacted_text(row.message, secrets)) for row in writes.incidents
    ]
    return replace(
        writes, data_patch=patch, transitions=transitions, tasks=tasks, incidents=incidents
    )


# --- job payloads ---------------------------------------------------------------------------------


def seal_request(payload: dict[str, Any], *, instance_id: Any = None) -> dict[str, Any]:
    """A transition job's payload with its request (`attributes`, `body`) sealed into one
    token (`sealedRequest`), for a workflow that encrypts fields at rest: the job row never
    holds them in clear. The job handler opens it (`open_request`)."""
    if not any(part in payload for part in _REQUEST_PARTS):
        return payload
    cipher = field_cipher()
    if cipher is None:
        raise _unavailable(
            f"the workflow encrypts fields at rest and no key is configured ({KEYS_SETTING}): "
            "the request was not accepted",
            instance_id,
        )
    request = {part: payload[part] for part in _REQUEST_PARTS if part in payload}
    sealed = {key: value for key, value in payload.items() if key not in _REQUEST_PARTS}
    sealed[SEALED_REQUEST] = TOKEN_PREFIX + cipher.seal(request)
    return sealed


def open_request(payload: dict[str, Any], *, instance_id: Any = None) -> dict[str, Any]:
    """A job payload with its sealed request opened again (as it was before `seal_request`)."""
    token = payload.get(SEALED_REQUEST)
    if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX):
        return payload
    cipher = field_cipher()
    if cipher is None:
        raise _unavailable(
            f"the job's request is encrypted and no key is configured ({KEYS_SETTING})",
            instance_id,
        )
    try:
        request = cipher.open(token[len(TOKEN_PREFIX) :])
    except (InvalidToken, ValueError, UnicodeError) as exc:
        raise _unavailable(
            f"the job's request cannot be opened: none of the configured keys ({KEYS_SETTING}) "
            "sealed it",
            instance_id,
        ) from exc
    opened = {key: value for key, value in payload.items() if key != SEALED_REQUEST}
    opened.update(request if isinstance(request, dict) else {})
    return opened
