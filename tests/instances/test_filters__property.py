"""A property of the query language on PostgreSQL: for random instances and random filters, in
the GraphQL-style JSON form (data fields nested under `attributes` or as dotted paths) and in
the legacy `field=operator:value` form, the queryset the list API builds selects exactly the
instances a plain Python reading of the same filter selects.

The Python reading below is written from the documented rules (README "Query language") and
shares no code with `instances.filters`: a number as a string is compared as a number with
stored numbers and as text with stored strings, dates as instants, `like` is a case-insensitive
"contains", a missing value fails every comparison and `ne` / `nin` / `not` are complements."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from instances.filters import parse_filter
from instances.models import Instance

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

MISSING = object()

# Stored strings use lower-case letters and digits: their order is the same in Python and in
# any PostgreSQL collation.
# (Hypothesis favours the first of a list: the telling ones come first.)
WORDS = ["ab", "ba", "a", "10", "9", "100", "2.5", ""]
DATES = [
    "2024-01-01",
    "2024-01-01T10:00:00Z",
    "2024-01-01T12:00:00+03:00",  # 09:00 UTC
    "2024-01-01T10:00",  # no offset: UTC
    "2024-02-29",
    "2024-03-01T00:00:00.5Z",
]
NUMBERS = [-3, 0, 1, 2, 2.5, 9, 10, 100]
STATUSES = {"A": "Active", "B": "Busy", "C": "Completed"}
KEYS = [None, "k1", "k2", "K1", "x-k"]
CREATED = [datetime(2024, 1, day, 12, tzinfo=UTC) for day in (1, 2, 3)]

words = st.sampled_from(WORDS)
stored_values = st.one_of(
    words,
    words,
    words,
    st.sampled_from(DATES),
    st.sampled_from(NUMBERS),
    st.booleans(),
    st.none(),
    st.just(MISSING),
)
instances = st.lists(
    st.fixed_dictionaries(
        {
            "a": stored_values,
            "b": stored_values,
            "cd": stored_values,  # stored as {"c": {"d": value}}
            "status": st.sampled_from(list(STATUSES)),
            "key": st.sampled_from(KEYS),
            "created": st.sampled_from(CREATED),
        }
    ),
    min_size=2,
    max_size=8,
)

DATA_FIELDS = ["a", "b", "c.d"]
DATA_OPS = ["eq", "ne", "gt", "ge", "lt", "le", "like", "startswith", "endswith", "in", "nin"]
# Each date generated, and the same instant spelt otherwise.
SAME_INSTANT = {
    "2024-01-01": "2024-01-01T00:00:00Z",
    "2024-01-01T10:00:00Z": "2024-01-01T13:00:00+03:00",
    "2024-01-01T12:00:00+03:00": "2024-01-01T09:00:00Z",
    "2024-01-01T10:00": "2024-01-01T10:00:00+00:00",
    "2024-02-29": "2024-02-28T23:00:00-01:00",
    "2024-03-01T00:00:00.5Z": "2024-03-01T00:00:00.500Z",
}


def spellings(value: Any) -> list[Any]:
    """Operands naming a stored value in other ways: another case, a part of it, a number in
    another notation (or as a JSON number), a boolean's words, the same instant elsewhere."""
    if value is MISSING or value is None:
        return []
    if isinstance(value, bool):
        word = "true" if value else "false"
        return [word, word.upper()]
    if isinstance(value, int | float):
        return [str(value), f"{float(value)}", f"{value}e0", value]
    if value in SAME_INSTANT:
        return [value, SAME_INSTANT[value]]
    return [value.upper(), value[-1:], value, value[:1]]


def operands_for(rows: list[dict[str, Any]], field: str) -> st.SearchStrategy[Any]:
    """Operands for a condition on `field`: mostly spellings of values the rows hold there."""
    name = "cd" if field == "c.d" else field
    pool = {json.dumps(spelt): spelt for row in rows for spelt in spellings(row[name])}
    fixed = st.sampled_from(["zz", "0", "A", "-3", "1e1", "FALSE", "2024-01-01T09:00:00Z"])
    if not pool:
        return fixed
    held = st.sampled_from(list(pool.values()))
    return st.one_of(held, held, held, fixed)


@st.composite
def data_conditions(draw: Any, rows: list[dict[str, Any]]) -> tuple[str, str, str, Any]:
    field = draw(st.sampled_from(DATA_FIELDS))
    op = draw(st.sampled_from([*DATA_OPS, "between", "isnull"]))
    operands = operands_for(rows, field)
    strings = operands.filter(lambda value: isinstance(value, str))
    if op == "isnull":
        operand: Any = draw(st.booleans())
    elif op in ("in", "nin"):
        operand = draw(st.lists(strings, min_size=1, max_size=3))
    elif op == "between":
        operand = sorted(draw(st.lists(strings, min_size=2, max_size=2)))
    elif op in ("eq", "ne", "gt", "ge", "lt", "le"):
        # Mostly strings (vNext's operands); a number held there also as a JSON number,
        # which is typed strictly.
        operand = draw(operands)
    else:
        operand = draw(strings)
    return ("data", field, op, operand)


@st.composite
def column_conditions(draw: Any) -> tuple[str, str, str, Any]:
    column = draw(st.sampled_from(["status", "key", "createdAt"]))
    if column == "status":
        op = draw(st.sampled_from(["eq", "ne", "in", "nin"]))
        names = st.sampled_from([*STATUSES, *STATUSES.values(), "active"])
        operand: Any = draw(
            st.lists(names, min_size=1, max_size=2) if op in ("in", "nin") else names
        )
    elif column == "key":
        op = draw(st.sampled_from(["eq", "ne", "like", "startswith", "endswith", "in", "nin"]))
        words = st.sampled_from(["k1", "K", "k", "1", "x-"])
        operand = draw(st.lists(words, min_size=1, max_size=2) if op in ("in", "nin") else words)
    else:
        op = draw(st.sampled_from(["eq", "ne", "gt", "ge", "lt", "le"]))
        operand = draw(st.sampled_from(["2024-01-02", "2024-01-02T12:00:00Z", "2024-01-01T13:00"]))
    return ("column", column, op, operand)


def trees_for(rows: list[dict[str, Any]]) -> st.SearchStrategy[Any]:
    """Filters on `rows`: conditions combined with and / or / not."""
    data = data_conditions(rows)
    return st.recursive(
        st.one_of(data, data, column_conditions()),
        lambda children: st.one_of(
            st.tuples(st.just("and"), st.lists(children, min_size=1, max_size=3)),
            st.tuples(st.just("or"), st.lists(children, min_size=1, max_size=3)),
            st.tuples(st.just("not"), children),
        ),
        max_leaves=5,
    )


# --- the Python reading ------------------------------------------------------------------------


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


# Every ISO 8601 string the generators use; anything else is no date.
INSTANTS = {
    *DATES,
    *SAME_INSTANT.values(),
    "2024-01-02",
    "2024-01-02T12:00:00Z",
    "2024-01-01T13:00",
    "2024-01-01T09:00:00Z",
}


def _instant(text: Any) -> datetime | None:
    if not isinstance(text, str) or text not in INSTANTS:
        return None
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _compare(stored: Any, op: str, operand: Any) -> bool:
    """stored <op> operand for eq, gt, ge, lt, le."""
    if stored is MISSING or stored is None:
        return False
    compare = {
        "eq": lambda x, y: x == y,
        "gt": lambda x, y: x > y,
        "ge": lambda x, y: x >= y,
        "lt": lambda x, y: x < y,
        "le": lambda x, y: x <= y,
    }[op]
    stored_is_number = isinstance(stored, int | float) and not isinstance(stored, bool)
    if not isinstance(operand, str):  # a JSON number: numbers only
        return stored_is_number and compare(stored, operand)
    if stored_is_number:
        number = _number(operand)
        return number is not None and compare(stored, number)
    if isinstance(stored, bool):
        return (
            op == "eq"
            and operand.lower() in ("true", "false")
            and (stored == (operand.lower() == "true"))
        )
    if isinstance(stored, str):
        left, right = _instant(stored), _instant(operand)
        if left is not None and right is not None:
            return compare(left, right)
        return compare(stored, operand)
    return False


def _data_holds(stored: Any, op: str, operand: Any) -> bool:
    if op == "isnull":
        return (stored is MISSING or stored is None) == operand
    if op == "ne":
        return not _compare(stored, "eq", operand)
    if op == "in":
        return any(_compare(stored, "eq", item) for item in operand)
    if op == "nin":
        return not any(_compare(stored, "eq", item) for item in operand)
    if op == "between":
        return _compare(stored, "ge", operand[0]) and _compare(stored, "le", operand[1])
    if op in ("like", "startswith", "endswith"):
        if not isinstance(stored, str) or isinstance(stored, bool):
            return False
        if op == "like":
            return operand.lower() in stored.lower()
        return stored.startswith(operand) if op == "startswith" else stored.endswith(operand)
    return _compare(stored, op, operand)


def _status(name: str) -> str:
    return next(
        code for code, label in STATUSES.items() if name.lower() in (code.lower(), label.lower())
    )


def _column_holds(row: dict[str, Any], column: str, op: str, operand: Any) -> bool:
    if column == "status":
        wanted = {_status(name) for name in (operand if isinstance(operand, list) else [operand])}
        inside = row["status"] in wanted
        return inside if op in ("eq", "in") else not inside
    if column == "key":
        key = row["key"]
        if op in ("in", "nin"):
            inside = key in operand
            return inside if op == "in" else not inside
        if op == "ne":
            return key != operand
        if key is None:
            return False
        if op == "eq":
            return key == operand
        if op == "like":
            return operand.lower() in key.lower()
        return key.startswith(operand) if op == "startswith" else key.endswith(operand)
    moment = _instant(operand)
    assert moment is not None
    if op == "ne":
        return row["created"] != moment
    return _compare_instants(row["created"], op, moment)


def _compare_instants(left: datetime, op: str, right: datetime) -> bool:
    return {
        "eq": left == right,
        "gt": left > right,
        "ge": left >= right,
        "lt": left < right,
        "le": left <= right,
    }[op]


def _stored(row: dict[str, Any], field: str) -> Any:
    return row["cd"] if field == "c.d" else row[field]


def holds(tree: Any, row: dict[str, Any]) -> bool:
    """The plain Python reading of a generated filter on one generated instance."""
    kind = tree[0]
    if kind == "and":
        return all(holds(part, row) for part in tree[1])
    if kind == "or":
        return any(holds(part, row) for part in tree[1])
    if kind == "not":
        return not holds(tree[1], row)
    _, field, op, operand = tree
    if kind == "data":
        return _data_holds(_stored(row, field), op, operand)
    return _column_holds(row, field, op, operand)


# --- the two wire forms ------------------------------------------------------------------------


def as_json(tree: Any, *, dotted: bool) -> dict[str, Any]:
    kind = tree[0]
    if kind in ("and", "or"):
        return {kind: [as_json(part, dotted=dotted) for part in tree[1]]}
    if kind == "not":
        return {"not": as_json(tree[1], dotted=dotted)}
    _, field, op, operand = tree
    if kind == "column":
        return {field: {op: operand}}
    if dotted:
        return {f"attributes.{field}": {op: operand}}
    nested: Any = {op: operand}
    for segment in reversed(field.split(".")):
        nested = {segment: nested}
    return {"attributes": nested}


def as_legacy(tree: Any) -> str | None:
    """The legacy form of a single condition whose operands are strings without commas."""
    if tree[0] not in ("data", "column"):
        return None
    _, field, op, operand = tree
    items = operand if isinstance(operand, list) else [operand]
    if op == "isnull":
        items = ["true" if operand else "false"]
    if not all(isinstance(item, str | bool) for item in items) or any(
        "," in str(item) for item in items
    ):
        return None
    if any(isinstance(item, bool) for item in items) and op != "isnull":
        return None
    return f"{field}={op}:{','.join(str(item) for item in items)}"


def _data_of(row: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for name in ("a", "b"):
        if row[name] is not MISSING:
            data[name] = row[name]
    if row["cd"] is not MISSING:
        data["c"] = {"d": row["cd"]}
    return data


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rows=instances, data=st.data(), dotted=st.booleans())
def test_the_database_selects_what_the_python_reading_selects(rows, data, dotted):
    filters = data.draw(st.lists(trees_for(rows), min_size=1, max_size=8), label="filters")
    # And every operator on a few (field, operand) pairs, so that no operator waits for the
    # generator to pick it together with an operand that tells.
    for field in data.draw(st.lists(st.sampled_from(DATA_FIELDS), max_size=3), label="sweep"):
        operand = data.draw(operands_for(rows, field), label=f"operand for {field}")
        for op in ("eq", "ne", "gt", "ge", "lt", "le", "in", "nin"):
            filters.append(("data", field, op, [operand] if op in ("in", "nin") else operand))
        if isinstance(operand, str):
            filters += [("data", field, op, operand) for op in ("like", "startswith", "endswith")]
    Instance.objects.all().delete()
    made = [
        Instance.objects.create(
            domain="core",
            workflow_key=f"prop-{index}",  # business keys may repeat across rows
            workflow_version="1.0.0",
            key=row["key"],
            status=row["status"],
            current_state="s",
            effective_state="s",
            created_at=row["created"],
            etag="e",
            entity_etag="e",
            data=_data_of(row),
        )
        for index, row in enumerate(rows)
    ]
    for tree in filters:
        pairs = zip(made, rows, strict=True)
        expected = {instance.id for instance, row in pairs if holds(tree, row)}
        forms = [json.dumps(as_json(tree, dotted=dotted))]
        legacy = as_legacy(tree)
        if legacy is not None:
            forms.append(legacy)
        for form in forms:
            query = parse_filter(form)
            selected = set(Instance.objects.filter(query).values_list("id", flat=True))
            assert selected == expected, (form, rows)
