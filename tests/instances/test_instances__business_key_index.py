"""A completed instance is found by its business key through an index (the live-key unique
constraint is partial: it holds live instances only), asked of the planner with sequential
scans off; and the API answers it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from instances.models import Instance
from instances.snapshots import instance_lookup
from tests.instances.indexed import BASE, make_instances, publish_indexed

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def _plan(queryset) -> str:
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE instances_instance")
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(line for (line,) in cursor.fetchall())


@pytest.fixture
def completed(db) -> Instance:
    publish_indexed()
    make_instances(300)  # every fifth completed: pay-0, pay-5, ...
    Instance.objects.bulk_create(
        Instance(
            domain="core",
            workflow_key="pay",
            workflow_version="1.0.0",
            key="pay-5",  # a completed key may be taken again by a live instance
            status="A" if n == 0 else "C",
            current_state="open",
            effective_state="open",
            etag="e",
            entity_etag="e",
            created_at=datetime(2025, 1, 1, tzinfo=UTC) + timedelta(days=n),
        )
        for n in range(3)
    )
    return Instance.objects.get(key="pay-10")


def test_a_completed_instance_by_key_is_read_through_the_business_key_index(completed):
    assert completed.status == "C"
    lookup = Instance.objects.filter(instance_lookup("core", "pay", "pay-10"))
    plan = _plan(lookup.order_by("-created_at")[:1])
    assert "instance_business_key" in plan
    assert "Seq Scan" not in plan


def test_the_api_answers_a_completed_instance_by_key(operator_client, completed):
    response = operator_client.get(f"{BASE}/pay-10")
    assert response.status_code == 200
    assert response.json()["id"] == str(completed.pk)
    newest = operator_client.get(f"{BASE}/pay-5").json()
    assert newest["key"] == "pay-5"
    assert Instance.objects.get(pk=newest["id"]).created_at.year == 2025
