"""What a caller may see of an instance: query roles, the state alias, display labels in the
caller's language, and the master schema's field rules (`x-roles`, `x-masking`, and
`x-encryption`: a `hash` digest, or the stored token of a field encrypted at rest).

Reads only: instance data is never changed here, so a script (or a system read such as a
Get-instance-data task) always sees the values as stored (fields encrypted at rest in clear,
opened by the store: engine/protection.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from instances.engine.definition import StateDef, WorkflowDefinition
from instances.engine.overrides import NO_OVERRIDES, SubflowOverrides
from instances.engine.protection import AT_REST_TYPES, HASH, HIDDEN, NONE, Opened, Path
from instances.engine.roles import ALLOW, allowed, decide, grants_of


def readable(
    definition: WorkflowDefinition,
    state: str,
    roles: frozenset[str] | None,
    overrides: SubflowOverrides = NO_OVERRIDES,
) -> bool:
    """The caller may read an instance in `state`: the state's `queryRoles` (else the
    workflow's; a parent's SubFlow override replaces the state's) allow `roles`. `roles` None:
    a platform read no role binds."""
    return roles is None or allowed(definition.query_roles(state, overrides), roles)


# --- languages and labels -------------------------------------------------------------------


def accepted_languages(header: str | None) -> list[str]:
    """The languages of an `Accept-Language` header, most wanted first (`q` weights honoured,
    `*` and malformed entries dropped)."""
    weighted: list[tuple[float, int, str]] = []
    for index, part in enumerate((header or "").split(",")):
        name, _, params = part.strip().partition(";")
        name = name.strip()
        if not name or name == "*" or len(name) > 35:
            continue
        weight = 1.0
        if params.strip().startswith("q="):
            try:
                weight = float(params.strip()[2:])
            except ValueError:
                continue
        if weight > 0:
            weighted.append((-weight, index, name))
    return [name for _, _, name in sorted(weighted)]


def pick_label(labels: Any, languages: list[str]) -> str | None:
    """The label of `labels` (`[{label, language}]`) for the first language that has one: an
    exact tag first (`en-US`), then the same primary language (`en` for `en-US` and back).
    With no language asked (or none matching): None."""
    entries = [
        (str(e.get("language", "")), str(e.get("label", "")))
        for e in labels or []
        if isinstance(e, dict) and e.get("label") is not None
    ]
    for wanted in languages:
        wanted_lower = wanted.lower()
        for language, label in entries:
            if language.lower() == wanted_lower:
                return label
        primary = wanted_lower.split("-")[0]
        for language, label in entries:
            if language.lower().split("-")[0] == primary:
                return label
    return None


def label_of(labels: Any, languages: list[str], fallback: str) -> str:
    """`pick_label`, else the first label, else `fallback`."""
    picked = pick_label(labels, languages)
    if picked is not None:
        return picked
    for entry in labels or []:
        if isinstance(entry, dict) and entry.get("label") is not None:
            return str(entry["label"])
    return fallback


def state_value(
    state: StateDef | None, key: str, roles: frozenset[str], languages: list[str]
) -> str:
    """The `state` a caller is shown (seed 001 "State Alias"): the first alias whose roles allow
    the caller, as its label in the asked language or its name; without one, the state key."""
    if state is None:
        return key
    for alias in state.alias:
        if decide(alias.get("roles"), roles) is True:
            picked = pick_label(alias.get("labels"), languages)
            return picked if picked is not None else str(alias.get("name") or key)
    return key


# --- master schema field rules --------------------------------------------------------------

# `x-masking` operators (the vNext runtime's: publish refuses any other) and the hash algorithms
# of `x-encryption` `hash`.
MASK, REPLACE = "mask", "replace"
MASKING_OPERATORS = frozenset({MASK, REPLACE})
HASH_ALGORITHMS = {"sha256": hashlib.sha256, "sha512": hashlib.sha512}
DEFAULT_MASKING_CHAR = "*"


def masked(value: Any, rule: dict[str, Any]) -> Any:
    """`value` under an `x-masking` rule: `mask` writes `maskingChar` (default `*`) over every
    character but the first `keepFirst` and the last `keepLast` (all of them when those would
    cover the value); `replace` shows `params.value` instead. `null` stays `null` for `mask`."""
    operator = rule.get("operator", MASK)
    given = rule.get("params")
    params: dict[str, Any] = given if isinstance(given, dict) else {}
    if operator == REPLACE:
        return params.get("value", "***")
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    first = max(int(params.get("keepFirst") or 0), 0)
    last = max(int(params.get("keepLast") or 0), 0)
    chosen = params.get("maskingChar") or params.get("char") or params.get("maskChar")
    character = str(chosen or DEFAULT_MASKING_CHAR)[:1] or DEFAULT_MASKING_CHAR
    if first + last >= len(text):
        return character * len(text)
    return text[:first] + character * (len(text) - first - last) + (text[-last:] if last else "")


def digest(value: Any, salt: str, algorithm: str = "sha256") -> str:
    """The salted hex digest an `x-encryption` `hash` field is shown as."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    hashing = HASH_ALGORITHMS.get(algorithm.lower(), hashlib.sha256)
    return hashing((salt + text).encode()).hexdigest()


def exempt(grants: Any, roles: frozenset[str]) -> bool:
    """The caller is exempt from a transform (`x-masking` / `x-encryption` `roles`, an allow-only
    list): one of its allow entries names a role the caller holds, and no deny does. No roles,
    an unlisted or misspelled one: the transform applies (fail closed)."""
    pairs = grants_of(grants)
    allows = {role for role, grant in pairs if grant == ALLOW}
    return bool(allows & roles) and decide(grants, roles) is True


def _encrypted(value: Any, rule: dict[str, Any], salt: str, stored: Opened | None) -> Any:
    # A field under `x-encryption`, for a caller the rule's exemption roles do not cover.
    kind = str(rule.get("type", "")).lower()
    if kind == NONE or value is None:
        return value
    if kind == HASH:
        params = rule.get("params")
        algorithm = params.get("algorithm") if isinstance(params, dict) else None
        return digest(value, salt, str(algorithm or "sha256"))
    if kind in AT_REST_TYPES and stored is not None and stored.clear == value:
        return stored.token
    return HIDDEN  # a clear value with no token, or a type no read knows: never the value


def shown_data(
    schema: Any,
    data: Any,
    roles: frozenset[str] | None,
    *,
    salt: str = "",
    tokens: Mapping[Path, Opened] | None = None,
    path: Path = (),
) -> Any:
    """`data` as a caller holding `roles` sees it through the master `schema`: a property
    whose `x-roles` refuse the caller is left out (with everything below it); unless the rule's
    own `roles` exempt the caller, an `x-masking` property is masked (`masked`), an
    `x-encryption` `hash` one shown as its salted digest, and one encrypted at rest (`encrypt`,
    `persisted`) as its stored token (`tokens`, by path), or `HIDDEN` when it has none.
    `roles` None shows the data as the engine has it."""
    if roles is None or not isinstance(schema, dict):
        return data
    if isinstance(data, dict):
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            return data
        shown: dict[str, Any] = {}
        for name, value in data.items():
            rule = properties.get(name)
            if not isinstance(rule, dict):
                shown[name] = value
                continue
            if decide(field_grants(rule), roles) is False:
                continue
            here = (*path, name)
            masking = rule.get("x-masking")
            if isinstance(masking, dict) and not exempt(masking.get("roles"), roles):
                shown[name] = masked(value, masking)
                continue
            encryption = rule.get("x-encryption")
            if isinstance(encryption, dict) and not exempt(encryption.get("roles"), roles):
                stored = (tokens or {}).get(here)
                shown[name] = _encrypted(value, encryption, salt, stored)
                continue
            shown[name] = shown_data(rule, value, roles, salt=salt, tokens=tokens, path=here)
        return shown
    if isinstance(data, list) and isinstance(schema.get("items"), dict):
        # Nothing is encrypted at rest below an array (publish refuses it): no token paths.
        return [shown_data(schema["items"], item, roles, salt=salt) for item in data]
    return data


def field_grants(rule: dict[str, Any]) -> Any:
    """Who may read a master-schema property: its `x-roles`, or the `roles` grant list vNext
    reads since v0.0.39 (`flow/schema.md`); both, when both are given (a deny in either
    refuses)."""
    own, vnext = rule.get("x-roles"), rule.get("roles")
    if isinstance(own, list) and isinstance(vnext, list):
        return [*own, *vnext]
    return own if own is not None else vnext


def unreadable_paths(schema: Any, roles: frozenset[str], path: Path = ()) -> frozenset[Path]:
    """The data paths a caller holding `roles` cannot read as stored: left out by `x-roles`,
    or masked, hashed or encrypted for them (not exempt). A filter or sort there would let the
    caller probe values a read never shows them (refused with `invalid_column`)."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return frozenset()
    found: set[Path] = set()
    for name, rule in schema["properties"].items():
        if not isinstance(rule, dict):
            continue
        here = (*path, str(name))
        masking, encryption = rule.get("x-masking"), rule.get("x-encryption")
        if (
            decide(field_grants(rule), roles) is False
            or (isinstance(masking, dict) and not exempt(masking.get("roles"), roles))
            or (isinstance(encryption, dict) and not exempt(encryption.get("roles"), roles))
        ):
            found.add(here)
        else:
            found |= unreadable_paths(rule, roles, here)
    return frozenset(found)


def has_field_rules(schema: Any) -> bool:
    """The schema holds an `x-roles`, `x-masking` or `x-encryption` rule somewhere (else data
    passes as is)."""
    if isinstance(schema, dict):
        if "x-roles" in schema or "x-masking" in schema or "x-encryption" in schema:
            return True
        if isinstance(schema.get("roles"), list):  # the v0.0.39 `roles` grant list
            return True
        return any(has_field_rules(value) for value in schema.values())
    if isinstance(schema, list):
        return any(has_field_rules(value) for value in schema)
    return False
