"""The listing language of instances: the `filter`, `sort`, `page` and `pageSize` query parameters
turned into a `Q`, `order_by()` terms and a page window. Bad input raises `VNextError` with the
`invalid_filter`, `unsupported_operator` or `invalid_column` code.
"""

from __future__ import annotations

import json
import math
import operator
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from functools import reduce
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import CharField, ExpressionWrapper, F, Func, JSONField, Q, Value
from django.db.models.expressions import OrderBy
from django.db.models.fields.json import (  # type: ignore[attr-defined]
    KeyTransform,
    KeyTransformExact,
    KeyTransformGt,
    KeyTransformGte,
    KeyTransformIn,
    KeyTransformLt,
    KeyTransformLte,
    KeyTransformRegex,
    compile_json_path,
)
from django.db.models.functions import Coalesce
from django.db.models.lookups import Exact, In, Lookup
from django.db.models.sql.compiler import SQLCompiler
from django.utils.dateparse import parse_datetime

from instances.engine.errors import Codes, VNextError

OPERATORS = frozenset(
    {
        "eq",
        "ne",
        "gt",
        "ge",
        "lt",
        "le",
        "between",
        "like",
        "startswith",
        "endswith",
        "in",
        "nin",
        "isnull",
    }
)
MAX_NESTING = 16
MAX_PAGE = 1000
MAX_PAGE_SIZE = 100
DEFAULT_PAGE_SIZE = 10
DEFAULT_SORT_KEYS = [("createdAt", True)]  # newest first

ATTRIBUTES_PREFIX = "attributes."
_PATH_SEGMENT = re.compile(r"[A-Za-z0-9_-]+")
# The Django lookup behind each operator, after `ne`, `nin` and `between` became negations or
# pairs of these.
_LOOKUPS = {
    "eq": "exact",
    "gt": "gt",
    "ge": "gte",
    "lt": "lt",
    "le": "lte",
    "in": "in",
    "isnull": "isnull",
    # The text matches are regexes so that they stay case-sensitive on SQLite, whose LIKE is not.
    "like": "regex",
    "startswith": "regex",
    "endswith": "regex",
}
_KEY_LOOKUPS: dict[str, type[Lookup[Any]]] = {
    "eq": KeyTransformExact,
    "gt": KeyTransformGt,
    "ge": KeyTransformGte,
    "lt": KeyTransformLt,
    "le": KeyTransformLte,
    "in": KeyTransformIn,
    "like": KeyTransformRegex,
    "startswith": KeyTransformRegex,
    "endswith": KeyTransformRegex,
}
_TEXT_MATCH_OPERATORS = frozenset({"like", "startswith", "endswith"})


class _ColumnKind(Enum):
    """What values a column holds, which decides the values and operators it accepts."""

    TEXT = "text"
    DATETIME = "datetime"
    UUID = "uuid"
    JSON = "json"


@dataclass(frozen=True)
class _Column:
    """A filterable, sortable column: a model field, or a path into `data` for `attributes.*`."""

    name: str
    kind: _ColumnKind
    field: str = "data"
    path: tuple[str, ...] = ()
    nullable: bool = False


_COLUMNS: dict[str, _Column] = {
    column.name: column
    for column in [
        _Column("id", _ColumnKind.UUID, "id"),
        _Column("key", _ColumnKind.TEXT, "key", nullable=True),
        _Column("status", _ColumnKind.TEXT, "status"),
        _Column("currentState", _ColumnKind.TEXT, "current_state"),
        _Column("state", _ColumnKind.TEXT, "current_state"),
        _Column("effectiveState", _ColumnKind.TEXT, "effective_state"),
        _Column("effectiveStateType", _ColumnKind.TEXT, "effective_state_type"),
        _Column("effectiveStateSubType", _ColumnKind.TEXT, "effective_state_subtype"),
        _Column("createdAt", _ColumnKind.DATETIME, "created_at"),
        _Column("modifiedAt", _ColumnKind.DATETIME, "updated_at"),
        _Column("completedAt", _ColumnKind.DATETIME, "completed_at", nullable=True),
    ]
}


def _resolve_column(name: str, sealed: frozenset[tuple[str, ...]] = frozenset()) -> _Column:
    """The column a public name (`createdAt`, `attributes.a.b`) stands for. `sealed`: the data
    paths encrypted at rest (cipher text a comparison could only get wrong) and those the caller
    may not read as stored (a comparison would reveal them)."""
    if name in _COLUMNS:
        return _COLUMNS[name]
    if name.startswith(ATTRIBUTES_PREFIX):
        path = tuple(name[len(ATTRIBUTES_PREFIX) :].split("."))
        bad = [segment for segment in path if not _PATH_SEGMENT.fullmatch(segment)]
        if bad:
            raise VNextError(
                Codes.FILTER_INVALID_COLUMN,
                f"Column {name!r}: attribute path segment {bad[0]!r} must match "
                f"{_PATH_SEGMENT.pattern}.",
            )
        if any(path[: len(secret)] == secret for secret in sealed):
            raise VNextError(
                Codes.FILTER_INVALID_COLUMN,
                f"Column {name!r} is encrypted at rest, or hidden, masked or hashed for your "
                "roles (master schema x-encryption / x-roles / x-masking): it cannot be "
                "filtered or sorted.",
            )
        return _Column(name, _ColumnKind.JSON, path=path, nullable=True)
    known = ", ".join([*_COLUMNS, "attributes.<path>"])
    raise VNextError(Codes.FILTER_INVALID_COLUMN, f"Unknown column {name!r}; known: {known}.")


# --- filter ----------------------------------------------------------------------------------


def parse_filter(raw: str | None, *, sealed: frozenset[tuple[str, ...]] = frozenset()) -> Q:
    """The `filter` parameter (JSON or text form) as a `Q`; empty or missing means no filter.

    JSON: `{"field": {"op": value}}`, several fields or operators meaning all of them, nested
    with `{"and": [...]}`, `{"or": [...]}` and `{"not": {...}}`. Text: `field op value` clauses
    joined by `and` (any case); a value is `'x'` or `"x"` (double the quote to embed it), a
    number, `true`, `false`, `null`, or a list `(v, v)`.

    - Every condition is true or false, never unknown: a row without a value (a NULL column, a
      missing attribute) fails every comparison, and `ne`, `nin` and `not` are exact
      complements, so they include it. `eq null` is `isnull true`, `ne null` is `isnull false`.
    - `attributes.*` compare JSON values as given: numbers only match numbers, strings only
      strings (`1` never equals `"1"`), and `gt` or `between` never cross types. A JSON `null`
      counts as no value for `isnull`.
    - `like`, `startswith` and `endswith` are case-sensitive. `like` matches the whole value;
      `%` is any run of characters and the only wildcard (`_` is literal; a literal `%` can
      only be matched by `%`).
    - Date columns take ISO 8601 date-times; one without an offset is UTC.
    - An attribute at or below a `sealed` path (encrypted at rest) is refused: `invalid_column`.
    """
    if raw is None or not raw.strip():
        return Q()
    text = raw.strip()
    if text.startswith(("{", "[")):
        tree = _load_json(text, parameter="filter")
        if not isinstance(tree, dict):
            raise _invalid(f"filter must be a JSON object, got {_json_type(tree)}.")
        return _filter_object(tree, depth=0, sealed=sealed) if tree else Q()
    return _parse_text_filter(text, sealed)


def _filter_object(node: Any, *, depth: int, sealed: frozenset[tuple[str, ...]]) -> Q:
    """One JSON filter object: its fields and combinators, all of which must hold."""
    if depth > MAX_NESTING:
        raise _invalid(f"filter is nested deeper than {MAX_NESTING} levels.")
    if not isinstance(node, dict) or not node:
        raise _invalid(f"Expected a non-empty filter object, got {_show(node)}.")
    conditions: list[Q] = []
    for name, body in node.items():
        if name in ("and", "or"):
            if not isinstance(body, list) or not body:
                raise _invalid(f"{name!r} expects a non-empty list of filter objects.")
            parts = [_filter_object(item, depth=depth + 1, sealed=sealed) for item in body]
            conditions.append(reduce(operator.and_ if name == "and" else operator.or_, parts))
        elif name == "not":
            conditions.append(~_filter_object(body, depth=depth + 1, sealed=sealed))
        else:
            column = _resolve_column(name, sealed)
            if not isinstance(body, dict) or not body:
                raise _invalid(
                    f'{name!r} expects an object of operators like {{"eq": ...}}, '
                    f"got {_show(body)}."
                )
            conditions.extend(_condition(column, op, value) for op, value in body.items())
    return reduce(operator.and_, conditions)


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


def _parse_text_filter(text: str, sealed: frozenset[tuple[str, ...]]) -> Q:
    """The text form: `field op value` clauses joined by `and`."""
    conditions: list[Q] = []
    position = 0
    while True:
        clause = _TEXT_CLAUSE.match(text, position)
        if clause is None:
            raise _invalid(
                f"Expected `field op value` at {text[position:]!r} (strings need quotes)."
            )
        value = _text_value(clause["value"])
        conditions.append(
            _condition(_resolve_column(clause["column"], sealed), clause["op"].lower(), value)
        )
        position = clause.end()
        if position == len(text):
            return reduce(operator.and_, conditions)
        separator = _TEXT_AND.match(text, position)
        if separator is None:
            raise _invalid(f"Expected ' and ' before {text[position:]!r}.")
        position = separator.end()


def _text_value(token: str) -> Any:
    """A literal of the text form, or a list of them for `(a, b)`."""
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
        raise _invalid(f"Number {token[:20]}... is out of range.") from None
    if not math.isfinite(number):
        raise _invalid(f"Number {token} is out of range.")
    return number


# --- conditions ------------------------------------------------------------------------------


def _condition(column: _Column, op: str, value: Any) -> Q:
    """One `column op value` condition as a two-valued `Q` (see the module docstring)."""
    if op not in OPERATORS:
        raise VNextError(
            Codes.FILTER_UNSUPPORTED_OPERATOR,
            f"Unknown operator {op!r} on {column.name}; supported: {', '.join(sorted(OPERATORS))}.",
        )
    if op in _TEXT_MATCH_OPERATORS and column.kind in (_ColumnKind.DATETIME, _ColumnKind.UUID):
        raise VNextError(
            Codes.FILTER_UNSUPPORTED_OPERATOR,
            f"Operator {op!r} needs a text column; {column.name} is not one.",
        )
    build = _attribute_condition if column.kind is _ColumnKind.JSON else _field_condition
    if op == "isnull":
        if not isinstance(value, bool):
            raise _invalid(f"'isnull' on {column.name} expects true or false, got {_show(value)}.")
        return build(column, "isnull", value)
    if op in ("eq", "ne") and value is None:
        return build(column, "isnull", op == "eq")
    if op == "between":
        if not isinstance(value, list) or len(value) != 2:
            raise _invalid(
                f"'between' on {column.name} expects a list of two values [low, high], "
                f"got {_show(value)}."
            )
        low, high = (_checked_value(column, op, bound) for bound in value)
        if column.kind is _ColumnKind.JSON and _json_type(low) != _json_type(high):
            raise _invalid(f"'between' on {column.name} needs two bounds of the same type.")
        return build(column, "ge", low) & build(column, "le", high)
    if op in ("in", "nin"):
        if not isinstance(value, list) or not value:
            raise _invalid(f"{op!r} on {column.name} expects a non-empty list, got {_show(value)}.")
        items = [_checked_value(column, op, item) for item in value]
        matched = build(column, "in", items)
        return matched if op == "in" else ~matched
    matched = build(column, "eq" if op == "ne" else op, _checked_value(column, op, value))
    return ~matched if op == "ne" else matched


def _checked_value(column: _Column, op: str, value: Any) -> Any:
    """`value` checked against the column and operator, converted to what the lookup needs."""
    where = f"{op!r} on {column.name}"
    if value is None:
        raise _invalid(f"{where} does not take null here; use 'isnull'.")
    if op in _TEXT_MATCH_OPERATORS:
        if not isinstance(value, str):
            raise _invalid(f"{where} expects a string, got {_show(value)}.")
        return value
    if column.kind is _ColumnKind.JSON:
        comparable = isinstance(value, str) or _is_number(value)
        if op not in ("eq", "ne", "in", "nin") and not comparable:
            raise _invalid(f"{where} expects a number or a string, got {_show(value)}.")
        if isinstance(value, float) and not math.isfinite(value):
            raise _invalid(f"{where}: {value} is not a JSON number.")
        return value
    if not isinstance(value, str):
        raise _invalid(f"{where} expects a string, got {_show(value)}.")
    if column.kind is _ColumnKind.DATETIME:
        return _parse_instant(value, where=where)
    if column.kind is _ColumnKind.UUID:
        try:
            return uuid.UUID(value)
        except ValueError:
            raise _invalid(f"{where} expects a UUID, got {value!r}.") from None
    return value


def _parse_instant(value: str, *, where: str) -> datetime:
    """An ISO 8601 date-time; one without an offset is taken as UTC."""
    try:
        instant = parse_datetime(value)
    except ValueError:  # well-formed but impossible, like month 13
        instant = None
    if instant is None:
        raise _invalid(f"{where} expects an ISO 8601 date-time, got {value!r}.")
    return instant if instant.tzinfo else instant.replace(tzinfo=UTC)


def _field_condition(column: _Column, op: str, value: Any) -> Q:
    """A condition on a model field. No guard needed: Django negates these NULL-safely
    (`~Q(key="x")` keeps rows whose key is NULL)."""
    operand = _text_match_regex(op, value) if op in _TEXT_MATCH_OPERATORS else value
    return Q(**{f"{column.field}__{_LOOKUPS[op]}": operand})


def _attribute_condition(column: _Column, op: str, value: Any) -> Q:
    """A condition on `data` at the column's path, guarded by the JSON type of the value.

    The guard makes comparisons typed (PostgreSQL orders jsonb across types, so `> 5` would
    otherwise match `true`) and turns a missing key into a plain false.
    """
    target = _data_at(column.path)
    if op == "isnull":
        missing = Q(Exact(_json_type_at(target), "null"))
        return missing if value else ~missing
    operand = _text_match_regex(op, value) if op in _TEXT_MATCH_OPERATORS else value
    comparison = _KEY_LOOKUPS[op](target, operand)
    if op == "in":
        kinds = sorted({_json_type(item) for item in value})
        return Q(In(_json_type_at(target), kinds)) & Q(comparison)
    return Q(Exact(_json_type_at(target), _json_type(value))) & Q(comparison)


def _text_match_regex(op: str, pattern: str) -> str:
    """`like`, `startswith` or `endswith` as a case-sensitive regex; in `like`, `%` is any run
    of characters."""
    if op == "startswith":
        body = rf"\A{re.escape(pattern)}"
    elif op == "endswith":
        body = rf"{re.escape(pattern)}\Z"
    else:
        body = rf"\A{'.*'.join(re.escape(part) for part in pattern.split('%'))}\Z"
    # `\A`, `\Z` and `(?s)` mean the same in PostgreSQL and Python, so SQLite's REGEXP agrees.
    return f"(?s){body}"


def _data_at(path: tuple[str, ...]) -> KeyTransform:
    """`data` at `path`, built as expressions so that a key named like a lookup (`in`, `gt`)
    stays a key."""
    target: Any = ExpressionWrapper(F("data"), output_field=JSONField())
    for segment in path:
        target = KeyTransform(segment, target)
    return target


class _JsonTypeOf(Func):
    """The JSON type of a key's value: `number`, `string`, `boolean`, `object`, `array` or
    `null`; SQL NULL when the key is missing."""

    function = "JSONB_TYPEOF"

    def __init__(self, target: KeyTransform) -> None:
        super().__init__(target, output_field=CharField())

    def as_sqlite(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> tuple[str, tuple[Any, ...]]:
        # SQLite's JSON_EXTRACT drops the JSON type, so ask JSON_TYPE on the column and path
        # and map its names onto PostgreSQL's.
        (target,) = self.get_source_expressions()
        column_sql, params, keys = target.preprocess_lhs(compiler, connection)
        path = compile_json_path(keys)
        json_type = f"JSON_TYPE({column_sql}, %s)"
        sql = (
            f"CASE {json_type} WHEN 'integer' THEN 'number' WHEN 'real' THEN 'number' "
            "WHEN 'text' THEN 'string' WHEN 'true' THEN 'boolean' WHEN 'false' THEN 'boolean' "
            f"ELSE {json_type} END"
        )
        return sql, (*params, path, *params, path)


def _json_type_at(target: KeyTransform) -> Coalesce:
    """The JSON type at `target`, a missing key reading as `null`: never SQL NULL."""
    return Coalesce(_JsonTypeOf(target), Value("null"), output_field=CharField())


# --- sort ------------------------------------------------------------------------------------


def parse_sort(
    raw: str | None, *, sealed: frozenset[tuple[str, ...]] = frozenset()
) -> list[str | OrderBy]:
    """The `sort` parameter as `order_by()` terms, newest first by default.

    JSON `{"field": "createdAt", "direction": "asc|desc"}` or a list of those, or text
    `-createdAt,key`. An `id` term in the direction of the first term always ends the list,
    so pages never shuffle rows that tie. Rows without a value sort last in both directions.
    """
    keys = (_sort_keys(raw.strip()) if raw and raw.strip() else []) or DEFAULT_SORT_KEYS
    terms = [
        _sort_term(_resolve_column(name, sealed), descending=descending)
        for name, descending in keys
    ]
    if all(name != "id" for name, _ in keys):
        terms.append("-id" if keys[0][1] else "id")
    return terms


def _sort_keys(text: str) -> list[tuple[str, bool]]:
    """(column name, descending) pairs of a sort parameter."""
    if not text.startswith(("{", "[")):
        names = [name.strip() for name in text.split(",")]
        if not all(names):
            raise _invalid(f"sort {text!r} has an empty term.")
        return [(name.removeprefix("-"), name.startswith("-")) for name in names]
    tree = _load_json(text, parameter="sort")
    items = tree if isinstance(tree, list) else [tree]
    keys = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("field"), str):
            raise _invalid(f'Sort items look like {{"field": "createdAt"}}, got {_show(item)}.')
        if set(item) - {"field", "direction"}:
            raise _invalid(f"Sort item {_show(item)} has keys other than field and direction.")
        direction = item.get("direction", "asc")
        if not isinstance(direction, str) or direction.lower() not in ("asc", "desc"):
            raise _invalid(f"Sort direction must be 'asc' or 'desc', got {_show(direction)}.")
        keys.append((item["field"], direction.lower() == "desc"))
    return keys


def _sort_term(column: _Column, *, descending: bool) -> str | OrderBy:
    if column.kind is _ColumnKind.JSON:
        return OrderBy(_data_at(column.path), descending=descending, nulls_last=True)
    if column.nullable:
        return OrderBy(F(column.field), descending=descending, nulls_last=True)
    return f"-{column.field}" if descending else column.field


# --- paging ----------------------------------------------------------------------------------


def parse_page(page: str | None, page_size: str | None) -> tuple[int, int]:
    """`(page, page_size)` from the `page` (1..1000, default 1) and `pageSize` (1..100, default
    10) parameters; a missing parameter takes its default (an empty one is refused)."""
    return (
        _bounded_int("page", page, default=1, maximum=MAX_PAGE),
        _bounded_int("pageSize", page_size, default=DEFAULT_PAGE_SIZE, maximum=MAX_PAGE_SIZE),
    )


def _bounded_int(name: str, raw: str | None, *, default: int, maximum: int) -> int:
    if raw is None:
        return default
    text = raw.strip()
    if not re.fullmatch(r"[0-9]{1,9}", text) or not 1 <= int(text) <= maximum:
        shown = raw if len(raw) <= 40 else f"{raw[:40]}..."
        raise _invalid(f"{name} must be an integer from 1 to {maximum}, got {shown!r}.")
    return int(text)


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
        raise _invalid(f"{parameter} is not valid JSON: {error}.") from None


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


def _is_number(value: Any) -> bool:
    return _json_type(value) == "number"


def _show(value: Any) -> str:
    return json.dumps(value, default=str)


def _invalid(detail: str) -> VNextError:
    return VNextError(Codes.FILTER_INVALID, detail)
