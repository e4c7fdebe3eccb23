"""The admin built for millions of instances, pinned by the SQL it runs: the changelist's
sidebar offers the registry's workflows, versions and states and the status vocabulary (no
`DISTINCT` over instances), there is no date hierarchy, its result count comes from the
counters (or the planner, labelled), its search finds an exact id or an exact/prefix key
through indexes (no `UPPER(...) LIKE '%...%'`); the dashboard and `/metrics` count instances
from the counters (no `COUNT` over the instances table but the Busy-past-lease range)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.admin import site
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from instances.admin import InstanceAdmin
from instances.models import Instance
from tests.instances.workflows import ping_pong, publish

pytestmark = pytest.mark.django_db

LIST = "admin:instances_instance_changelist"
INSTANCES = re.compile(r'FROM "instances_instance"')


def _instance(n: int, *, status: str = "A", version: str = "1.0.0") -> Instance:
    return Instance(
        domain="core",
        workflow_key="ping-pong",
        workflow_version=version,
        key=f"order-{n}",
        status=status,
        current_state="ping",
        effective_state="ping",
        etag="e",
        entity_etag="e",
    )


@pytest.fixture
def rows(db) -> list[Instance]:
    first = ping_pong()
    second = ping_pong()
    second["version"] = "1.1.0"
    publish(first, second)
    made = [_instance(n, status="C" if n % 3 == 0 else "A") for n in range(30)]
    made += [_instance(100 + n, version="1.1.0") for n in range(5)]
    return Instance.objects.bulk_create(made)


def _sql(client: Any, url: str) -> tuple[str, list[str]]:
    with CaptureQueriesContext(connection) as captured:
        page = client.get(url)
    assert page.status_code == 200
    return page.content.decode(), [query["sql"] for query in captured.captured_queries]


def _over_instances(queries: list[str], word: str) -> list[str]:
    """The statements reading the instances table with `word` (DISTINCT, COUNT(...))."""
    return [sql for sql in queries if INSTANCES.search(sql) and word in sql.upper()]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", 35),
        ("?status__exact=C", 10),
        ("?workflow=core/ping-pong", 35),
        ("?workflow=core/ping-pong&status__exact=A", 25),
    ],
)
def test_the_list_runs_no_distinct_and_no_count_over_instances(admin_client, rows, query, expected):
    html, queries = _sql(admin_client, reverse(LIST) + query)
    assert not _over_instances(queries, "DISTINCT")
    assert not _over_instances(queries, "COUNT(")
    assert html.count('class="action-select"') == expected
    assert f"{expected} instances" in html
    assert "vnext-estimated-count" not in html


def test_the_sidebar_choices_come_from_the_registry(admin_client, rows):
    html, queries = _sql(admin_client, reverse(LIST) + "?workflow=core/ping-pong")
    assert "?workflow=core%2Fping-pong" in html or "workflow=core/ping-pong" in html
    for version in ("1.0.0", "1.1.0"):
        assert f"version={version}" in html
    assert "state=pong" in html  # a state no instance is in: offered from the definition
    assert not _over_instances(queries, "DISTINCT")
    assert InstanceAdmin.date_hierarchy is None

    versioned = admin_client.get(reverse(LIST) + "?workflow=core/ping-pong&version=1.1.0")
    assert versioned.content.decode().count('class="action-select"') == 5


def test_search_finds_an_exact_id_or_an_exact_or_prefix_key_without_like_anywhere(
    admin_client, rows
):
    target = rows[7]
    html, queries = _sql(admin_client, reverse(LIST) + f"?q={target.pk}")
    assert html.count('class="action-select"') == 1
    assert str(target.pk) in html

    html, queries = _sql(admin_client, reverse(LIST) + "?q=order-1")
    # order-1, order-10..19, order-100..104
    assert html.count('class="action-select"') == 1 + 10 + 5
    html, _ = _sql(admin_client, reverse(LIST) + "?q=order-104")
    assert html.count('class="action-select"') == 1
    assert _sql(admin_client, reverse(LIST) + "?q=rder-1")[0].count('class="action-select"') == 0

    for sql in queries:
        assert "UPPER(" not in sql.upper()
        assert "LIKE '%" not in sql
    # Counted only below a bound, through a LIMIT: never the whole table.
    assert all("LIMIT" in sql for sql in _over_instances(queries, "COUNT("))


@pytest.mark.postgres
@pytest.mark.parametrize("term", ["order-1", "order-17", "{pk}"])
def test_the_search_is_served_by_an_index(admin_client, rows, term, rf):
    request = rf.get(reverse(LIST))
    admin = InstanceAdmin(Instance, site)
    found, _ = admin.get_search_results(request, Instance.objects.all(), term.format(pk=rows[3].pk))
    sql, params = found.order_by("-pk")[:100].query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE instances_instance")
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(line for (line,) in cursor.fetchall())
    assert "Seq Scan" not in plan
    assert "instance_business_key" in plan or "instances_instance_pkey" in plan


def test_a_big_filtered_list_shows_the_planners_estimate_labelled(admin_client, rows, monkeypatch):
    monkeypatch.setattr("instances.admin.paginators.EXACT_COUNT_BOUND", 1)
    html, queries = _sql(admin_client, reverse(LIST) + "?open_incident=no")
    if connection.vendor == "postgresql":
        assert "vnext-estimated-count" in html
        assert "planner" in html
        assert not _over_instances(queries, "COUNT(")
    assert html.count('class="action-select"') == 35


def test_the_dashboard_and_metrics_count_instances_from_the_counters(admin_client, rows, client):
    html, queries = _sql(admin_client, reverse("admin:index"))
    assert "Active: <strong>25</strong>" in html
    assert "Completed: <strong>10</strong>" in html
    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    for sql in queries:
        if 'FROM "instances_instancetransition"' in sql:
            # The activity charts: the last hour of history, each row's instance by primary key
            # (its plan: test_admin__dashboard_compact).
            assert 'U0."id" = ("instances_instancetransition"."instance_id")' in sql
            continue
        if INSTANCES.search(sql):
            assert "GROUP BY" not in sql.upper()
            if "busy_since" in sql:
                continue  # the Busy-past-lease range of the partial `instance_busy` index
            # The cancelled ones: the planner's estimate, else a count bounded by a LIMIT,
            # both on the predicate of the partial `instance_cancelled` index.
            assert "\"effective_state_subtype\" = 'cancelled'" in sql
            assert "EXPLAIN" in sql or "LIMIT 10001" in sql
    assert 'vnext_instances{status="A"} 25.0' in metrics.content.decode()
    assert 'vnext_instances{status="C"} 10.0' in metrics.content.decode()


def test_metrics_scrape_reads_no_group_by_over_instances(client, rows):
    with CaptureQueriesContext(connection) as captured:
        assert client.get("/metrics").status_code == 200
    for query in captured.captured_queries:
        if INSTANCES.search(query["sql"]):
            assert "busy_since" in query["sql"]
            assert "GROUP BY" not in query["sql"].upper()


def test_a_workflow_versions_page_links_to_its_instances_through_the_new_filters(
    admin_client, rows
):
    from workflows.models import Component

    component = Component.objects.get(kind="workflow", key="ping-pong", version="1.1.0")
    page = admin_client.get(reverse("admin:workflows_component_change", args=[component.pk]))
    html = page.content.decode().replace("&amp;", "&")
    links = set(re.findall(r'href="(/admin/instances/instance/\?[^"]+)"', html))
    assert links
    for link in links:
        listed = admin_client.get(link)
        assert listed.status_code == 200, link
        assert "?e=1" not in listed.get("Location", "")
    version_list = admin_client.get(reverse(LIST) + "?workflow=core/ping-pong&version=1.1.0")
    assert version_list.content.decode().count('class="action-select"') == 5
