"""The instance listing language on real rows: filters in vNext's GraphQL-style JSON and legacy
`field=operator:value` forms and in this runtime's text form, sort, paging and the errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db.models import Q

from instances.engine.errors import Codes, ErrorCode, VNextError
from instances.filters import OPERATORS, parse_filter, parse_page, parse_sort
from instances.models import Instance

pytestmark = pytest.mark.django_db

ALL = {"i1", "i2", "i3", "i4", "i5", "i6"}


def at(day: int) -> datetime:
    return datetime(2024, 1, day, tzinfo=UTC)


@pytest.fixture
def rows() -> dict[str, Instance]:
    """Six instances varied in every filterable column; i5 and i6 share `created_at`."""
    specs: dict[str, dict[str, Any]] = {
        "i1": {
            "key": "k1",
            "status": "A",
            "current_state": "draft",
            "created_at": at(1),
            "data": {
                "category": "finance",
                "amount": 100,
                "flag": True,
                "owner": {"name": "ann"},
                "tag": "a_b",
            },
        },
        "i2": {
            "key": "k2",
            "status": "A",
            "current_state": "active-state",
            "created_at": at(2),
            "data": {"category": "finance", "amount": 250.5, "owner": {"name": "bob"}},
        },
        "i3": {
            "key": "k3",
            "status": "C",
            "current_state": "done",
            "created_at": at(3),
            "completed_at": at(6),
            "data": {"category": "hr", "amount": "100"},
        },
        "i4": {
            "key": None,
            "status": "F",
            "current_state": "active-state",
            "created_at": at(4),
            "data": {"category": "Finance", "amount": 5, "in": "weird"},
        },
        "i5": {
            "key": "k5",
            "status": "P",
            "current_state": "review",
            "created_at": at(5),
            "data": {"amount": True, "note": "100%"},
        },
        "i6": {
            "key": "k6",
            "status": "B",
            "current_state": "draft",
            "created_at": at(5),
            "data": {"category": None, "amount": 1000, "title": "it's"},
        },
    }
    return {
        label: Instance.objects.create(
            domain="core",
            workflow_key="wf",
            workflow_version="1.0.0",
            effective_state=spec["current_state"],
            etag="e",
            entity_etag="e",
            **spec,
        )
        for label, spec in specs.items()
    }


def matched(rows: dict[str, Instance], raw: str | dict[str, Any]) -> set[str]:
    """Labels of the rows a filter (JSON given as a dict, or text) selects."""
    query = parse_filter(json.dumps(raw) if isinstance(raw, dict) else raw)
    label_of = {instance.id: label for label, instance in rows.items()}
    return {label_of[instance.id] for instance in Instance.objects.filter(query)}


def ordered(rows: dict[str, Instance], sort: str | None) -> list[str]:
    label_of = {instance.id: label for label, instance in rows.items()}
    return [label_of[instance.id] for instance in Instance.objects.order_by(*parse_sort(sort))]


def by_id(rows: dict[str, Instance], labels: set[str], *, descending: bool = False) -> list[str]:
    return sorted(labels, key=lambda label: rows[label].id, reverse=descending)


def raises(code: ErrorCode, raw: str) -> VNextError:
    with pytest.raises(VNextError) as caught:
        parse_filter(raw)
    assert caught.value.error == code
    assert caught.value.http_status == 400
    return caught.value


# --- operators on model columns --------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"status": {"eq": "A"}}, {"i1", "i2"}),
        # Status by name or letter, in any case (GetInstances tasks write "active").
        ({"status": {"eq": "Active"}}, {"i1", "i2"}),
        ({"status": {"eq": "active"}}, {"i1", "i2"}),
        ({"status": {"in": ["Active", "Busy"]}}, {"i1", "i2", "i6"}),
        ({"status": {"nin": ["Completed", "Faulted"]}}, {"i1", "i2", "i5", "i6"}),
        ({"status": {"ne": "A"}}, {"i3", "i4", "i5", "i6"}),
        ({"key": {"ne": "k1"}}, {"i2", "i3", "i4", "i5", "i6"}),  # NULL key counts as "not k1"
        ({"key": {"eq": None}}, {"i4"}),
        ({"key": {"ne": None}}, {"i1", "i2", "i3", "i5", "i6"}),
        ({"key": {"isnull": True}}, {"i4"}),
        ({"completedAt": {"isnull": False}}, {"i3"}),
        ({"completedAt": {"isnull": True}}, ALL - {"i3"}),
        ({"createdAt": {"gt": "2024-01-04T00:00:00Z"}}, {"i5", "i6"}),
        ({"createdAt": {"ge": "2024-01-04T00:00:00Z"}}, {"i4", "i5", "i6"}),
        ({"createdAt": {"lt": "2024-01-02T00:00:00+00:00"}}, {"i1"}),
        ({"createdAt": {"le": "2024-01-02T00:00:00"}}, {"i1", "i2"}),  # no offset: UTC
        ({"createdAt": {"le": "2024-01-02T02:00:00+03:00"}}, {"i1"}),  # 2023-01-01T23:00Z
        # A date alone is its midnight, UTC.
        ({"createdAt": {"gt": "2024-01-04"}}, {"i5", "i6"}),
        ({"createdAt": {"eq": "2024-01-05"}}, {"i5", "i6"}),
        ({"createdAt": {"between": ["2024-01-02", "2024-01-03"]}}, {"i2", "i3"}),
        (
            {"createdAt": {"between": ["2024-01-02T00:00:00Z", "2024-01-03T00:00:00Z"]}},
            {"i2", "i3"},
        ),
        ({"createdAt": {"ge": "2024-01-02T00:00:00Z", "lt": "2024-01-04T00:00:00Z"}}, {"i2", "i3"}),
        ({"completedAt": {"lt": "2024-02-01T00:00:00Z"}}, {"i3"}),
        ({"completedAt": {"ne": "2024-01-06"}}, ALL - {"i3"}),
        ({"modifiedAt": {"lt": "2000-01-01T00:00:00Z"}}, set()),
        # `like` is "contains", case-insensitive; `%` and `_` are plain characters.
        ({"state": {"like": "ACTIVE"}}, {"i2", "i4"}),
        ({"currentState": {"like": "view"}}, {"i5"}),
        ({"currentState": {"like": "raf"}}, {"i1", "i6"}),
        ({"currentState": {"like": "Active"}}, {"i2", "i4"}),
        ({"currentState": {"like": "active%"}}, set()),
        ({"currentState": {"like": "dr_ft"}}, set()),
        ({"currentState": {"match": "e-s"}}, {"i2", "i4"}),  # `match` is `like`
        ({"currentState": {"like": "active.state"}}, set()),  # regex characters are literal
        ({"currentState": {"startswith": "dr"}}, {"i1", "i6"}),
        ({"currentState": {"startswith": "Dr"}}, set()),  # case-sensitive
        ({"currentState": {"endswith": "-state"}}, {"i2", "i4"}),
        ({"currentState": {"endswith": "-State"}}, set()),
        ({"effectiveState": {"eq": "review"}}, {"i5"}),
        ({"key": {"in": ["k1", "k5"]}}, {"i1", "i5"}),
        ({"key": {"nin": ["k1", "k2"]}}, {"i3", "i4", "i5", "i6"}),
        ({"flow": {"eq": "wf"}}, ALL),
        ({"flow": {"like": "W"}}, ALL),
        ({"flow": {"ne": "wf"}}, set()),
        # Effective state type and subtype by vNext's codes (or names): all are 1 initial, 0 none.
        ({"effectiveStateType": {"eq": "1"}}, ALL),
        ({"effectiveStateType": {"eq": 1}}, ALL),
        ({"effectiveStateType": {"eq": "initial"}}, ALL),
        ({"effectiveStateType": {"gt": "1"}}, set()),
        ({"effectiveStateType": {"in": ["2", "3"]}}, set()),
        ({"effectiveStateSubType": {"eq": "0"}}, ALL),
        ({"effectiveStateSubType": {"ne": "6"}}, ALL),
        ({"effectiveStateSubType": {"ne": "none"}}, set()),
        ({"effectiveStateSubType": {"le": "5"}}, ALL),
        # No instance of this runtime is transient.
        ({"isTransient": {"eq": "false"}}, ALL),
        ({"isTransient": {"eq": True}}, set()),
        ({"isTransient": {"ne": "true"}}, ALL),
        ({}, ALL),
    ],
)
def test_column_operators_select_the_expected_rows(
    rows: dict[str, Instance], raw: dict[str, Any], expected: set[str]
) -> None:
    assert matched(rows, raw) == expected


def test_column_names_match_in_any_case(rows: dict[str, Instance]) -> None:
    assert matched(rows, {"Status": {"EQ": "a"}, "CURRENTSTATE": {"Eq": "draft"}}) == {"i1"}


def test_id_column_takes_uuids(rows: dict[str, Instance]) -> None:
    wanted = [str(rows["i2"].id), str(rows["i5"].id)]
    assert matched(rows, {"id": {"eq": wanted[0]}}) == {"i2"}
    assert matched(rows, {"id": {"in": wanted}}) == {"i2", "i5"}
    assert matched(rows, {"id": {"nin": wanted}}) == ALL - {"i2", "i5"}


# --- operators on data fields ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"attributes": {"category": {"eq": "finance"}}}, {"i1", "i2"}),
        ({"attributes.category": {"eq": "finance"}}, {"i1", "i2"}),
        ({"attributes.category": {"ne": "finance"}}, {"i3", "i4", "i5", "i6"}),
        # A JSON number matches numbers only; a string operand is compared by the stored type.
        ({"attributes.amount": {"eq": 100}}, {"i1"}),
        ({"attributes.amount": {"eq": "100"}}, {"i1", "i3"}),
        ({"attributes.amount": {"eq": "1e2"}}, {"i1"}),
        ({"attributes.amount": {"eq": 100.0}}, {"i1"}),
        ({"attributes.amount": {"eq": True}}, {"i5"}),
        ({"attributes.amount": {"eq": "true"}}, {"i5"}),
        ({"attributes.flag": {"eq": True}}, {"i1"}),
        ({"attributes.flag": {"eq": "TRUE"}}, {"i1"}),
        ({"attributes.amount": {"gt": 99}}, {"i1", "i2", "i6"}),
        # "99" against the string "100" compares as text ("1" < "9").
        ({"attributes.amount": {"gt": "99"}}, {"i1", "i2", "i6"}),
        ({"attributes.amount": {"ge": 100}}, {"i1", "i2", "i6"}),
        ({"attributes.amount": {"lt": 100}}, {"i4"}),
        ({"attributes.amount": {"lt": "100"}}, {"i4"}),
        ({"attributes.amount": {"le": 100}}, {"i1", "i4"}),
        ({"attributes.amount": {"le": "100"}}, {"i1", "i3", "i4"}),
        ({"attributes.amount": {"between": [5, 250.5]}}, {"i1", "i2", "i4"}),
        ({"attributes.amount": {"between": ["5", "250.5"]}}, {"i1", "i2", "i4"}),
        ({"attributes.amount": {"lt": "z"}}, {"i3"}),  # "z" is no number: strings only
        ({"attributes.category": {"between": ["h", "z"]}}, {"i3"}),
        ({"attributes.category": {"in": ["finance", "hr"]}}, {"i1", "i2", "i3"}),
        ({"attributes.category": {"nin": ["finance", "hr"]}}, {"i4", "i5", "i6"}),
        ({"attributes.amount": {"in": [5, "100"]}}, {"i1", "i3", "i4"}),
        ({"attributes.category": {"isnull": True}}, {"i5", "i6"}),  # missing, JSON null
        ({"attributes.category": {"isnull": "false"}}, {"i1", "i2", "i3", "i4"}),
        ({"attributes.category": {"eq": None}}, {"i5", "i6"}),
        ({"attributes.category": {"like": "NANCE"}}, {"i1", "i2", "i4"}),
        ({"attributes.category": {"like": "fi_ance"}}, set()),
        ({"attributes.tag": {"like": "a_b"}}, {"i1"}),
        ({"attributes.note": {"like": "100%"}}, {"i5"}),
        ({"attributes.amount": {"like": "10"}}, {"i3"}),  # strings only, not the number 100
        ({"attributes.category": {"startswith": "fin"}}, {"i1", "i2"}),  # not "Finance"
        ({"attributes.note": {"startswith": "100%"}}, {"i5"}),
        ({"attributes.note": {"endswith": "0%"}}, {"i5"}),
        ({"attributes.amount": {"startswith": "10"}}, {"i3"}),
        ({"attributes.category": {"endswith": "nce"}}, {"i1", "i2", "i4"}),
        ({"attributes.owner.name": {"eq": "bob"}}, {"i2"}),
        ({"attributes": {"owner": {"name": {"eq": "bob"}}}}, {"i2"}),
        ({"attributes": {"owner.name": {"eq": "bob"}}}, {"i2"}),
        ({"attributes.owner": {"name": {"eq": "bob"}}}, {"i2"}),
        ({"attributes.owner.name": {"isnull": False}}, {"i1", "i2"}),
        ({"attributes.owner": {"eq": {"name": "ann"}}}, {"i1"}),
        ({"attributes.in": {"eq": "weird"}}, {"i4"}),  # a key named like a lookup stays a key
        ({"attributes": {"in": {"eq": "weird"}}}, {"i4"}),
        ({"attributes.missing": {"ne": 1}}, ALL),
        # Several fields under `attributes` all hold.
        ({"attributes": {"category": {"eq": "finance"}, "amount": {"gt": "200"}}}, {"i2"}),
    ],
)
def test_data_operators(rows: dict[str, Instance], raw: dict[str, Any], expected: set[str]) -> None:
    assert matched(rows, raw) == expected


# --- combinators -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"status": {"eq": "A"}, "currentState": {"eq": "draft"}}, {"i1"}),
        ({"and": [{"status": {"eq": "A"}}, {"attributes.amount": {"gt": 200}}]}, {"i2"}),
        ({"AND": [{"status": {"eq": "A"}}, {"attributes": {"amount": {"gt": "200"}}}]}, {"i2"}),
        ({"or": [{"status": {"eq": "C"}}, {"key": {"isnull": True}}]}, {"i3", "i4"}),
        ({"not": {"status": {"in": ["A", "B"]}}}, {"i3", "i4", "i5"}),
        # `not` is an exact complement: rows without the attribute are included.
        ({"not": {"attributes.category": {"eq": "finance"}}}, {"i3", "i4", "i5", "i6"}),
        ({"not": {"attributes.amount": {"gt": 99}}}, {"i3", "i4", "i5"}),
        ({"not": {"key": {"eq": "k1"}}}, {"i2", "i3", "i4", "i5", "i6"}),
        (
            {
                "or": [
                    {"status": {"eq": "C"}},
                    {"and": [{"status": {"eq": "A"}}, {"not": {"state": {"eq": "draft"}}}]},
                ]
            },
            {"i2", "i3"},
        ),
        (
            {
                "state": {"ne": "review"},
                "not": {"or": [{"attributes.category": {"eq": "finance"}}, {"key": {"eq": None}}]},
            },
            {"i3", "i6"},
        ),
    ],
)
def test_combinators_nest(
    rows: dict[str, Instance], raw: dict[str, Any], expected: set[str]
) -> None:
    assert matched(rows, raw) == expected


# --- legacy form -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("status=eq:Active", {"i1", "i2"}),
        ("status=in:A,Completed", {"i1", "i2", "i3"}),
        ("key=nin:k1,k2", {"i3", "i4", "i5", "i6"}),
        # A name that is no column is a data path, `attributes.` or `attributes=` or not.
        ("category=eq:finance", {"i1", "i2"}),
        ("attributes.category=eq:finance", {"i1", "i2"}),
        ("attributes=category=eq:finance", {"i1", "i2"}),
        ("owner.name=eq:bob", {"i2"}),
        ("amount=gt:99", {"i1", "i2", "i6"}),
        ("amount=between:5,250.5", {"i1", "i2", "i4"}),
        ("amount=eq:100", {"i1", "i3"}),
        ("category=like:NANCE", {"i1", "i2", "i4"}),
        ("category=isnull:true", {"i5", "i6"}),
        ("createdAt=between:2024-01-02,2024-01-03", {"i2", "i3"}),
        ("title=eq:it's", {"i6"}),
        ("note=eq:100%", {"i5"}),
        ("state=EQ:draft", {"i1", "i6"}),
        ("state=eq:draft and more", set()),  # the value is verbatim, spaces included
    ],
)
def test_legacy_form(rows: dict[str, Instance], raw: str, expected: set[str]) -> None:
    assert matched(rows, raw) == expected


# --- text form (this runtime's extension) -----------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("attributes.category eq 'finance'", {"i1", "i2"}),
        ('attributes.category eq "finance"', {"i1", "i2"}),
        ("status eq 'A' and currentState eq 'active-state'", {"i2"}),
        ("status EQ 'A' AND state eq 'active-state'", {"i2"}),
        ("status eq 'Active'", {"i1", "i2"}),
        ("  status ne 'A'   and   key ne null  ", {"i3", "i5", "i6"}),
        ("attributes.amount gt 99", {"i1", "i2", "i6"}),
        ("attributes.amount eq '100'", {"i1", "i3"}),
        ("attributes.amount ge -1.5e1 and attributes.amount lt 6", {"i4"}),
        ("attributes.flag eq true", {"i1"}),
        ("key eq null", {"i4"}),
        ("completedAt isnull false", {"i3"}),
        ("attributes.title eq 'it''s'", {"i6"}),
        ('attributes.title eq "it\'s"', {"i6"}),
        ("attributes.note eq '100%' and state eq 'review'", {"i5"}),
        ("status in ('A', 'C')", {"i1", "i2", "i3"}),
        ("status nin ('A','C')", {"i4", "i5", "i6"}),
        ("state like 'a%, and %'", set()),
        ("createdAt between ('2024-01-02T00:00:00Z', '2024-01-03T00:00:00Z')", {"i2", "i3"}),
        ("state like 'ACTIVE' and attributes.category eq 'Finance'", {"i4"}),
        # A text-form value may hold `=x:`: no legacy filter starts with `field op`.
        ("attributes.note eq 'a=eq:b'", set()),
    ],
)
def test_text_form(rows: dict[str, Instance], raw: str, expected: set[str]) -> None:
    assert matched(rows, raw) == expected


def test_all_forms_agree(rows: dict[str, Instance]) -> None:
    text = "status eq 'A' and attributes.amount lt 200"
    json_form = {"status": {"eq": "A"}, "attributes": {"amount": {"lt": "200"}}}
    assert matched(rows, text) == matched(rows, json_form) == {"i1"}
    assert matched(rows, "amount=lt:200") == {"i1", "i3", "i4"}  # "100" < "200" as text too


@pytest.mark.parametrize("raw", [None, "", "   "])
def test_empty_filter_is_no_filter(raw: str | None) -> None:
    assert parse_filter(raw) == Q()


# --- sort ------------------------------------------------------------------------------------


def test_default_sort_is_newest_first_with_an_id_tie_break(rows: dict[str, Instance]) -> None:
    assert parse_sort(None) == ["-created_at", "-id"]
    assert parse_sort("  ") == ["-created_at", "-id"]
    tied = by_id(rows, {"i5", "i6"}, descending=True)
    assert ordered(rows, None) == [*tied, "i4", "i3", "i2", "i1"]


@pytest.mark.parametrize(
    "sort",
    [
        "createdAt",
        '{"field": "createdAt", "direction": "asc"}',
        '[{"field": "createdAt"}]',
        '{"field": "createdAt", "direction": "ASC"}',
    ],
)
def test_sort_ascending_breaks_ties_by_ascending_id(rows: dict[str, Instance], sort: str) -> None:
    assert parse_sort(sort) == ["created_at", "id"]
    assert ordered(rows, sort) == ["i1", "i2", "i3", "i4", *by_id(rows, {"i5", "i6"})]


@pytest.mark.parametrize("sort", ["-createdAt", '{"field": "createdAt", "direction": "desc"}'])
def test_sort_descending(rows: dict[str, Instance], sort: str) -> None:
    assert parse_sort(sort) == ["-created_at", "-id"]
    tied = by_id(rows, {"i5", "i6"}, descending=True)
    assert ordered(rows, sort) == [*tied, "i4", "i3", "i2", "i1"]


def test_sort_by_several_columns(rows: dict[str, Instance]) -> None:
    assert parse_sort("status, -createdAt") == ["status", "-created_at", "id"]
    assert ordered(rows, "status,-createdAt") == ["i2", "i1", "i6", "i3", "i4", "i5"]
    as_json = '[{"field": "state"}, {"field": "createdAt", "direction": "desc"}]'
    assert ordered(rows, as_json) == ["i4", "i2", "i3", "i6", "i1", "i5"]
    # vNext's documented spelling of several keys.
    documented = (
        '{"fields": [{"field": "status", "direction": "asc"}, '
        '{"field": "createdAt", "direction": "desc"}]}'
    )
    assert ordered(rows, documented) == ["i2", "i1", "i6", "i3", "i4", "i5"]


def test_sort_names_in_the_get_instances_task_spelling(rows: dict[str, Instance]) -> None:
    assert parse_sort("-CreatedAt") == ["-created_at", "-id"]
    assert parse_sort("UpdatedAt") == ["updated_at", "id"]
    assert parse_sort("Key")[0].descending is False  # type: ignore[union-attr]


def test_sort_by_id_adds_no_second_tie_break() -> None:
    assert parse_sort("-id") == ["-id"]
    assert parse_sort("state,id") == ["current_state", "id"]


def test_sort_puts_missing_values_last_in_both_directions(rows: dict[str, Instance]) -> None:
    rest = ALL - {"i1", "i2"}
    assert ordered(rows, "attributes.owner.name") == ["i1", "i2", *by_id(rows, rest)]
    assert ordered(rows, "-attributes.owner.name") == [
        "i2",
        "i1",
        *by_id(rows, rest, descending=True),
    ]
    assert ordered(rows, "key")[-1] == "i4"
    assert ordered(rows, "-key")[-1] == "i4"
    assert ordered(rows, "-completedAt")[0] == "i3"


@pytest.mark.parametrize(
    ("sort", "code"),
    [
        ("nope", Codes.FILTER_INVALID_COLUMN),
        ("attributes.a..b", Codes.FILTER_INVALID_COLUMN),
        ("isTransient", Codes.FILTER_INVALID_COLUMN),
        ('{"fields": []}', Codes.FILTER_INVALID),
        ('{"field": "nope"}', Codes.FILTER_INVALID_COLUMN),
        ("createdAt,,key", Codes.FILTER_INVALID),
        ('{"field": "createdAt", "direction": "up"}', Codes.FILTER_INVALID),
        ('{"field": "createdAt", "order": "asc"}', Codes.FILTER_INVALID),
        ('[{"direction": "asc"}]', Codes.FILTER_INVALID),
        ('{"field": ', Codes.FILTER_INVALID),
    ],
)
def test_bad_sort_is_refused(sort: str, code: ErrorCode) -> None:
    with pytest.raises(VNextError) as caught:
        parse_sort(sort)
    assert caught.value.error == code


# --- paging ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("page", "page_size", "expected"),
    [
        (None, None, (1, 10)),
        ("1", "1", (1, 1)),
        ("1000", "100", (1000, 100)),
        (" 7 ", "25", (7, 25)),
    ],
)
def test_page_bounds_accepted(
    page: str | None, page_size: str | None, expected: tuple[int, int]
) -> None:
    assert parse_page(page, page_size) == expected


@pytest.mark.parametrize(
    ("page", "page_size", "named"),
    [
        ("0", None, "page"),
        ("1001", None, "page"),
        ("-1", None, "page"),
        ("1.5", None, "page"),
        ("abc", None, "page"),
        (None, "0", "pageSize"),
        (None, "101", "pageSize"),
        (None, "ten", "pageSize"),
        # Given but empty is not "absent": the schema says an integer.
        ("", None, "page"),
        (None, " ", "pageSize"),
    ],
)
def test_page_out_of_range_or_not_an_integer(
    page: str | None, page_size: str | None, named: str
) -> None:
    with pytest.raises(VNextError) as caught:
        parse_page(page, page_size)
    assert caught.value.error == Codes.FILTER_INVALID
    assert named in caught.value.detail


def test_pages_walk_the_stable_order(rows: dict[str, Instance]) -> None:
    everything = ordered(rows, "createdAt")
    page, size = parse_page("2", "4")
    ordering = Instance.objects.order_by(*parse_sort("createdAt"))
    window = ordering[(page - 1) * size : page * size]
    label_of = {instance.id: label for label, instance in rows.items()}
    assert [label_of[instance.id] for instance in window] == everything[4:]


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ('{"nope": {"eq": 1}}', "'nope' is not a valid Instance column"),
        ("nope eq 'x'", "nope"),
        ('{"attributes..x": {"eq": 1}}', "attributes..x"),
        ('{"attributes.": {"eq": 1}}', "attributes."),
        ('{"attributes": {"a\\u0001b": {"eq": 1}}}', "control"),
        ('{"or": [{"status": {"eq": "A"}}, {"Statuss": {"eq": "A"}}]}', "Statuss"),
    ],
)
def test_unknown_column_or_bad_path(raw: str, named: str) -> None:
    error = raises(Codes.FILTER_INVALID_COLUMN, raw)
    assert named in error.detail
    assert error.extra["validColumns"][:3] == ["key", "flow", "status"]


def test_a_data_key_may_hold_any_character_but_control_ones(rows: dict[str, Instance]) -> None:
    rows["i1"].data["a$b c"] = {"x.y": 1}
    rows["i1"].save()
    assert matched(rows, {"attributes": {"a$b c": {"x.y": {"eq": 1}}}}) == set()  # dots split
    assert matched(rows, {"attributes": {"a$b c": {"eq": {"x.y": 1}}}}) == {"i1"}


@pytest.mark.parametrize(
    ("raw", "named", "supported"),
    [
        ('{"status": {"regex": "A"}}', "'regex' operator is not supported", None),
        ("status equals 'A'", "equals", None),
        ("status=regex:A", "regex", None),
        ('{"not": {"key": {"contains": "k"}}}', "contains", None),
        ('{"attributes": {"amount": {"regex": "x"}}}', "'regex' operator is not supported", None),
        (
            '{"createdAt": {"like": "2024"}}',
            "on 'createdAt'",
            ["eq", "ne", "gt", "ge", "lt", "le", "between"],
        ),
        ('{"status": {"gt": "A"}}', "on 'status'", ["eq", "ne", "in", "nin"]),
        (
            '{"key": {"gt": "k3"}}',
            "on 'key'",
            ["eq", "ne", "like", "startswith", "endswith", "in", "nin", "isnull"],
        ),
        ('{"id": {"startswith": "a"}}', "startswith", ["eq", "ne", "in", "nin"]),
        ('{"isTransient": {"in": ["true"]}}', "in", ["eq", "ne"]),
    ],
)
def test_unsupported_operator(raw: str, named: str, supported: list[str] | None) -> None:
    error = raises(Codes.FILTER_UNSUPPORTED_OPERATOR, raw)
    assert named in error.detail
    assert error.extra["supportedOperators"] == (supported or list(OPERATORS))


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ("{", "Valid JSON expected"),
        ('{"status": {"eq": "A"}, "status": {"eq": "C"}}', "duplicate"),
        ('{"attributes.amount": {"eq": NaN}}', "NaN"),
        ("[]", "object"),
        ('{"status": "A"}', "status"),
        ('{"status": {}}', "status"),
        ('{"attributes": {"eq": 1}}', "'attributes.eq' expects an object of operators"),
        ('{"attributes": {"customerId": "C-1"}}', "customerId"),
        ('{"attributes": {}}', "attributes"),
        ('{"and": {"status": {"eq": "A"}}}', "and"),
        ('{"or": []}', "or"),
        ('{"not": {}}', "{}"),
        ('{"not": [{"status": {"eq": "A"}}]}', "status"),
        ('{"createdAt": {"between": ["2024-01-01T00:00:00Z"]}}', "between"),
        ('{"attributes.amount": {"between": [1, 2, 3]}}', "between"),
        ('{"attributes.amount": {"between": 1}}', "between"),
        ('{"attributes.amount": {"between": [1, "z"]}}', "same type"),
        ('{"createdAt": {"gt": "yesterday"}}', "yesterday"),
        ('{"createdAt": {"gt": "2024-13-01T00:00:00Z"}}', "2024-13-01"),
        ('{"createdAt": {"gt": "2023-02-29"}}', "2023-02-29"),
        ('{"createdAt": {"gt": 1704067200}}', "createdAt"),
        ('{"id": {"eq": "not-a-uuid"}}', "not-a-uuid"),
        ('{"status": {"in": []}}', "non-empty list"),
        ('{"status": {"in": "A"}}', "non-empty list"),
        ('{"status": {"in": ["A", null]}}', "string"),
        ('{"status": {"eq": "Running"}}', "Running"),
        ('{"status": {"eq": 1}}', "status"),
        ('{"status": {"eq": null}}', "always has a value"),
        ('{"effectiveStateSubType": {"eq": "9"}}', "9"),
        ('{"key": {"isnull": "yes"}}', "isnull"),
        ('{"attributes.amount": {"gt": true}}', "attributes.amount"),
        ('{"attributes.amount": {"in": [1, null]}}', "isnull"),
        ('{"attributes.name": {"like": 5}}', "like"),
        ("category=isnull:maybe", "isnull"),
        ("status eq A", "status eq A"),
        ("status eq 'A' or status eq 'C'", "or status"),
        ("status eq 'A' and", "and"),
        ("status eq 'A'x", "x"),
        ("attributes.amount eq 1e999", "1e999"),
        ("status eq ('A')", "status"),
        ("".join(['{"not": '] * 20) + '{"status": {"eq": "A"}}' + "}" * 20, "nested"),
        ('{"not": ' * 100_000 + "{}" + "}" * 100_000, "the limit is 5000 characters"),
        ('{"groupBy": {"field": "status"}}', "groupBy is answered by the instance list"),
    ],
)
def test_invalid_filter(raw: str, named: str) -> None:
    assert named in raises(Codes.FILTER_INVALID, raw).detail


def test_error_codes_are_public_and_400() -> None:
    assert (Codes.FILTER_INVALID.code, Codes.FILTER_INVALID.http_status) == ("invalid_filter", 400)
    assert Codes.FILTER_UNSUPPORTED_OPERATOR.code == "unsupported_operator"
    assert Codes.FILTER_INVALID_COLUMN.code == "invalid_column"
