"""The query language's syntax tree as SQL: a `Q` for the filter, `order_by()` terms for the
sort, and the grouped rows of `groupBy`. Every operand reaches the database as a parameter;
every condition stays in SQL (an index can serve it), none is checked row by row in Python.

Comparisons (`doc/en/flow/instance-filtering.md` leaves their typing open; these are this
runtime's rules):

- Every condition is true or false, never unknown: a row without a value (a NULL column, a
  missing data field) fails every comparison, and `ne`, `nin` and `not` are exact complements,
  so they include it.
- A data field's operand given as a string is compared by the type of the value stored in
  each row: against a number as a number (`"500"` is 500; a string that spells no number matches
  no number), against a boolean as `true` / `false` (`eq` only), against a string that holds an
  ISO 8601 date or date-time as an instant when the operand is one too (offsets honoured, none
  means UTC), and otherwise as text. An operand given as a JSON number, boolean, object or list
  matches only stored values of that JSON type.
- `like` is "contains", case-insensitive; `startswith` and `endswith` are case-sensitive; all
  three match text only (strings in data, text columns).

Indexes (`instances.indexes` builds them from the expressions below, so PostgreSQL matches
them exactly): a data comparison is a JSON type guard and a `jsonb` comparison, both columns of
one B-tree, so each typed branch of a comparison is one tight index range; a date comparison
goes through the immutable `vnext_instant(text)` (migration 0012) instead of casts an index
cannot hold; `like` and the case-insensitive `LIKE` beside each `startswith` / `endswith` read
`UPPER(text)`, which a trigram index serves.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from decimal import Decimal
from functools import reduce
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import (
    Avg,
    BooleanField,
    CharField,
    Count,
    DateTimeField,
    DecimalField,
    Expression,
    ExpressionWrapper,
    F,
    Func,
    JSONField,
    Max,
    Min,
    Q,
    QuerySet,
    Sum,
    TextField,
    Value,
)
from django.db.models.expressions import OrderBy
from django.db.models.fields.json import (  # type: ignore[attr-defined]
    KeyTextTransform,
    KeyTransform,
    KeyTransformExact,
    KeyTransformGt,
    KeyTransformGte,
    KeyTransformIContains,
    KeyTransformIEndsWith,
    KeyTransformIStartsWith,
    KeyTransformLt,
    KeyTransformLte,
    KeyTransformRegex,
    compile_json_path,
)
from django.db.models.functions import Cast, Coalesce, Upper
from django.db.models.lookups import Exact, Lookup
from django.db.models.sql.compiler import SQLCompiler

from instances.filters.language import (
    INSTANT_PATTERN,
    boolean_in,
    json_type,
    number_in,
    parse_instant,
)
from instances.filters.tree import (
    MAX_GROUPS,
    TEXT_MATCH_OPERATORS,
    AllOf,
    Column,
    ColumnKind,
    Condition,
    DataPath,
    GroupSpec,
    Negation,
    Node,
    SortKey,
    Target,
    invalid,
    invalid_column,
)
from instances.status import STATE_SUBTYPE_NAMES, STATE_TYPE_NAMES

Sealed = frozenset[tuple[str, ...]]

_KEY_LOOKUPS: dict[str, type[Lookup[Any]]] = {
    "eq": KeyTransformExact,
    "gt": KeyTransformGt,
    "ge": KeyTransformGte,
    "lt": KeyTransformLt,
    "le": KeyTransformLte,
}
_FIELD_LOOKUPS = {"eq": "exact", "gt": "gt", "ge": "gte", "lt": "lt", "le": "lte"}
_SQL_OPERATORS = {"eq": "=", "gt": ">", "ge": ">=", "lt": "<", "le": "<="}
_CODES = {
    ColumnKind.STATE_TYPE: STATE_TYPE_NAMES,
    ColumnKind.STATE_SUBTYPE: STATE_SUBTYPE_NAMES,
}
_NOTHING = Q(pk__in=[])
_ORDER = {
    "eq": operator.eq,
    "gt": operator.gt,
    "ge": operator.ge,
    "lt": operator.lt,
    "le": operator.le,
}


def check_sealed(targets: Iterable[Target], sealed: Sealed) -> None:
    """Refuse (`invalid_column`) a data path at or below a `sealed` one: encrypted at rest
    (cipher text a comparison could only get wrong), or hidden, masked or hashed for the
    caller (a comparison would reveal it)."""
    for target in targets:
        if isinstance(target, DataPath) and any(
            target.path[: len(secret)] == secret for secret in sealed
        ):
            raise invalid_column(
                target.name,
                f"Column {target.name!r} is encrypted at rest, or hidden, masked or hashed for "
                "your roles (master schema x-encryption / x-roles / x-masking): it cannot be "
                "filtered, sorted or grouped on.",
            )


# --- filter ----------------------------------------------------------------------------------


def filter_q(node: Node | None) -> Q:
    """The filter as a two-valued `Q` (no filter: every row)."""
    if node is None:
        return Q()
    if isinstance(node, Condition):
        if isinstance(node.target, Column):
            return _column_condition(node.target, node.op, node.operand)
        return _data_condition(node.target, node.op, node.operand)
    if isinstance(node, Negation):
        return ~filter_q(node.part)
    parts = [filter_q(part) for part in node.parts]
    return reduce(operator.and_ if isinstance(node, AllOf) else operator.or_, parts)


def _any_of(parts: list[Q]) -> Q:
    return reduce(operator.or_, parts) if parts else _NOTHING


def _column_condition(column: Column, op: str, value: Any) -> Q:
    if column.kind is ColumnKind.BOOLEAN:
        # No instance of this runtime is transient: `isTransient` is false for every row.
        holds = (op == "eq") != value
        return Q() if holds else _NOTHING
    if column.kind in _CODES:
        names = _CODES[column.kind]
        if op in ("in", "nin"):
            chosen = [names[code] for code in value]
        else:
            compare = _ORDER["eq" if op == "ne" else op]
            chosen = [name for code, name in names.items() if compare(code, value)]
        matched = Q(**{f"{column.field}__in": chosen}) if chosen else _NOTHING
        return ~matched if op in ("ne", "nin") else matched
    field = column.field
    if op == "isnull":
        return Q(**{f"{field}__isnull": value})
    if op in ("in", "nin"):
        matched = Q(**{f"{field}__in": list(value)})
        return matched if op == "in" else ~matched
    if op == "between":
        low, high = value
        return Q(**{f"{field}__gte": low}) & Q(**{f"{field}__lte": high})
    if op == "like":
        return Q(**{f"{field}__icontains": value})
    if op in ("startswith", "endswith"):
        implied = Q(**{f"{field}__i{op}": value})
        return implied & Q(**{f"{field}__regex": _anchored(op, value)})
    matched = Q(**{f"{field}__{_FIELD_LOOKUPS['eq' if op == 'ne' else op]}": value})
    return ~matched if op == "ne" else matched


def _data_condition(path: DataPath, op: str, value: Any) -> Q:
    if op == "isnull":
        missing = Q(Exact(_json_type_at(path.path), "null"))
        return missing if value else ~missing
    if op == "ne":
        return ~_compare(path.path, "eq", value)
    if op in ("in", "nin"):
        matched = _any_of([_compare(path.path, "eq", item) for item in value])
        return matched if op == "in" else ~matched
    if op == "between":
        low, high = value
        return _compare(path.path, "ge", low) & _compare(path.path, "le", high)
    if op in TEXT_MATCH_OPERATORS:
        target = _data_at(path.path)
        if op == "like":
            match = Q(KeyTransformIContains(target, value))
        else:
            implied = _IMPLIED_LIKE[op](target, value)
            match = Q(implied) & Q(KeyTransformRegex(target, _anchored(op, value)))
        return _is(path.path, "string") & match
    return _compare(path.path, op, value)


def _compare(path: tuple[str, ...], op: str, value: Any) -> Q:
    """`data at path <op> value` (op: eq, gt, ge, lt, le) under the typing rules above."""
    target = _data_at(path)
    lookup = _KEY_LOOKUPS[op]
    if not isinstance(value, str):
        return _is(path, json_type(value)) & Q(lookup(target, value))
    parts = []
    number = number_in(value)
    if number is not None:
        parts.append(_is(path, "number") & Q(lookup(target, number)))
    flag = boolean_in(value) if op == "eq" else None
    if flag is not None:
        parts.append(_is(path, "boolean") & Q(KeyTransformExact(target, flag)))
    instant = parse_instant(value)
    if instant is None:
        parts.append(_is(path, "string") & Q(lookup(target, value)))
    else:
        parts.append(_is(path, "string") & Q(_InstantOrText(path, op, instant, value)))
    return _any_of(parts)


# A case-sensitive prefix (suffix) is also a case-insensitive one, as `UPPER` maps characters
# one by one: the `LIKE` is implied, and there for the trigram index on `UPPER(text)` (the
# regex that decides cannot use it).
_IMPLIED_LIKE = {"startswith": KeyTransformIStartsWith, "endswith": KeyTransformIEndsWith}


def _is(path: tuple[str, ...], kind: str) -> Q:
    return Q(Exact(_json_type_at(path), kind))


def _anchored(op: str, text: str) -> str:
    """`startswith` / `endswith` as a case-sensitive regex that reads the same in PostgreSQL
    and Python (SQLite's REGEXP): `^` and `\\Z` anchor the whole value, the rest is literal."""
    escaped = re.escape(text)
    return f"(?s)^{escaped}" if op == "startswith" else f"(?s){escaped}\\Z"


def _data_at(path: tuple[str, ...]) -> KeyTransform:
    """`data` at `path`, built as expressions so that a key named like a lookup (`in`, `gt`)
    stays a key."""
    target: Any = ExpressionWrapper(F("data"), output_field=JSONField())
    for segment in path:
        target = KeyTransform(segment, target)
    return target


def _text_at(path: tuple[str, ...]) -> KeyTextTransform:
    """The text of `data` at `path` (a string without its quotes)."""
    parent: Any = ExpressionWrapper(F("data"), output_field=JSONField())
    for segment in path[:-1]:
        parent = KeyTransform(segment, parent)
    return KeyTextTransform(path[-1], parent)


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
        json_type_sql = f"JSON_TYPE({column_sql}, %s)"
        sql = (
            f"CASE {json_type_sql} WHEN 'integer' THEN 'number' WHEN 'real' THEN 'number' "
            "WHEN 'text' THEN 'string' WHEN 'true' THEN 'boolean' WHEN 'false' THEN 'boolean' "
            f"ELSE {json_type_sql} END"
        )
        return sql, (*params, path, *params, path)


def _json_type_at(path: tuple[str, ...]) -> Coalesce:
    """The JSON type at `path`, a missing key reading as `null`: never SQL NULL."""
    return Coalesce(_JsonTypeOf(_data_at(path)), Value("null"), output_field=CharField())


class _InstantOf(Func):
    """The instant a string spells (an ISO 8601 date or date-time; no offset means UTC), else
    SQL NULL: `vnext_instant(text)`, immutable, so an index can hold it (PostgreSQL only)."""

    function = "vnext_instant"
    output_field = DateTimeField()


class _InstantOrText(Expression):
    """A stored string compared with an operand that is an ISO 8601 instant: as an instant
    when the stored string is one too, else as text."""

    output_field = BooleanField()

    def __init__(self, path: tuple[str, ...], op: str, instant: datetime, text: str) -> None:
        super().__init__()
        self.text = _text_at(path)
        self.op = _SQL_OPERATORS[op]
        self.instant = instant
        self.operand = text

    def get_source_expressions(self) -> list[Any]:
        return [self.text]

    def set_source_expressions(self, exprs: Sequence[Any]) -> None:
        (self.text,) = exprs

    def as_sql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, tuple[Any, ...]]:
        text, params = compiler.compile(self.text)
        # COALESCE decides (the instant comparison, or the text one when the string is no
        # instant: two-valued, so a negation stays exact); the OR beside it says the same of
        # the rows it keeps, as two ranges of the index on (JSON type, instant) that the type
        # guard around it completes. An index serves the OR and drops it from the filter.
        instant = f"vnext_instant({text})"
        sql = (
            f"(COALESCE({instant} {self.op} %s, {text} {self.op} %s) "
            f"AND ({instant} {self.op} %s OR {instant} IS NULL))"
        )
        return sql, (
            *params,
            self.instant,
            *params,
            self.operand,
            *params,
            self.instant,
            *params,
        )

    def as_sqlite(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, tuple[Any, ...]]:
        text, params = compiler.compile(self.text)
        sql = (
            f"(CASE WHEN {text} REGEXP %s THEN julianday({text}) {self.op} julianday(%s) "
            f"ELSE {text} {self.op} %s END)"
        )
        utc = self.instant.isoformat().replace("+00:00", "Z")
        return sql, (*params, f"^{INSTANT_PATTERN}\\Z", *params, utc, *params, self.operand)


# --- what an index holds ----------------------------------------------------------------------
# The expressions above, for `instances.indexes`: an index is used only on the very expression a
# condition or sort compiles to.


def indexed_value(path: tuple[str, ...]) -> KeyTransform:
    """The JSON value at `path`, as comparisons and sorts read it."""
    return _data_at(path)


def indexed_type(path: tuple[str, ...]) -> Coalesce:
    """The JSON type at `path`, the guard of every data comparison."""
    return _json_type_at(path)


def indexed_text(path: tuple[str, ...]) -> Upper:
    """`UPPER` of the text at `path`: what `like`, and the `LIKE` beside `startswith` and
    `endswith`, read."""
    return Upper(_text_at(path))


def indexed_instant(path: tuple[str, ...]) -> Func:
    """The instant the string at `path` spells (SQL NULL for anything else)."""
    return _InstantOf(_text_at(path))


def indexed_column_text(field: str) -> Upper:
    """`UPPER` of a text column: what `like` and the `LIKE` beside the prefix operators read."""
    return Upper(Cast(F(field), TextField()))


# --- sort ------------------------------------------------------------------------------------

_DEFAULT_SORT = "-created_at"


def sort_terms(keys: list[SortKey]) -> list[str | OrderBy]:
    """`order_by()` terms, newest first when no key is given. An `id` term in the direction of
    the first key ends the list, so pages never shuffle rows that tie. Rows without a value sort
    last in both directions."""
    if not keys:
        return [_DEFAULT_SORT, "-id"]
    terms = [_sort_term(key) for key in keys]
    if not any(isinstance(key.target, Column) and key.target.name == "id" for key in keys):
        terms.append("-id" if keys[0].descending else "id")
    return terms


def _sort_term(key: SortKey) -> str | OrderBy:
    target = key.target
    if isinstance(target, DataPath):
        return OrderBy(_data_at(target.path), descending=key.descending, nulls_last=True)
    if target.nullable:
        return OrderBy(F(target.field), descending=key.descending, nulls_last=True)
    return f"-{target.field}" if key.descending else target.field


# --- groupBy ---------------------------------------------------------------------------------


class _AtDataPath(Func):
    """A value read at a data path, in each database's JSON dialect (`_postgresql`, `_sqlite`
    get the compiled `data` column and its parameters)."""

    def __init__(self, path: tuple[str, ...]) -> None:
        super().__init__(F("data"))
        self.path = path

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, tuple[Any, ...]]:
        (column,) = self.get_source_expressions()
        return self._postgresql(*compiler.compile(column))

    def as_sqlite(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, tuple[Any, ...]]:
        (column,) = self.get_source_expressions()
        return self._sqlite(*compiler.compile(column))

    def _postgresql(self, sql: str, params: Any) -> tuple[str, tuple[Any, ...]]:
        raise NotImplementedError

    def _sqlite(self, sql: str, params: Any) -> tuple[str, tuple[Any, ...]]:
        raise NotImplementedError


class _GroupKey(_AtDataPath):
    """The JSON text of the value at a data path; SQL NULL for a missing key or JSON null, so
    that both fall in one group."""

    output_field = TextField()

    def _postgresql(self, sql: str, params: Any) -> tuple[str, tuple[Any, ...]]:
        return f"NULLIF(({sql} #> %s)::text, 'null')", (*params, list(self.path))

    def _sqlite(self, sql: str, params: Any) -> tuple[str, tuple[Any, ...]]:
        return f"NULLIF({sql} -> %s, 'null')", (*params, compile_json_path(self.path))


class _NumberAt(_AtDataPath):
    """The number at a data path; SQL NULL for anything else (aggregations skip it)."""

    output_field = DecimalField()

    def _postgresql(self, sql: str, params: Any) -> tuple[str, tuple[Any, ...]]:
        path = list(self.path)
        return (
            f"(CASE WHEN jsonb_typeof({sql} #> %s) = 'number' THEN ({sql} #> %s)::numeric END)",
            (*params, path, *params, path),
        )

    def _sqlite(self, sql: str, params: Any) -> tuple[str, tuple[Any, ...]]:
        path = compile_json_path(self.path)
        return (
            f"(CASE WHEN JSON_TYPE({sql}, %s) IN ('integer', 'real') "
            f"THEN JSON_EXTRACT({sql}, %s) END)",
            (*params, path, *params, path),
        )


_AGGREGATES = {"sum": Sum, "avg": Avg, "min": Min, "max": Max}


def grouped(queryset: QuerySet[Any], spec: GroupSpec) -> list[dict[str, Any]]:
    """The groups of `queryset` (already filtered): `{name, count?, sum?, avg?, min?, max?}`
    each, ordered by name (booleans, numbers, strings, then other values; no value last).
    More than `MAX_GROUPS` groups is refused: narrow the filter."""
    keys = {f"g{index}": _group_key(target) for index, target in enumerate(spec.fields)}
    aggregates: dict[str, Any] = {"n": Count("pk")}
    for name, target in spec.aggregates:
        value = _NumberAt(target.path) if isinstance(target, DataPath) else F(target.field)
        aggregates[name] = _AGGREGATES[name](value)
    rows = list(queryset.order_by().values(**keys).annotate(**aggregates)[: MAX_GROUPS + 1])
    if len(rows) > MAX_GROUPS:
        raise invalid(f"groupBy yields more than {MAX_GROUPS} groups; narrow the filter.")
    groups = []
    for row in rows:
        values = [_group_value(target, row[f"g{i}"]) for i, target in enumerate(spec.fields)]
        group: dict[str, Any] = {"name": values if spec.several else values[0]}
        if spec.count:
            group["count"] = row["n"]
        for name, _ in spec.aggregates:
            group[name] = _plain(row[name])
        groups.append(group)
    groups.sort(key=lambda group: _name_order(group["name"]))
    return groups


def _group_key(target: Target) -> Any:
    if isinstance(target, DataPath):
        return _GroupKey(target.path)
    return F(target.field)


def _group_value(target: Target, value: Any) -> Any:
    if isinstance(target, DataPath):
        return None if value is None else json.loads(value)
    return _plain(value)


def _plain(value: Any) -> Any:
    """A database value as JSON: integral decimals as integers, instants as ISO 8601."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _name_order(name: Any) -> Any:
    values = name if isinstance(name, list) else [name]
    return [_value_order(value) for value in values]


def _value_order(value: Any) -> tuple[int, Any]:
    if value is None:
        return (4, "")
    if isinstance(value, bool):
        return (0, value)
    if isinstance(value, int | float):
        return (1, value)
    if isinstance(value, str):
        return (2, value)
    return (3, json.dumps(value, sort_keys=True))
