"""The human-task inbox is served by its index, not a scan (PostgreSQL): on 200,000 open tasks
spread over 200 roles and 1,000 users, analyzed so the planner knows, the plan of the inbox's
read (`instances.human_tasks.inbox_query`, as the inbox runs it) reads one ordered, limited
range of `human_task_inbox` per assignee name — no sequential scan, no sort of a whole role's
tasks — with and without a workflow filter; "mine" reads `human_task_claimed`. The timings at
a million instances are `python -m bench scale`'s."""

from __future__ import annotations

import re

import pytest
from django.db import connection

from instances.human_task_table import HumanTask
from instances.human_tasks import InboxFilter, inbox_query
from instances.models import Instance

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]
TASKS = 200_000
_SCANNED = re.compile(r"(?:Index Scan|Index Only Scan)(?: Backward)? using (\w+)")


def _fill() -> None:
    instance = Instance.objects.create(
        domain="core", workflow_key="loan", workflow_version="1.0.0", current_state="review",
        effective_state="review", etag="e", entity_etag="e",
    )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO instances_humantask (id, instance_id, domain, workflow_key, state,
                task_key, title, instructions, roles, users, status, claimed_by, completed_by,
                created_at)
            SELECT md5(i::text)::uuid, %s, 'core', CASE WHEN i %% 10 = 0 THEN 'audit' ELSE 'loan'
                END, 'review', 'approve', 'Approve', '', '[]', '[]',
                CASE WHEN i %% 50 = 0 THEN 'claimed' ELSE 'open' END,
                CASE WHEN i %% 50 = 0 THEN 'u' || (i %% 1000) ELSE '' END, '',
                now() - make_interval(secs => i)
            FROM generate_series(1, %s) AS i
            """,
            [instance.pk, TASKS],
        )
        cursor.execute(
            """
            INSERT INTO instances_humantaskassignee (task_id, domain, assignee, created_at)
            SELECT id, domain, 'role:r' || (abs(hashtext(id::text)) %% 200), created_at
            FROM instances_humantask
            UNION ALL
            SELECT id, domain, 'user:u' || (abs(hashtext(id::text || 'u')) %% 1000), created_at
            FROM instances_humantask
            """,
            [],
        )
        cursor.execute("ANALYZE instances_humantask")
        cursor.execute("ANALYZE instances_humantaskassignee")


def plan(query: object) -> str:
    sql, params = query.query.sql_with_params()  # type: ignore[attr-defined]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_the_inbox_reads_one_index_range_per_assignee():
    if connection.vendor != "postgresql":
        pytest.skip("the plan is PostgreSQL's")
    _fill()
    names = ["role:r7", "role:r8", "user:u3"]

    for where in (InboxFilter(), InboxFilter(workflow="loan"), InboxFilter(claimed=False)):
        text = plan(inbox_query("core", names, where, 11))
        assert "Seq Scan" not in text, text
        assert _SCANNED.findall(text).count("human_task_inbox") == len(names), text
        assert "Limit" in text, text
        # The ranges come out of the index in order: nothing sorts an assignee's rows.
        assert "Sort" not in text, text

    one = plan(inbox_query("core", ["role:r7"], InboxFilter(), 11))
    assert "Seq Scan" not in one, one
    assert "human_task_inbox" in _SCANNED.findall(one), one
    assert "Sort" not in one, one

    # "Mine": the caller's claimed tasks, from the partial index of claimed ones.
    mine = HumanTask.objects.filter(domain="core", status="claimed", claimed_by="u7").order_by(
        "created_at", "id"
    )[:11]
    text = plan(mine)
    assert "Seq Scan" not in text, text
    assert "human_task_claimed" in _SCANNED.findall(text), text
