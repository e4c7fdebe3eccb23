"""Keyset (cursor) paging of a listing, in the order `sort_terms` gives: the cursor holds the
sort values of the last row a page showed, and the next page is the rows after it in that
order (`WHERE (created_at, id) < (...)`, spelled out term by term), read through the order's
index however deep the page. A row inserted or removed meanwhile moves no other row across a
page boundary: no row is shown twice and none that was there is skipped, which `OFFSET` paging
cannot promise.

The token is opaque to clients (base64url JSON): the page number it leads to, a digest of the
sort it was made for (a cursor is refused under another sort) and the values.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F, Field, Func, Q, TextField, Value
from django.db.models.fields.json import KeyTransform
from django.db.models.lookups import (
    Exact,
    GreaterThan,
    GreaterThanOrEqual,
    IsNull,
    LessThan,
    LessThanOrEqual,
)
from django.db.models.sql.compiler import SQLCompiler

from instances.filters.sql import _data_at
from instances.filters.tree import Column, SortKey, invalid
from instances.models import Instance

CURSOR_VERSION = 1
MAX_CURSOR_LENGTH = 4_000


@dataclass(frozen=True)
class KeyTerm:
    """One term of a listing's order: what is compared, which way, whether it may be NULL
    (NULLs sort last both ways), and the model field its values convert by (None: JSON)."""

    expression: Any  # F or KeyTransform
    descending: bool
    nullable: bool
    field: Field[Any, Any] | None


@dataclass(frozen=True)
class Cursor:
    """A decoded cursor: the page it leads to and the previous page's last sort values."""

    page: int
    values: list[Any]


class _JsonText(Func):
    """A data value as JSON text (SQL NULL when the key is missing), for the cursor."""

    output_field = TextField()

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, tuple[Any, ...]]:
        (source,) = self.get_source_expressions()
        sql, params = compiler.compile(source)
        return f"({sql})::text", tuple(params)

    def as_sqlite(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, tuple[Any, ...]]:
        (source,) = self.get_source_expressions()
        sql, params = compiler.compile(source)
        # SQLite extracts a JSON null as NULL, and orders it so: the cursor says NULL too.
        return f"CASE WHEN {sql} IS NULL THEN NULL ELSE JSON_QUOTE({sql}) END", (
            *params,
            *params,
        )


class _JsonOperand(Func):
    """A cursor's JSON text as the value the order compares (jsonb; SQLite's extracted)."""

    def __init__(self, text: str) -> None:
        super().__init__(Value(text, output_field=TextField()))

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, tuple[Any, ...]]:
        (source,) = self.get_source_expressions()
        sql, params = compiler.compile(source)
        return f"({sql})::jsonb", tuple(params)

    def as_sqlite(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, tuple[Any, ...]]:
        (source,) = self.get_source_expressions()
        sql, params = compiler.compile(source)
        return f"JSON_EXTRACT({sql}, '$')", tuple(params)


def _column_term(name: str, descending: bool, nullable: bool) -> KeyTerm:
    field = Instance._meta.get_field(name)
    assert isinstance(field, Field)
    return KeyTerm(F(name), descending, nullable, field)


def key_terms(keys: Sequence[SortKey]) -> list[KeyTerm]:
    """The terms `sort_terms(keys)` orders by, the `id` that breaks ties included."""
    if not keys:
        return [_column_term("created_at", True, False), _column_term("id", True, False)]
    terms = []
    for key in keys:
        target = key.target
        if isinstance(target, Column):
            terms.append(_column_term(target.field, key.descending, target.nullable))
        else:
            terms.append(KeyTerm(_data_at(target.path), key.descending, True, None))
    if not any(isinstance(key.target, Column) and key.target.name == "id" for key in keys):
        terms.append(_column_term("id", keys[0].descending, False))
    return terms


def cursor_annotations(terms: Sequence[KeyTerm]) -> dict[str, Any]:
    """The sort values to read with each row (`_cursor_0`, ...), to make a cursor of."""
    return {
        f"_cursor_{index}": _JsonText(term.expression)
        if isinstance(term.expression, KeyTransform)
        else term.expression
        for index, term in enumerate(terms)
    }


def _signature(keys: Sequence[SortKey]) -> str:
    spelled = json.dumps([[key.target.name, key.descending] for key in keys])
    return hashlib.sha256(spelled.encode()).hexdigest()[:16]


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)  # UUIDs


def encode_cursor(keys: Sequence[SortKey], terms: Sequence[KeyTerm], page: int, row: Any) -> str:
    """The cursor of the page after the one `row` ended (page number `page`)."""
    values = [_plain(getattr(row, f"_cursor_{index}")) for index in range(len(terms))]
    body = {"v": CURSOR_VERSION, "p": page, "s": _signature(keys), "k": values}
    text = json.dumps(body, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(text).decode().rstrip("=")


def decode_cursor(keys: Sequence[SortKey], terms: Sequence[KeyTerm], token: str) -> Cursor:
    """The cursor a listing gave (400 `invalid_filter` for anything else, or for a cursor
    made under another sort)."""
    refused = invalid(
        "cursor is not one this listing gave: pass the links.next (or nextCursor) of the "
        "previous page, with the same sort."
    )
    text = token.strip()
    if not text or len(text) > MAX_CURSOR_LENGTH:
        raise refused
    try:
        body = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise refused from None
    if (
        not isinstance(body, dict)
        or body.get("v") != CURSOR_VERSION
        or body.get("s") != _signature(keys)
        or not isinstance(body.get("p"), int)
        or body["p"] < 2
        or not isinstance(body.get("k"), list)
        or len(body["k"]) != len(terms)
    ):
        raise refused
    values: list[Any] = []
    for term, value in zip(terms, body["k"], strict=True):
        if value is None:
            values.append(None)
        elif term.field is None:
            if not isinstance(value, str):
                raise refused
            values.append(value)
        else:
            try:
                values.append(term.field.to_python(value))
            except Exception:  # a ValidationError, a TypeError: not a value of the field
                raise refused from None
    return Cursor(body["p"], values)


def _operand(term: KeyTerm, value: Any) -> Any:
    return _JsonOperand(value) if term.field is None else Value(value)


def _false() -> Q:
    return Q(pk__in=[])


def rows_after(terms: Sequence[KeyTerm], values: Sequence[Any]) -> Q:
    """The rows after the one whose sort values are `values`, in the order of `terms`: after
    it in the first term, or equal there and after it in the rest. A non-null first term is
    also given as a plain bound (`created_at <= v`), which is what an index range reads."""
    after = _false()
    for term, value in reversed(list(zip(terms, values, strict=True))):
        after = _strictly_after(term, value) | (_equal(term, value) & after)
    first, value = terms[0], values[0]
    if value is not None and not first.nullable:
        bound = LessThanOrEqual if first.descending else GreaterThanOrEqual
        after &= Q(bound(first.expression, _operand(first, value)))
    return after


def _strictly_after(term: KeyTerm, value: Any) -> Q:
    if value is None:
        return _false()  # NULLs come last: nothing follows a NULL in this term
    compare = LessThan if term.descending else GreaterThan
    after = Q(compare(term.expression, _operand(term, value)))
    if term.nullable:
        after |= Q(IsNull(term.expression, True))
    return after


def _equal(term: KeyTerm, value: Any) -> Q:
    if value is None:
        return Q(IsNull(term.expression, True))
    return Q(Exact(term.expression, _operand(term, value)))
