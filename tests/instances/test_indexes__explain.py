"""The search indexes serve the query language (PostgreSQL): after `indexes_apply`, the plan of
each listing query names the index built for it — `eq`, ranges (a string operand on a number
field too: one range per typed branch), `in`, `isnull`, sorts both ways, `like` /
`startswith` / `endswith` (trigram), date ranges, nested fields and the instance columns.
Asserted on the plan, on a small table, with `SET LOCAL enable_seqscan = off` asking whether
an index can serve the query at all (the timings at a million rows are `bench/`'s), for
conditions a search would ask (a few rows): with the planner statistics the plan adds,
PostgreSQL rightly reads a condition most rows meet in the list's own order instead. And the
answers through the indexes stay exactly right."""

from __future__ import annotations

import json
import re
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, transaction

from instances.filters import parse_filter, parse_sort
from instances.index_plans import index_plan
from instances.indexes import ALL_WORKFLOWS, Access
from instances.models import Instance
from tests.instances.indexed import (
    BASE,
    DOMAIN,
    FLOW,
    drop_search_indexes,
    make_instances,
    publish_indexed,
)
from workflows.models import Component

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]
ROWS = 2000
_SCANNED = re.compile(
    r"(?:Index Scan|Index Only Scan|Bitmap Index Scan)(?: Backward)? (?:using|on) (\w+)"
)


@pytest.fixture(scope="module")
def names(django_db_setup: Any, django_db_blocker: Any) -> Any:
    """The workflow, its instances and every search index, built once for the module and
    committed (indexes are built concurrently, outside any transaction; each test's own writes
    roll back): `{(scope, target, serves): index name}`."""
    with django_db_blocker.unblock():
        before = set(Component.objects.values_list("pk", flat=True))
        publish_indexed()
        made = [row.pk for row in make_instances(ROWS)]
        call_command("indexes_apply", stdout=StringIO())
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE instances_instance")
        found = {
            (item.spec.scope, item.spec.target, str(item.spec.serves)): item.spec.name
            for item in index_plan().indexes
        }
    yield found
    with django_db_blocker.unblock():
        drop_search_indexes()
        Instance.objects.filter(pk__in=made).delete()
        Component.objects.exclude(pk__in=before).delete()


def field(target: str, serves: Access) -> tuple[str, str, str]:
    return (f"{DOMAIN}/{FLOW}", target, str(serves))


def column(target: str, serves: str) -> tuple[str, str, str]:
    return (ALL_WORKFLOWS, target, serves)


def plan_of(filter: dict[str, Any] | None = None, sort: str | None = None) -> str:
    """EXPLAIN of a listing page, as the list builds it, with sequential scans off."""
    queryset = Instance.objects.filter(domain=DOMAIN, workflow_key=FLOW)
    queryset = queryset.filter(parse_filter(json.dumps(filter) if filter else None))
    queryset = queryset.order_by(*parse_sort(sort))
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")
        return queryset[:21].explain()


def scanned(plan: str) -> set[str]:
    """The indexes a plan reads."""
    return set(_SCANNED.findall(plan))


def of_field(names: dict[tuple[str, str, str], str], target: str) -> set[str]:
    """The indexes of a data field: the planner may take any (e.g. the sort index for a range
    of numbers, as tight as the value index there)."""
    return {name for (scope, path, _), name in names.items() if (scope, path) == (SCOPE, target)}


VALUE = Access.VALUE
SCOPE = f"{DOMAIN}/{FLOW}"


@pytest.mark.parametrize(
    "condition",
    [
        {"eq": 42},
        {"eq": "42"},  # a number spelt as a string: the number branch and the text branch
        {"gt": "1995"},
        {"between": [10, 20]},
        {"le": 3},
        {"in": [1, 2, "3"]},
    ],
    ids=["eq", "eq-string", "gt-string", "between", "le", "in"],
)
def test_comparisons_on_a_number_field_use_its_value_index(names, condition):
    plan = plan_of({"attributes": {"amount": condition}})

    # Each typed branch of the comparison (number, text) is a range of an index of the field.
    assert scanned(plan), plan
    assert scanned(plan) <= of_field(names, "attributes.amount"), plan
    assert "Seq Scan" not in plan


def test_isnull_and_a_nested_field_use_their_value_indexes(names):
    missing = plan_of({"attributes.amount": {"isnull": True}})  # no row: a search
    text = plan_of({"attributes": {"customer": {"id": {"eq": "C-7"}}}})

    assert scanned(missing) == {names[field("attributes.amount", VALUE)]}, missing
    assert scanned(text), text
    assert scanned(text) <= of_field(names, "attributes.customer.id"), text


@pytest.mark.parametrize(
    ("sort", "serves"),
    [("attributes.amount", Access.SORT), ("-attributes.amount", Access.SORT_DESC)],
)
def test_a_sort_on_an_indexed_field_reads_its_index_in_order(names, sort, serves):
    plan = plan_of(sort=sort)

    assert scanned(plan) == {names[field("attributes.amount", serves)]}, plan
    assert "Sort" not in plan  # the index gives the order, ties broken by id: no sort step


@pytest.mark.parametrize(
    "condition", [{"like": "me-199"}, {"startswith": "name-199"}, {"endswith": "-199"}]
)
def test_text_matches_use_the_trigram_index(names, condition):
    plan = plan_of({"attributes": {"name": condition}})

    assert scanned(plan) == {names[field("attributes.name", Access.TEXT)]}, plan


@pytest.mark.parametrize(
    "condition",
    [{"ge": "2024-03-23"}, {"between": ["2024-01-02", "2024-01-02T12:00:00+03:00"]}],
    ids=["ge", "between"],
)
def test_date_ranges_use_the_instant_index(names, condition):
    plan = plan_of({"attributes": {"when": condition}})

    assert scanned(plan) == {names[field("attributes.when", Access.INSTANT)]}, plan
    assert "Seq Scan" not in plan


@pytest.mark.parametrize(
    ("filter", "sort", "target", "serves"),
    [
        ({"status": {"eq": "Completed"}}, None, "status", "status filters, newest first"),
        (
            {"currentState": {"eq": "done"}},
            None,
            "currentState",
            "state filters, newest first",
        ),
        (None, "-modifiedAt", "modifiedAt", "ranges, sort"),
        (
            {"modifiedAt": {"gt": "2024-01-01T03:00:00Z"}},
            "modifiedAt",
            "modifiedAt",
            "ranges, sort",
        ),
        (None, "-completedAt", "completedAt", "ranges, sort descending"),
        ({"key": {"eq": "pay-3"}}, None, "key", "eq, in, isnull, sort ascending"),
        (None, "key", "key", "eq, in, isnull, sort ascending"),
        ({"key": {"like": "ay-199"}}, None, "key", str(Access.TEXT)),
        ({"key": {"startswith": "pay-199"}}, None, "key", str(Access.TEXT)),
    ],
)
def test_the_column_indexes_serve_their_filters_and_sorts(names, filter, sort, target, serves):
    plan = plan_of(filter, sort)

    served = {names[column(target, serves)]}
    if target == "key":
        # The full business-key index (migration 0013: the key first, by character) serves
        # the key's equality and prefix too; the planner may take either.
        served.add("instance_business_key")
    assert len(scanned(plan)) == 1, plan
    assert scanned(plan) <= served, plan
    assert "Seq Scan" not in plan


def test_answers_through_the_indexes_are_exact(names, operator_client):
    def listed(filter: dict[str, Any], sort: str | None = None) -> list[str]:
        params = {"filter": json.dumps(filter), "pageSize": "100"}
        if sort:
            params["sort"] = sort
        response = operator_client.get(BASE, params)
        assert response.status_code == 200, response.content
        return [item["key"] for item in response.json()["items"]]

    assert listed({"attributes": {"amount": {"gt": "1995"}}}, "attributes.amount") == [
        "pay-1996",
        "pay-1997",
        "pay-1998",
        "pay-1999",
    ]
    assert listed({"attributes": {"amount": {"gt": "1995"}}}, "-attributes.amount")[:2] == [
        "pay-1999",
        "pay-1998",
    ]
    assert sorted(listed({"attributes": {"name": {"startswith": "name-199"}}})) == sorted(
        ["pay-199", *(f"pay-{i}" for i in range(1990, 2000))]
    )
    assert listed({"attributes": {"name": {"endswith": "E-199"}}}) == []  # case matters
    assert sorted(listed({"attributes": {"name": {"like": "E-77"}}})) == sorted(
        ["pay-77", *(f"pay-{i}" for i in range(770, 780))]
    )
    # 2024-03-01T00:00Z is hour 1440; the offset moves the low bound three hours earlier.
    window = {"between": ["2024-03-01T00:00:00+03:00", "2024-03-01T05:00:00Z"]}
    assert listed({"attributes": {"when": window}}, "key") == [
        f"pay-{i}" for i in range(1437, 1446)
    ]
    assert listed({"attributes": {"customer.id": {"eq": "C-7"}}}) == ["pay-7"]
    assert listed({"key": {"startswith": "pay-199"}}, "key") == [
        "pay-199",
        *(f"pay-{i}" for i in range(1990, 2000)),
    ]


def test_the_planner_statistics_tell_a_condition_most_rows_meet(names):
    # Without them PostgreSQL guesses every JSON type guard selective (it keeps no statistics
    # on a partial index's expressions) and would read the whole workflow through an index.
    queryset = Instance.objects.filter(domain=DOMAIN, workflow_key=FLOW).filter(
        parse_filter(json.dumps({"attributes": {"amount": {"ge": 0}}}))
    )
    [plan] = json.loads(queryset.explain(format="json"))

    assert plan["Plan"]["Plan Rows"] > ROWS / 2  # every row meets it
