"""The instance list costs the same queries whatever the instance table holds, and none of
them scans it for access control: a workflow's versions and the SubFlow query-role
overrides its children run under come from the component registry (not a `SELECT DISTINCT`
over instances), for a superuser and for callers whose query roles narrow the list."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from instances.models import Instance
from tests.instances.test_subflows__overrides import (
    CHILD,
    OVERRIDES,
    VIEWS,
    child_flow,
    child_of,
    member,
    parent_flow,
    started,
)
from tests.instances.workflows import publish

pytestmark = pytest.mark.django_db

INSTANCES = re.compile(r'FROM "instances_instance"', re.IGNORECASE)


@pytest.fixture(autouse=True)
def published(db: None) -> None:
    publish(*VIEWS, child_flow(), parent_flow(**OVERRIDES))


def _listing(client: Any, query: str = "") -> tuple[list[str], list[str]]:
    """The ids a caller's listing shows and the SQL it ran (the registry already cached)."""
    client.get(f"{CHILD}?pageSize=100{query}")
    with CaptureQueriesContext(connection) as captured:
        response = client.get(f"{CHILD}?pageSize=100{query}")
    assert response.status_code == 200, response.json()
    return [item["id"] for item in response.json()["items"]], [
        query["sql"] for query in captured.captured_queries
    ]


def _plain_children(count: int) -> None:
    Instance.objects.bulk_create(
        Instance(
            domain="core",
            workflow_key="ov-child",
            workflow_version="1.0.0",
            current_state="check",
            effective_state="check",
            etag="e",
            entity_etag="e",
        )
        for _ in range(count)
    )


def test_a_listing_costs_the_same_queries_with_more_data_and_never_a_distinct_scan(
    operator_client,
):
    agent = member("agent", "parent.agent")
    sender = member("sender", "child.sender", "child.reader")
    overridden = [str(child_of(started(agent)).pk)]
    alone = [started(sender, CHILD)]
    _plain_children(2)
    callers = {"superuser": operator_client, "agent": agent, "sender": sender}
    small = {name: _listing(client) for name, client in callers.items()}

    overridden += [str(child_of(started(agent)).pk) for _ in range(3)]
    alone += [started(sender, CHILD) for _ in range(3)]
    _plain_children(25)
    large = {name: _listing(client) for name, client in callers.items()}

    for name in callers:
        assert len(large[name][1]) == len(small[name][1]), name
        for sql in small[name][1] + large[name][1]:
            assert not (INSTANCES.search(sql) and "DISTINCT" in sql.upper()), sql
    # A data-field filter and sort ask which fields are sealed or hidden: the registry too.
    data_query = '&filter={"attributes":{"n":{"eq":"1"}}}&sort=-attributes.n'
    for client in callers.values():
        _, queries = _listing(client, data_query)
        for sql in queries:
            assert not (INSTANCES.search(sql) and "DISTINCT" in sql.upper()), sql
    # Still the right rows: in the state whose query roles the parent overrides, its
    # readers see the children it started and the child's own readers the others; the
    # plain rows sit in a state open to every reader (a superuser holds no role).
    plain = set(large["superuser"][0])
    assert len(plain) == 27
    assert set(large["agent"][0]) == set(overridden) | plain
    assert set(large["sender"][0]) == set(alone) | plain
