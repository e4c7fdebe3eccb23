"""The vNext query language of `GET …/instances?filter=` built in Python: the GraphQL-style JSON
the server parses (instance columns at the top level, data fields under `attributes`, `and` /
`or` / `not`), from expressions such as `column("status").eq("Active") & data("amount").gt(500)`.

A filter may also be given as the server takes it: a JSON object (dict), its text, or the legacy
`field=operator:value` string; `filter_text` turns any of them into the parameter's value."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# The instance columns the server filters on (anything else is a data field).
COLUMNS = (
    "key",
    "flow",
    "status",
    "currentState",
    "state",
    "effectiveState",
    "effectiveStateType",
    "effectiveStateSubType",
    "createdAt",
    "modifiedAt",
    "completedAt",
    "isTransient",
)


@dataclass(frozen=True)
class Filter:
    """A filter expression: `&` (and), `|` (or) and `~` (not) combine them."""

    tree: dict[str, Any]

    def __and__(self, other: Filter) -> Filter:
        return Filter({"and": [*_parts(self, "and"), *_parts(other, "and")]})

    def __or__(self, other: Filter) -> Filter:
        return Filter({"or": [*_parts(self, "or"), *_parts(other, "or")]})

    def __invert__(self) -> Filter:
        return Filter({"not": self.tree})

    def to_json(self) -> dict[str, Any]:
        """The filter as the server's JSON object."""
        return self.tree

    def __str__(self) -> str:
        return json.dumps(self.tree, separators=(",", ":"))


def _parts(expression: Filter, joiner: str) -> list[dict[str, Any]]:
    # (a & b) & c is one `and` of three, not nested ands: shorter, same meaning.
    tree = expression.tree
    if list(tree) == [joiner]:
        return list(tree[joiner])
    return [tree]


@dataclass(frozen=True)
class Field:
    """An instance column or a data field, awaiting its operator."""

    name: str
    is_data: bool

    def _condition(self, operator: str, operand: Any) -> Filter:
        test = {operator: operand}
        if self.is_data:
            return Filter({"attributes": {self.name: test}})
        return Filter({self.name: test})

    def eq(self, value: Any) -> Filter:
        """Equal to `value` (`None`: the field is missing or null)."""
        return self._condition("eq", value)

    def ne(self, value: Any) -> Filter:
        """Not equal to `value`."""
        return self._condition("ne", value)

    def gt(self, value: Any) -> Filter:
        """Greater than `value` (numbers compare as numbers, strings as strings)."""
        return self._condition("gt", value)

    def ge(self, value: Any) -> Filter:
        """Greater than or equal to `value`."""
        return self._condition("ge", value)

    def lt(self, value: Any) -> Filter:
        """Less than `value`."""
        return self._condition("lt", value)

    def le(self, value: Any) -> Filter:
        """Less than or equal to `value`."""
        return self._condition("le", value)

    def between(self, low: Any, high: Any) -> Filter:
        """From `low` to `high`, both included (two numbers, or two strings)."""
        return self._condition("between", [low, high])

    def like(self, text: str) -> Filter:
        """Contains `text`, case-insensitive."""
        return self._condition("like", text)

    def startswith(self, text: str) -> Filter:
        """Starts with `text`."""
        return self._condition("startswith", text)

    def endswith(self, text: str) -> Filter:
        """Ends with `text`."""
        return self._condition("endswith", text)

    def in_(self, values: Sequence[Any]) -> Filter:
        """One of `values`."""
        return self._condition("in", list(values))

    def nin(self, values: Sequence[Any]) -> Filter:
        """None of `values`."""
        return self._condition("nin", list(values))

    def isnull(self, null: bool = True) -> Filter:
        """Missing or null (`null=False`: present and not null)."""
        return self._condition("isnull", null)


def column(name: str) -> Field:
    """An instance column (`status`, `currentState`, `createdAt`, `key`…; see `COLUMNS`).
    Statuses by name (`Active`) or letter (`A`)."""
    return Field(name, is_data=False)


def data(path: str) -> Field:
    """A field of the instance's data; a dotted path reaches into nested objects
    (`customer.segment`)."""
    return Field(path, is_data=True)


def status(*names: str) -> Filter:
    """The instance's status is one of `names` (`"Active"`, `"Completed"`, or the letters)."""
    if len(names) == 1:
        return column("status").eq(names[0])
    return column("status").in_(names)


FilterLike = Filter | dict[str, Any] | str


def filter_text(expression: FilterLike) -> str:
    """The `filter` parameter's value for a `Filter`, a JSON object, or a string taken as is
    (JSON text, or the legacy `field=operator:value`)."""
    if isinstance(expression, Filter):
        return str(expression)
    if isinstance(expression, dict):
        return json.dumps(expression, separators=(",", ":"))
    return expression


def sort_text(*fields: str) -> str:
    """The `sort` parameter for fields in order, each `-name` for descending
    (`sort_text("-createdAt", "key")`); data fields as `attributes.<path>`."""
    keys = [
        {"field": name[1:], "direction": "desc"}
        if name.startswith("-")
        else {"field": name, "direction": "asc"}
        for name in fields
    ]
    return json.dumps({"fields": keys}, separators=(",", ":"))
