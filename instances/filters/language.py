"""Parsing the vNext query language into its syntax tree (`instances.filters.tree`): the
`filter` parameter in its three forms (the GraphQL-style JSON of
`doc/en/flow/instance-filtering.md`, the legacy `field=operator:value` and this runtime's own text
form `field op value and ...`), `groupBy` with its aggregations and the `sort` / `orderBy` keys.
Parsing checks everything a filter can get wrong (names, operators, operand types and lengths)
and converts the operands of instance columns; turning the tree into SQL is
`instances.filters.sql`.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from instances.filters.tree import (
    AGGREGATIONS,
    ATTRIBUTES,
    ATTRIBUTES_PREFIX,
    LIST_OPERATORS,
    MAX_FILTER_LENGTH,
    MAX_NESTING,
    MAX_OPERAND_LENGTH,
    MAX_PATH_SEGMENTS,
    OPERATORS,
    STATUS_BY_NAME,
    TEXT_MATCH_OPERATORS,
    TYPE_CODES,
    AllOf,
    AnyOf,
    Column,
    ColumnKind,
    Condition,
    DataPath,
    GroupSpec,
    Negation,
    Node,
    Query,
    SortKey,
    Target,
    column_named,
    data_path,
    invalid,
    invalid_column,
    operator_named,
    target_named,
    unsupported,
)
from instances.status import InstanceStatus

# --- the filter parameter ---------------------------------------------------------------------


def parse_query(
    filters: str | dict[str, Any] | Sequence[str] | None,
    *,
    group_by: str | None = None,
    aggregations: str | None = None,
) -> Query:
    """The `filter` parameter(s) with `groupBy` / `aggregations`, as one query.

    `filters`: one expression (a string in any form, or an already decoded JSON object) or
    several `filter` values, all of which must hold. A JSON filter may carry `groupBy` (and
    `aggregations`) itself, or be the envelope `{"filter": ..., "groupBy": ...}`.
    """
    raws: list[str | dict[str, Any]]
    if filters is None:
        raws = []
    elif isinstance(filters, str | dict):
        raws = [filters]
    else:
        raws = list(filters)
    length = sum(len(raw) for raw in raws if isinstance(raw, str))
    length += sum(len(text) for text in (group_by, aggregations) if text)
    if length > MAX_FILTER_LENGTH:
        raise invalid(
            f"The filter is {length} characters long; the limit is {MAX_FILTER_LENGTH} characters."
        )
    parts: list[Node] = []
    group: dict[str, Any] | None = None
    extra_aggregations: Any = None
    for raw in raws:
        node, envelope_group, envelope_aggregations = _one_filter(raw)
        if node is not None:
            parts.append(node)
        if envelope_group is not None:
            if group is not None:
                raise invalid("groupBy is given more than once.")
            group = envelope_group
        if envelope_aggregations is not None:
            extra_aggregations = envelope_aggregations
    if group_by is not None and group_by.strip():
        if group is not None:
            raise invalid("groupBy is given both in the filter and as a parameter.")
        group = _expect_object(_load_json(group_by, parameter="groupBy"), "groupBy")
    if aggregations is not None and aggregations.strip():
        extra_aggregations = _load_json(aggregations, parameter="aggregations")
    if extra_aggregations is not None and group is None:
        raise invalid("aggregations need a groupBy.")
    spec = _group_spec(group, extra_aggregations) if group is not None else None
    node = None if not parts else parts[0] if len(parts) == 1 else AllOf(tuple(parts))
    return Query(node, spec)


def _one_filter(
    raw: str | dict[str, Any],
) -> tuple[Node | None, dict[str, Any] | None, Any]:
    """One filter value: (condition, groupBy, aggregations)."""
    if isinstance(raw, dict):
        return _json_filter(raw)
    text = raw.lstrip()
    if not text.strip():
        return None, None, None
    if text.startswith(("{", "[")):
        tree = _load_json(text, parameter="filter")
        if not isinstance(tree, dict):
            raise invalid(f"A JSON filter is an object, not {_json_type(tree)}.")
        return _json_filter(tree)
    legacy = _legacy_filter(text)
    if legacy is not None:
        return legacy, None, None
    return _text_filter(text.strip()), None, None


def _json_filter(tree: dict[str, Any]) -> tuple[Node | None, dict[str, Any] | None, Any]:
    conditions = dict(tree)
    group = aggregations = None
    envelope_filter: Any = None
    for name in list(conditions):
        lowered = name.lower()
        if lowered == "groupby":
            group = _expect_object(conditions.pop(name), "groupBy")
        elif lowered == "aggregations":
            aggregations = conditions.pop(name)
        elif lowered == "filter":
            envelope_filter = conditions.pop(name)
    nodes = [_filter_object(conditions, depth=0)] if conditions else []
    if envelope_filter is not None:
        if isinstance(envelope_filter, str):
            inner, inner_group, _ = _one_filter(envelope_filter)
            if inner_group is not None:
                raise invalid("The filter inside the envelope cannot carry its own groupBy.")
        elif isinstance(envelope_filter, dict):
            inner = _filter_object(envelope_filter, depth=0) if envelope_filter else None
        else:
            raise invalid(f"'filter' is an object or a string, not {_json_type(envelope_filter)}.")
        if inner is not None:
            nodes.append(inner)
    node = None if not nodes else nodes[0] if len(nodes) == 1 else AllOf(tuple(nodes))
    return node, group, aggregations


def _filter_object(node: Any, *, depth: int) -> Node:
    """One JSON filter object: every member must hold (several fields at one level AND)."""
    if depth > MAX_NESTING:
        raise invalid(f"The filter is nested deeper than {MAX_NESTING} levels.")
    if not isinstance(node, dict) or not node:
        raise invalid(f"Expected a non-empty filter object, got {_show(node)}.")
    parts: list[Node] = []
    for name, body in node.items():
        lowered = name.lower()
        if lowered in ("and", "or"):
            if not isinstance(body, list) or not body:
                raise invalid(f"{name!r} expects a non-empty list of filter objects.")
            items = tuple(_filter_object(item, depth=depth + 1) for item in body)
            parts.append(AllOf(items) if lowered == "and" else AnyOf(items))
        elif lowered == "not":
            parts.append(Negation(_filter_object(body, depth=depth + 1)))
        elif lowered == ATTRIBUTES:
            if not isinstance(body, dict) or not body:
                raise invalid(
                    f"{name!r} expects an object of data fields, like "
                    f'{{"customerId": {{"eq": "C-1"}}}}, got {_show(body)}.'
                )
            for key, fields in body.items():
                path = data_path(key, shown=f"{ATTRIBUTES_PREFIX}{key}")
                parts.append(_field_object(path, fields, depth=depth + 1))
        elif lowered.startswith(ATTRIBUTES_PREFIX):
            path = data_path(name[len(ATTRIBUTES_PREFIX) :], shown=name)
            parts.append(_field_object(path, body, depth=depth + 1))
        else:
            column = column_named(name)
            if column is None:
                raise invalid_column(name)
            if not isinstance(body, dict) or not body:
                raise invalid(
                    f'{name!r} expects an object of operators like {{"eq": ...}}, '
                    f"got {_show(body)}."
                )
            for op_name, operand in body.items():
                op = operator_named(op_name)
                if op is None:
                    raise unsupported(op_name)
                parts.append(column_condition(column, op, operand))
    return parts[0] if len(parts) == 1 else AllOf(tuple(parts))


def _field_object(path: DataPath, body: Any, *, depth: int) -> Node:
    """The object under a data field: operators on it, and nested fields below it."""
    if depth > MAX_NESTING:
        raise invalid(f"The filter is nested deeper than {MAX_NESTING} levels.")
    if not isinstance(body, dict) or not body:
        raise invalid(
            f'{path.name!r} expects an object of operators like {{"eq": ...}}, got {_show(body)}.'
        )
    parts: list[Node] = []
    for name, value in body.items():
        op = operator_named(name)
        if op is not None:
            parts.append(data_condition(path, op, value))
        elif isinstance(value, dict):
            nested = data_path(name, shown=f"{path.name}.{name}")
            parts.append(_field_object(DataPath(path.path + nested.path), value, depth=depth + 1))
        else:
            # Not an operator, and no object below it: a misspelt or unknown operator.
            raise unsupported(name, on=path.name)
    if len(path.path) > MAX_PATH_SEGMENTS:
        raise invalid(f"{path.name!r} is deeper than {MAX_PATH_SEGMENTS} keys.")
    return parts[0] if len(parts) == 1 else AllOf(tuple(parts))


# --- legacy form: field=operator:value --------------------------------------------------------

_LEGACY = re.compile(r"(?P<field>[^\s=]+)=(?P<op>[A-Za-z]+):(?P<value>.*)", re.DOTALL)
_LEGACY_ATTRIBUTES = re.compile(
    r"attributes=(?P<field>[^\s=]+)=(?P<op>[A-Za-z]+):(?P<value>.*)", re.DOTALL | re.IGNORECASE
)


def _legacy_filter(text: str) -> Node | None:
    """`field=operator:value` (or `attributes=field=operator:value`), or None when the text is
    not of that form. A field that names an instance column is the column, any other is a data
    path; the value is taken verbatim, split at commas for `in`, `nin` and `between`."""
    match = _LEGACY_ATTRIBUTES.fullmatch(text) or _LEGACY.fullmatch(text)
    if match is None:
        return None
    name, op_name, value = match["field"], match["op"], match["value"]
    op = operator_named(op_name)
    if op is None:
        raise unsupported(op_name)
    operand: Any = value.split(",") if op in LIST_OPERATORS else value
    column = None if match.re is _LEGACY_ATTRIBUTES else column_named(name)
    if column is not None:
        return column_condition(column, op, operand)
    if name.lower().startswith(ATTRIBUTES_PREFIX):
        name = name[len(ATTRIBUTES_PREFIX) :]
    return data_condition(data_path(name), op, operand)


# --- text form: field op value and ... (this runtime's extension) ------------------------------

_LITERAL = (
    r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null"""
)
_TEXT_LITERAL = re.compile(_LITERAL, re.IGNORECASE)
_TEXT_CLAUSE = re.compile(
    rf"(?P<column>\S+)\s+(?P<op>[A-Za-z]+)\s+"
    rf"(?P<value>\(\s*(?:{_LITERAL})(?:\s*,\s*(?:{_LITERAL}))*\s*\)|{_LITERAL})",
    re.IGNORECASE,
)
_TEXT_AND = re.compile(r"\s+and\s+", re.IGNORECASE)


def _text_filter(text: str) -> Node:
    """`field op value` clauses joined by `and`; a value is `'x'` or `"x"` (a doubled quote
    embeds it), a number, `true`, `false`, `null`, or a list `(v, v)`."""
    parts: list[Node] = []
    position = 0
    while True:
        clause = _TEXT_CLAUSE.match(text, position)
        if clause is None:
            raise invalid(
                f"Invalid filter syntax at {text[position : position + 60]!r}: expected a JSON "
                "object, field=operator:value, or field op 'value'."
            )
        target = target_named(clause["column"])
        op = operator_named(clause["op"])
        if op is None:
            raise unsupported(clause["op"])
        operand = _text_value(clause["value"])
        if isinstance(target, Column):
            parts.append(column_condition(target, op, operand))
        else:
            parts.append(data_condition(target, op, operand))
        position = clause.end()
        if position == len(text):
            return parts[0] if len(parts) == 1 else AllOf(tuple(parts))
        separator = _TEXT_AND.match(text, position)
        if separator is None:
            raise invalid(f"Expected ' and ' before {text[position : position + 60]!r}.")
        position = separator.end()


def _text_value(token: str) -> Any:
    if token.startswith("("):
        return [_text_literal(item.group()) for item in _TEXT_LITERAL.finditer(token[1:-1])]
    return _text_literal(token)


def _text_literal(token: str) -> Any:
    quote = token[0]
    if quote in "'\"":
        return token[1:-1].replace(quote * 2, quote)
    keyword = token.lower()
    if keyword in ("true", "false", "null"):
        return {"true": True, "false": False, "null": None}[keyword]
    try:
        number = float(token) if any(mark in token for mark in ".eE") else int(token)
    except ValueError:  # more digits than Python converts
        raise invalid(f"Number {token[:20]}... is out of range.") from None
    if not math.isfinite(number):
        raise invalid(f"Number {token[:20]} is out of range.")
    return number


# --- operands --------------------------------------------------------------------------------


def column_condition(column: Column, op: str, operand: Any) -> Condition:
    """A condition on an instance column, its operand checked and converted."""
    if op not in column.operators:
        supported = [name for name in OPERATORS if name in column.operators]
        raise unsupported(op, supported, on=column.name)
    where = f"{op!r} on {column.name!r}"
    if op == "isnull":
        return Condition(column, op, _flag(operand, where))
    if op in ("eq", "ne") and operand is None:
        if not column.nullable:
            raise invalid(f"{where} does not take null: {column.name!r} always has a value.")
        return Condition(column, "isnull", op == "eq")
    if op in LIST_OPERATORS:
        items = _list_operand(op, operand, where)
        return Condition(column, op, tuple(_column_value(column, item, where) for item in items))
    return Condition(column, op, _column_value(column, operand, where))


def _column_value(column: Column, value: Any, where: str) -> Any:
    kind = column.kind
    if kind in (ColumnKind.STATE_TYPE, ColumnKind.STATE_SUBTYPE):
        return _state_code(kind, value, where)
    if kind is ColumnKind.BOOLEAN:
        return _flag(value, where)
    if not isinstance(value, str):
        raise invalid(f"{where} expects a string, got {_show(value)}.")
    _check_length(value, where)
    if kind is ColumnKind.STATUS:
        code = STATUS_BY_NAME.get(value.lower())
        if code is None:
            names = ", ".join(f"{m.label} ({m.value})" for m in InstanceStatus)
            raise invalid(f"{where}: {value!r} is no instance status; the statuses are {names}.")
        return code
    if kind is ColumnKind.DATETIME:
        instant = parse_instant(value)
        if instant is None:
            raise invalid(
                f"{where} expects an ISO 8601 date or date-time (2024-01-31, "
                f"2024-01-31T10:00:00Z), got {value!r}."
            )
        return instant
    if kind is ColumnKind.UUID:
        try:
            return uuid.UUID(value)
        except ValueError:
            raise invalid(f"{where} expects a UUID, got {value!r}.") from None
    return value


def _state_code(kind: ColumnKind, value: Any, where: str) -> int:
    codes = TYPE_CODES[kind]
    if isinstance(value, str):
        _check_length(value, where)
        text = value.strip()
        if text.lower() in codes:
            return codes[text.lower()]
        if text.isdigit() and int(text) in codes.values():
            return int(text)
    elif isinstance(value, int) and not isinstance(value, bool) and value in codes.values():
        return value
    known = ", ".join(f"{code} {name}" for name, code in codes.items())
    raise invalid(f"{where}: {_show(value)} is none of {known}.")


def data_condition(path: DataPath, op: str, operand: Any) -> Condition:
    """A condition on a data field: its operand checked (JSON values as given)."""
    where = f"{op!r} on {path.name!r}"
    if op == "isnull":
        return Condition(path, op, _flag(operand, where))
    if op in ("eq", "ne") and operand is None:
        return Condition(path, "isnull", op == "eq")
    if op in LIST_OPERATORS:
        items = _list_operand(op, operand, where)
        checked = tuple(_data_value(op, item, where) for item in items)
        if op == "between":
            kinds = {"string" if isinstance(item, str) else "number" for item in checked}
            if len(kinds) > 1:
                raise invalid(
                    f"{where} needs two bounds of the same type (two strings or two numbers)."
                )
        return Condition(path, op, checked)
    return Condition(path, op, _data_value(op, operand, where))


def _data_value(op: str, value: Any, where: str) -> Any:
    if value is None:
        raise invalid(f"{where} does not take null here; use 'isnull'.")
    if isinstance(value, str):
        _check_length(value, where)
        return value
    if op in TEXT_MATCH_OPERATORS:
        raise invalid(f"{where} expects a string, got {_show(value)}.")
    if isinstance(value, float) and not math.isfinite(value):
        raise invalid(f"{where}: {value} is not a JSON number.")
    ordered = op in ("gt", "ge", "lt", "le", "between")
    if ordered and not _is_number(value):
        raise invalid(f"{where} expects a number or a string, got {_show(value)}.")
    return value


def _list_operand(op: str, value: Any, where: str) -> list[Any]:
    if op == "between":
        if not isinstance(value, list) or len(value) != 2:
            raise invalid(f"{where} expects a list of two values [low, high], got {_show(value)}.")
    elif not isinstance(value, list) or not value:
        raise invalid(f"{where} expects a non-empty list, got {_show(value)}.")
    return value


def _flag(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise invalid(f"{where} expects true or false, got {_show(value)}.")


def _check_length(value: str, where: str) -> None:
    if len(value) > MAX_OPERAND_LENGTH:
        raise invalid(
            f"The operand of {where} is {len(value)} characters long; an operand is limited to "
            f"{MAX_OPERAND_LENGTH} characters."
        )


# --- dates and numbers given as strings ------------------------------------------------------

# An ISO 8601 calendar date (1000-9999, leap days included), optionally with a time, seconds,
# up to six fraction digits and an offset. Written for both Python's `re` and PostgreSQL's
# regular expressions: what matches is exactly what both parse as an instant.
_DATE = (
    "(?:[1-9][0-9]{3}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
    "|[1-9][0-9](?:0[48]|[2468][048]|[13579][26])-02-29"
    "|(?:[2468][048]|[13579][26])00-02-29)"
)
_TIME = (
    "(?:[T ](?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:[.][0-9]{1,6})?)?"
    "(?:Z|[+-](?:0[0-9]|1[0-4]):[0-5][0-9])?)?"
)
INSTANT_PATTERN = _DATE + _TIME
_INSTANT = re.compile(INSTANT_PATTERN)
_NUMBER = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_INT64 = 2**63


def parse_instant(text: str) -> datetime | None:
    """An ISO 8601 date or date-time as an aware instant (no offset: UTC), or None."""
    if not _INSTANT.fullmatch(text):
        return None
    instant = datetime.fromisoformat(text)
    return instant if instant.tzinfo else instant.replace(tzinfo=UTC)


def number_in(text: str) -> int | float | None:
    """The number a string operand spells (`"500"`, `"-2.5"`, `"1e3"`), or None."""
    if not _NUMBER.fullmatch(text):
        return None
    if any(mark in text for mark in ".eE"):
        number = float(text)
        return number if math.isfinite(number) else None
    whole = int(text)
    return whole if -_INT64 < whole < _INT64 else float(whole)


def boolean_in(text: str) -> bool | None:
    """`"true"` / `"false"` (any case) as a boolean, or None."""
    lowered = text.lower()
    return {"true": True, "false": False}.get(lowered)


# --- groupBy ---------------------------------------------------------------------------------


def _group_spec(group: dict[str, Any], extra_aggregations: Any) -> GroupSpec:
    unknown = set(group) - {"field", "fields", "aggregations"}
    if unknown:
        raise invalid(f"groupBy takes field or fields and aggregations, not {sorted(unknown)}.")
    if ("field" in group) == ("fields" in group):
        raise invalid('groupBy names one "field" or a list of "fields".')
    several = "fields" in group
    names = group["fields"] if several else [group["field"]]
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise invalid(f"groupBy fields are names like 'attributes.status', got {_show(names)}.")
    if len(names) > 8:
        raise invalid("groupBy takes at most 8 fields.")
    fields = tuple(target_named(name) for name in names)
    if any(isinstance(target, Column) and target.kind is ColumnKind.BOOLEAN for target in fields):
        raise invalid("isTransient cannot be grouped on.")
    asked = group.get("aggregations", extra_aggregations)
    if "aggregations" in group and extra_aggregations is not None:
        raise invalid("aggregations are given both inside and beside groupBy.")
    if asked is None:
        return GroupSpec(fields, several, count=True)
    asked = _expect_object(asked, "aggregations")
    unknown = set(asked) - set(AGGREGATIONS)
    if unknown:
        raise invalid(f"Unknown aggregation(s) {sorted(unknown)}; supported: {list(AGGREGATIONS)}.")
    count = asked.get("count", False)
    if not isinstance(count, bool):
        raise invalid(f"aggregations.count is true or false, got {_show(count)}.")
    aggregates = []
    for name in AGGREGATIONS[1:]:
        if name not in asked:
            continue
        value = asked[name]
        if not isinstance(value, str):
            raise invalid(f"aggregations.{name} names a field like 'attributes.amount'.")
        target = target_named(value)
        if isinstance(target, Column) and not (
            name in ("min", "max") and target.kind is ColumnKind.DATETIME
        ):
            raise invalid(
                f"aggregations.{name} takes a data field (numbers)"
                + (" or a date column" if name in ("min", "max") else "")
                + f", not {target.name!r}."
            )
        aggregates.append((name, target))
    return GroupSpec(fields, several, count=count, aggregates=tuple(aggregates))


def parse_sort_keys(raw: str | None) -> list[SortKey]:
    """The `sort` / `orderBy` parameter: JSON `{"field", "direction"}`, `{"fields": [...]}` or
    a list of those; or text `-createdAt,key` (a `-` means descending). Empty: no keys."""
    if raw is None or not raw.strip():
        return []
    text = raw.strip()
    if len(text) > MAX_FILTER_LENGTH:
        raise invalid(f"The sort is longer than {MAX_FILTER_LENGTH} characters.")
    if not text.startswith(("{", "[")):
        names = [name.strip() for name in text.split(",")]
        if not all(names):
            raise invalid(f"The sort {text!r} has an empty term.")
        return [SortKey(_sortable(name.removeprefix("-")), name.startswith("-")) for name in names]
    tree = _load_json(text, parameter="sort")
    if isinstance(tree, dict) and set(tree) == {"fields"}:
        tree = tree["fields"]
        if not isinstance(tree, list) or not tree:
            raise invalid('"fields" of a sort is a non-empty list of {"field", "direction"}.')
    items = tree if isinstance(tree, list) else [tree]
    keys = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("field"), str):
            raise invalid(f'Sort items look like {{"field": "createdAt"}}, got {_show(item)}.')
        if set(item) - {"field", "direction"}:
            raise invalid(f"Sort item {_show(item)} has keys other than field and direction.")
        direction = item.get("direction", "asc")
        if not isinstance(direction, str) or direction.lower() not in ("asc", "desc"):
            raise invalid(f"Sort direction is 'asc' or 'desc', got {_show(direction)}.")
        keys.append(SortKey(_sortable(item["field"]), direction.lower() == "desc"))
    return keys


def _sortable(name: str) -> Target:
    target = target_named(name)
    if isinstance(target, Column) and target.kind is ColumnKind.BOOLEAN:
        raise invalid_column(name, f"{name!r} cannot be sorted on.")
    return target


# --- helpers ---------------------------------------------------------------------------------


def _load_json(text: str, *, parameter: str) -> Any:
    """JSON with duplicate keys and NaN/Infinity refused, since both would be silently lossy."""

    def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        names = [name for name, _ in pairs]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"duplicate key {duplicates[0]!r}")
        return dict(pairs)

    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON number")

    try:
        return json.loads(text, object_pairs_hook=unique_keys, parse_constant=no_constants)
    except (ValueError, RecursionError) as error:
        raise invalid(
            f"Invalid {parameter} syntax. Valid JSON expected. {_short(str(error))}."
        ) from None


def _expect_object(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise invalid(f"{name} is a JSON object, not {_json_type(value)}.")
    return value


def _short(text: str) -> str:
    return text if len(text) <= 200 else f"{text[:200]}..."


def _json_type(value: Any) -> str:
    """The JSON type name of a Python value, as `jsonb_typeof` spells it."""
    kinds: list[tuple[type | tuple[type, ...], str]] = [
        (bool, "boolean"),  # before int: bool is an int
        ((int, float), "number"),
        (str, "string"),
        (dict, "object"),
        (list, "array"),
    ]
    return next((name for kind, name in kinds if isinstance(value, kind)), "null")


json_type = _json_type


def _is_number(value: Any) -> bool:
    return _json_type(value) == "number"


def _show(value: Any) -> str:
    return _short(json.dumps(value, default=str))
