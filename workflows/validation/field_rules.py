"""Publish-time rules of a schema's field transforms, `x-encryption` and `x-masking` (the
vNext runtime's: the vnext-schema vocabulary only names `x-encryption` `persisted`).

Everything the reads and the store rely on is checked here, once, so they can stay lenient:

- `x-encryption` `type`: `encrypt` (at rest; `persisted` is the vocabulary's name for it),
  `hash` (shown as a salted digest; `params.algorithm` `sha256` or `sha512`) or `none`.
  Encryption at rest needs a configured key (`VNEXT_ENCRYPTION_KEYS`), a `type: "string"`
  property reached through nested `properties` only (the store seals by path), no `params`
  (the algorithm and the keys are the server's), and no second transform.
- `x-masking` `operator`: `mask` (`maskingChar`, `keepFirst`, `keepLast`) or `replace`
  (`value`, required).
- A transform's `roles` is an exemption list: allow entries only. A deny entry would read as
  "everyone else is exempt", the opposite of what it looks like.
- A transformed field is neither filterable, sortable nor indexed (`x-filterOperators`,
  `x-sortable`, `x-indexed`): filters run on the stored value, so they would probe the value
  the transform hides, and a sealed value is cipher text.
- `x-indexed` (this runtime's search indexes, `manage.py indexes_plan`) is true or false, and
  true only on a field reached from the root through nested `properties`: its indexes are on
  that one path of the instance data.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from instances.engine.errors import Violation
from instances.engine.protection import AT_REST_TYPES, HASH, NONE
from instances.engine.visibility import HASH_ALGORITHMS, MASK, MASKING_OPERATORS, REPLACE
from instances.field_encryption import KEYS_SETTING, keys_configured
from workflows.documents import json_pointer

Path = tuple[Any, ...]

ENCRYPTION, MASKING, INDEXED = "x-encryption", "x-masking", "x-indexed"
ENCRYPTION_KEYS = frozenset({"type", "params", "roles", "purpose", "redactInLogs", "retentionDays"})
MASKING_KEYS = frozenset({"operator", "params", "roles"})
MASKING_PARAMS = {MASK: frozenset({"maskingChar", "keepFirst", "keepLast"}), REPLACE: {"value"}}
TYPES = "encrypt (at rest; the vocabulary's persisted), hash or none"
# Keywords whose values are data, not schemas: a rule-looking object inside them is no rule.
_DATA_KEYWORDS = frozenset({"default", "examples", "enum", "const"})


def field_rule_violations(document: dict[str, Any]) -> list[Violation]:
    """Every violation of the `x-encryption` / `x-masking` rules of a schema component."""
    attributes = document.get("attributes")
    schema = attributes.get("schema") if isinstance(attributes, dict) else None
    if not isinstance(schema, dict):
        return []
    return list(_walk(schema, ("attributes", "schema"), by_properties=True, readable=True))


def _walk(
    node: Any, path: Path, *, by_properties: bool, readable: bool, field: bool = False
) -> Iterator[Violation]:
    # `by_properties`: reached from the root through `properties` only (where the store seals);
    # `readable`: through `properties` and `items` (where the reads apply masks and digests);
    # `field`: a property or an array's items, not the root or a subschema of a keyword.
    if isinstance(node, list):
        for index, item in enumerate(node):
            yield from _walk(item, (*path, index), by_properties=False, readable=False)
        return
    if not isinstance(node, dict):
        return
    if ENCRYPTION in node:
        yield from _encryption(node, path, by_properties and field, readable and field)
    if MASKING in node:
        yield from _masking(node, path, readable and field)
    if INDEXED in node:
        yield from _indexed(node[INDEXED], (*path, INDEXED), by_properties and field)
    for key, value in node.items():
        if key.startswith("x-") or key in _DATA_KEYWORDS:
            continue
        if key == "properties" and isinstance(value, dict):
            for name, child in value.items():
                yield from _walk(
                    child,
                    (*path, key, name),
                    by_properties=by_properties,
                    readable=readable,
                    field=True,
                )
        elif key == "items" and isinstance(value, dict):
            yield from _walk(
                value, (*path, key), by_properties=False, readable=readable, field=True
            )
        elif isinstance(value, dict | list):
            yield from _walk(value, (*path, key), by_properties=False, readable=False)


def _violation(path: Path, message: str) -> Violation:
    return Violation(json_pointer(*path), message)


def _is_string_type(node: dict[str, Any]) -> bool:
    declared = node.get("type")
    if declared == "string":
        return True
    return (
        isinstance(declared, list)
        and "string" in declared
        and all(name in ("string", "null") for name in declared)
    )


def _probeable(node: dict[str, Any], path: Path, transform: str) -> Iterator[Violation]:
    operators = node.get("x-filterOperators")
    if isinstance(operators, list) and operators:
        yield _violation(
            (*path, "x-filterOperators"),
            f"a field under {transform} cannot be filterable: a filter runs on the stored "
            "value and would probe what the transform hides",
        )
    for flag in ("x-sortable", "x-indexed"):
        if node.get(flag) is True:
            yield _violation(
                (*path, flag),
                f"a field under {transform} cannot be {flag[2:]}: that runs on the stored value "
                "and would expose its order",
            )


def _indexed(flag: Any, here: Path, by_properties: bool) -> Iterator[Violation]:
    if not isinstance(flag, bool):
        yield _violation(here, "x-indexed is true or false")
    elif flag and not by_properties:
        yield _violation(
            here,
            "an indexed field is reached from the root through nested properties (not the root, "
            "nor under items, $defs, combinators or conditions): its indexes are on that one path",
        )


def _exemptions(rule: dict[str, Any], path: Path, keyword: str) -> Iterator[Violation]:
    if "roles" not in rule:
        return
    roles = rule["roles"]
    where = (*path, keyword, "roles")
    if not isinstance(roles, list) or not roles:
        yield _violation(where, f"{keyword}.roles must be a non-empty list of grants")
        return
    for index, entry in enumerate(roles):
        role = entry.get("role") if isinstance(entry, dict) else None
        grant = entry.get("grant") if isinstance(entry, dict) else None
        if not isinstance(role, str) or not role.strip() or not isinstance(grant, str):
            yield _violation((*where, index), "an exemption needs a non-empty role and a grant")
        elif grant.strip().lower() != "allow":
            yield _violation(
                (*where, index, "grant"),
                f"{keyword}.roles lists who is exempt (sees the value untransformed): only "
                f"grant 'allow' is accepted, not {grant!r}",
            )


def _encryption(
    node: dict[str, Any], path: Path, by_properties: bool, readable: bool
) -> Iterator[Violation]:
    rule = node[ENCRYPTION]
    here = (*path, ENCRYPTION)
    if not isinstance(rule, dict):
        yield _violation(here, f"x-encryption must be an object with a type: {TYPES}")
        return
    for key in rule:
        if key not in ENCRYPTION_KEYS:
            yield _violation(
                (*here, key),
                f"x-encryption does not take {key!r} (only {', '.join(sorted(ENCRYPTION_KEYS))})",
            )
    kind = rule.get("type")
    if not isinstance(kind, str):
        yield _violation(here if kind is None else (*here, "type"), f"type is required: {TYPES}")
    elif kind in AT_REST_TYPES:
        yield from _at_rest(node, rule, path, by_properties)
    elif kind == HASH:
        yield from _hash(node, rule, path, readable)
    elif kind == NONE:
        if "params" in rule:
            yield _violation((*here, "params"), "x-encryption of type none takes no params")
    elif kind == "transport":
        yield _violation(
            (*here, "type"),
            "transport encryption is the connection's (TLS), not something the runtime does to "
            "a field: use encrypt for encryption at rest, or remove the rule",
        )
    else:
        yield _violation((*here, "type"), f"unknown x-encryption type {kind!r}: {TYPES}")
    yield from _exemptions(rule, path, ENCRYPTION)
    purpose = rule.get("purpose")
    if "purpose" in rule and (not isinstance(purpose, str) or not purpose.strip()):
        yield _violation((*here, "purpose"), "purpose must be a non-empty string")
    if "redactInLogs" in rule and not isinstance(rule["redactInLogs"], bool):
        yield _violation((*here, "redactInLogs"), "redactInLogs must be true or false")
    days = rule.get("retentionDays")
    if "retentionDays" in rule and (
        not isinstance(days, int) or isinstance(days, bool) or days < 1
    ):
        yield _violation((*here, "retentionDays"), "retentionDays must be a positive integer")


def _at_rest(
    node: dict[str, Any], rule: dict[str, Any], path: Path, by_properties: bool
) -> Iterator[Violation]:
    here = (*path, ENCRYPTION)
    if not by_properties:
        yield _violation(
            (*here, "type"),
            "a field is encrypted at rest only when it is reached from the root through nested "
            "properties (not under items, $defs, combinators or conditions)",
        )
    elif not _is_string_type(node):
        yield _violation(
            (*here, "type"),
            'a field encrypted at rest must declare type "string" (optionally with "null"): '
            "it is stored, and shown to callers who are not exempt, as its token",
        )
    if "params" in rule:
        yield _violation(
            (*here, "params"),
            "encryption at rest takes no params: the cipher and the keys are the server's, "
            "never a schema's",
        )
    if MASKING in node:
        yield _violation(
            (*path, MASKING),
            "a field encrypted at rest takes no x-masking: one transform per field",
        )
    yield from _probeable(node, path, "encryption at rest")
    if not keys_configured():
        yield _violation(
            (*here, "type"),
            f"encryption key not configured: set {KEYS_SETTING} before publishing a schema "
            "that encrypts a field at rest",
        )


def _hash(
    node: dict[str, Any], rule: dict[str, Any], path: Path, readable: bool
) -> Iterator[Violation]:
    here = (*path, ENCRYPTION)
    if not readable:
        yield _violation(
            (*here, "type"),
            "a hash is applied only to a field reached through properties and items (not "
            "under $defs, combinators or conditions)",
        )
    params = rule.get("params")
    if "params" in rule and not isinstance(params, dict):
        yield _violation((*here, "params"), "params must be an object")
    elif isinstance(params, dict):
        for key, value in params.items():
            if key != "algorithm":
                yield _violation(
                    (*here, "params", key),
                    f"a hash takes only params.algorithm, not {key!r} (the salt is the "
                    "server's, never a schema's)",
                )
            elif not isinstance(value, str) or value not in HASH_ALGORITHMS:
                yield _violation(
                    (*here, "params", key),
                    f"algorithm must be one of {', '.join(sorted(HASH_ALGORITHMS))}",
                )
    if MASKING in node:
        yield _violation((*path, MASKING), "a hashed field takes no x-masking: one transform")
    yield from _probeable(node, path, "a hash")


def _masking(node: dict[str, Any], path: Path, readable: bool) -> Iterator[Violation]:
    rule = node[MASKING]
    here = (*path, MASKING)
    if not isinstance(rule, dict):
        yield _violation(here, "x-masking must be an object with an operator: mask or replace")
        return
    for key in rule:
        if key not in MASKING_KEYS:
            yield _violation(
                (*here, key),
                f"x-masking does not take {key!r} (only {', '.join(sorted(MASKING_KEYS))})",
            )
    if not readable:
        yield _violation(
            here,
            "a mask is applied only to a field reached through properties and items (not "
            "under $defs, combinators or conditions)",
        )
    operator = rule.get("operator", MASK)
    if operator not in MASKING_OPERATORS:
        yield _violation(
            (*here, "operator"),
            f"unknown x-masking operator {operator!r}: mask (maskingChar, keepFirst, keepLast) "
            "or replace (value)",
        )
    else:
        yield from _masking_params(rule, here, str(operator))
    yield from _exemptions(rule, path, MASKING)
    yield from _probeable(node, path, "x-masking")


def _masking_params(rule: dict[str, Any], here: Path, operator: str) -> Iterator[Violation]:
    params = rule.get("params")
    if params is None:
        if operator == REPLACE:
            yield _violation(here, "operator replace needs params.value")
        return
    if not isinstance(params, dict):
        yield _violation((*here, "params"), "params must be an object")
        return
    for key, value in params.items():
        where = (*here, "params", key)
        if key not in MASKING_PARAMS[operator]:
            yield _violation(where, f"{key!r} is not a parameter of operator {operator}")
        elif key == "maskingChar" and not (isinstance(value, str) and len(value) == 1):
            yield _violation(where, "maskingChar must be a single character")
        elif key in ("keepFirst", "keepLast") and (
            not isinstance(value, int) or isinstance(value, bool) or value < 0
        ):
            yield _violation(where, f"{key} must be a non-negative integer")
        elif key == "value" and not isinstance(value, str):
            yield _violation(where, "value must be a string")
    if operator == REPLACE and "value" not in params:
        yield _violation((*here, "params"), "operator replace needs params.value")
