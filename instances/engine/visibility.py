"""What a caller may see of an instance: query roles, the state alias, display labels in the
caller's language, and the master schema's field rules (`x-roles`, `x-masking`, and
`x-encryption` of type `hash`).

Reads only: stored data is never changed here, so a script (or a system read such as a
Get-instance-data task) always sees the stored values.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from instances.engine.definition import StateDef, WorkflowDefinition
from instances.engine.roles import allowed, decide


def readable(definition: WorkflowDefinition, state: str, roles: frozenset[str] | None) -> bool:
    """The caller may read an instance in `state`: the state's `queryRoles` (else the
    workflow's) allow `roles`. `roles` None: a platform read no role binds."""
    return roles is None or allowed(definition.query_roles(state), roles)


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


def _masked(value: Any, rule: dict[str, Any]) -> Any:
    operator = rule.get("operator", "mask")
    given = rule.get("params")
    params: dict[str, Any] = given if isinstance(given, dict) else {}
    if operator == "replace":
        return params.get("value", "***")
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    first = max(int(params.get("keepFirst") or 0), 0)
    last = max(int(params.get("keepLast") or 0), 0)
    character = str(params.get("char") or params.get("maskChar") or "*")[:1] or "*"
    if first + last >= len(text):
        return character * len(text)
    return text[:first] + character * (len(text) - first - last) + (text[-last:] if last else "")


def _digest(value: Any, salt: str) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256((salt + text).encode()).hexdigest()


def shown_data(schema: Any, data: Any, roles: frozenset[str] | None, *, salt: str = "") -> Any:
    """`data` as a caller holding `roles` sees it through the master `schema`: a property
    whose `x-roles` refuse the caller is left out (with everything below it); an `x-masking`
    property is masked (`mask`: keep `keepFirst`/`keepLast` characters; `replace`: a fixed
    `value`) and an `x-encryption` `hash` property shown as its salted SHA-256 digest, unless
    the rule's own `roles` exempt the caller. `roles` None shows the stored data."""
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
            if decide(rule.get("x-roles"), roles) is False:
                continue
            masking = rule.get("x-masking")
            if isinstance(masking, dict) and decide(masking.get("roles"), roles) is not True:
                shown[name] = _masked(value, masking)
                continue
            hashing = rule.get("x-encryption")
            if isinstance(hashing, dict) and decide(hashing.get("roles"), roles) is not True:
                shown[name] = None if value is None else _digest(value, salt)
                continue
            shown[name] = shown_data(rule, value, roles, salt=salt)
        return shown
    if isinstance(data, list) and isinstance(schema.get("items"), dict):
        return [shown_data(schema["items"], item, roles, salt=salt) for item in data]
    return data


def has_field_rules(schema: Any) -> bool:
    """The schema holds an `x-roles` or `x-masking` rule somewhere (else data passes as is)."""
    if isinstance(schema, dict):
        if "x-roles" in schema or "x-masking" in schema or "x-encryption" in schema:
            return True
        return any(has_field_rules(value) for value in schema.values())
    if isinstance(schema, list):
        return any(has_field_rules(value) for value in schema)
    return False
