"""Keyset (cursor) paging of the instance list beside `page`: the same order, any depth,
stable while rows are inserted; a page number past `VNEXT_MAX_PAGE_OFFSET` rows is refused
with a pointer to the cursor, and the `next` link turns into a cursor link before that."""

from __future__ import annotations

import threading
import uuid
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import connection

from instances.models import Instance
from tests.instances.indexed import BASE, make_instances, publish_indexed

pytestmark = pytest.mark.django_db


@pytest.fixture
def rows(db):
    publish_indexed()
    return make_instances(23)


def _walk(client: Any, query: str) -> list[str]:
    """Every id of the listing, following `links.next` from the first page."""
    url = f"{BASE}?{query}"
    seen: list[str] = []
    for _ in range(100):
        body = client.get(url).json()
        seen += [item["id"] for item in body["items"]]
        if not body["links"]["next"]:
            assert body["nextCursor"] == ""
            return seen
        url = body["links"]["next"]
    raise AssertionError("the listing never ended")


def _cursor_walk(client: Any, query: str) -> list[str]:
    """Every id of the listing, page 1 and then by `nextCursor` only."""
    body = client.get(f"{BASE}?{query}").json()
    seen = [item["id"] for item in body["items"]]
    while body["nextCursor"]:
        page = body["page"]
        body = client.get(f"{BASE}?{query}&cursor={body['nextCursor']}").json()
        assert body["page"] == page + 1
        seen += [item["id"] for item in body["items"]]
    return seen


@pytest.mark.parametrize(
    "sort",
    [
        "",  # newest first
        "sort=key",
        "sort=-status,createdAt",
        "sort=completedAt",  # NULLs last
        "sort=-completedAt",
        "sort=attributes.customer.id",  # a data field, JSON null and strings
        "sort=-attributes.amount",
        "sort=attributes.missing,-key",  # no row has it: every value NULL
    ],
)
def test_cursor_pages_list_every_row_once_in_the_order_of_page_numbers(operator_client, rows, sort):
    # Pages of 3: a page ends on a row without the value (JSON null sorts before strings,
    # a missing value last) for the data-field sort.
    query = f"{sort}&pageSize=3" if sort else "pageSize=3"
    by_number: list[str] = []
    for number in range(1, 10):
        body = operator_client.get(f"{BASE}?{query}&page={number}").json()
        by_number += [item["id"] for item in body["items"]]
        if not body["hasNext"]:
            break

    assert _cursor_walk(operator_client, query) == by_number
    assert sorted(by_number) == sorted(str(row.pk) for row in rows)


def test_a_cursor_page_links_on_by_cursor_and_back_by_number(operator_client, rows):
    first = operator_client.get(f"{BASE}?pageSize=10").json()
    assert parse_qs(urlsplit(first["links"]["next"]).query)["page"] == ["2"]
    second = operator_client.get(f"{BASE}?pageSize=10&cursor={first['nextCursor']}")
    body = second.json()
    assert second.status_code == 200
    assert (body["page"], body["hasNext"]) == (2, True)
    query = parse_qs(urlsplit(body["links"]["next"]).query)
    assert query["cursor"] == [body["nextCursor"]]
    assert "page" not in query
    assert parse_qs(urlsplit(body["links"]["prev"]).query)["page"] == ["1"]


def test_next_links_turn_to_cursors_where_a_page_number_would_skip_too_far(
    operator_client, rows, settings
):
    settings.VNEXT = {**getattr(settings, "VNEXT", {}), "MAX_PAGE_OFFSET": 10}
    # Page 2 of 5 skips 5 rows, page 3 skips 10: both by number; page 4 (15) is by cursor.
    ids = _walk(operator_client, "pageSize=5")
    assert len(ids) == len(set(ids)) == 23
    page3 = operator_client.get(f"{BASE}?pageSize=5&page=3").json()
    assert "cursor" in parse_qs(urlsplit(page3["links"]["next"]).query)

    refused = operator_client.get(f"{BASE}?pageSize=5&page=4")
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "invalid_filter"
    assert "cursor" in error["message"]
    assert "VNEXT_MAX_PAGE_OFFSET" in error["message"]


@pytest.mark.parametrize(
    ("query", "why"),
    [
        ("cursor=not-a-cursor", "garbage"),
        ("cursor=", "empty"),
        ("cursor=eyJ2IjoxfQ", "json without the fields"),
        ("page=2&cursor={cursor}", "page and cursor"),
        ("sort=key&cursor={cursor}", "another sort"),
    ],
)
def test_a_bad_cursor_is_a_400_never_a_500(operator_client, rows, query, why):
    cursor = operator_client.get(f"{BASE}?pageSize=5").json()["nextCursor"]
    response = operator_client.get(f"{BASE}?pageSize=5&{query.format(cursor=cursor)}")
    assert response.status_code == 400, why
    assert response.json()["error"]["code"] == "invalid_filter"


@pytest.mark.postgres
def test_a_cursor_page_reads_through_the_list_index(operator_client, rows):
    """The default order's cursor is a range of (domain, workflow, created_at): asked with
    sequential scans off, the planner answers it from the index."""
    from instances.filters import sort_keys_of
    from instances.filters.keyset import decode_cursor, key_terms, rows_after

    cursor = operator_client.get(f"{BASE}?pageSize=5").json()["nextCursor"]
    terms = key_terms(sort_keys_of(None, None))
    after = decode_cursor([], terms, cursor)
    page = (
        Instance.objects.filter(domain="core", workflow_key="pay")
        .filter(rows_after(terms, after.values))
        .order_by("-created_at", "-id")[:6]
    )
    sql, params = page.query.sql_with_params()
    with connection.cursor() as db:
        db.execute("SET LOCAL enable_seqscan = off")
        db.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(line for (line,) in db.fetchall())
    assert "instance_list" in plan
    assert "created_at <=" in plan.replace('"', "")


def _cursor_walk_between(client: Any, query: str, between: Any) -> list[str]:
    body = client.get(f"{BASE}?{query}").json()
    seen = [item["id"] for item in body["items"]]
    while body["nextCursor"]:
        between()
        body = client.get(f"{BASE}?{query}&cursor={body['nextCursor']}").json()
        seen += [item["id"] for item in body["items"]]
    return seen


@pytest.mark.postgres
@pytest.mark.concurrency
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("sort", ["", "sort=key"], ids=["newest-first", "by-key"])
def test_cursor_paging_is_stable_while_instances_are_inserted(operator_client, sort):
    """Two writers insert instances while a reader pages by cursor, and between every two
    pages some rows land (newest first: above the reader; by key: anywhere in the order).
    The reader sees every row that was there before it began, each once (OFFSET paging
    would shift rows under it)."""
    publish_indexed()
    before = {str(row.pk) for row in make_instances(60)}
    stop = threading.Event()
    landed = threading.Condition()
    count = [0]
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            while not stop.is_set() and count[0] < 2_000:
                Instance.objects.create(
                    domain="core",
                    workflow_key="pay",
                    workflow_version="1.0.0",
                    key=f"pay-{uuid.uuid4().int % 100}-{uuid.uuid4().hex[:6]}",
                    current_state="open",
                    effective_state="open",
                    etag="e",
                    entity_etag="e",
                )
                with landed:
                    count[0] += 1
                    landed.notify_all()
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    def some_rows_land() -> None:
        with landed:
            target = count[0] + 3
            assert landed.wait_for(lambda: count[0] >= target or errors, timeout=30)

    threads = [threading.Thread(target=writer) for _ in range(2)]
    for thread in threads:
        thread.start()
    query = f"{sort}&pageSize=7" if sort else "pageSize=7"
    try:
        seen = _cursor_walk_between(operator_client, query, some_rows_land)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert not errors
    assert all(not thread.is_alive() for thread in threads)
    assert count[0] >= 3 * (60 // 7)
    assert len(seen) == len(set(seen)), "a row was listed twice"
    assert before <= set(seen), "a row that was there was skipped"
