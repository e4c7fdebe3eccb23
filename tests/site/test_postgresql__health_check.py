"""The PostgreSQL backend's per-request health check (vnext/postgresql/base.py), on real
PostgreSQL: a kept connection the server ended is replaced before the request's first query,
and a live one is reused without asking the server anything."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, connections

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def kept() -> Iterator[Any]:
    """A second connection to the test database, kept between requests and health-checked, as
    `vnext_run` configures the connection of each HTTP thread."""
    wrapper = connections.create_connection("default")
    wrapper.settings_dict = {
        **wrapper.settings_dict,
        "CONN_MAX_AGE": 300,
        "CONN_HEALTH_CHECKS": True,
    }
    yield wrapper
    wrapper.close()


def request(wrapper: Any, sql: str) -> Any:
    """One request's query on `wrapper`, between Django's request start and end."""
    wrapper.close_if_unusable_or_obsolete()  # request_started
    with wrapper.cursor() as cursor:
        cursor.execute(sql)
        value = cursor.fetchone()[0]
    wrapper.close_if_unusable_or_obsolete()  # request_finished
    return value


def last_statement(pid: int) -> str | None:
    """What the server process `pid` ran last (None: it is gone)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return None if row is None else str(row[0])


def test_a_connection_the_server_ended_is_replaced_before_the_next_request(kept):
    first = request(kept, "SELECT pg_backend_pid()")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [first])
    deadline = time.monotonic() + 5
    while last_statement(first) is not None and time.monotonic() < deadline:
        time.sleep(0.05)

    second = request(kept, "SELECT pg_backend_pid()")

    assert second != first


def test_a_live_connection_is_reused_without_asking_the_server(kept):
    pid = request(kept, "SELECT pg_backend_pid()")
    assert request(kept, "SELECT 41 + 1") == 42

    kept.close_if_unusable_or_obsolete()  # the next request starts
    kept.close_if_health_check_failed()  # before its first query

    assert last_statement(pid) == "SELECT 41 + 1"  # no `SELECT 1` of a check
    assert request(kept, "SELECT pg_backend_pid()") == pid
