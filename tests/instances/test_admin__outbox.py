"""Admin > Outbox events: the pending and the published rows apart, by target; read-only."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from instances.models import OutboxEvent

pytestmark = pytest.mark.django_db
LIST = "admin:instances_outboxevent_changelist"


def _row(target: str, *, published: bool) -> OutboxEvent:
    return OutboxEvent.objects.create(
        instance_id=uuid.uuid4(),
        type="io.vnext.instance.completed",
        source="/core/workflows/wf/instances/x",
        subject="done",
        target=target,
        published_at=timezone.now() if published else None,
    )


@pytest.fixture
def rows(settings: Any) -> dict[str, OutboxEvent]:
    settings.VNEXT = {
        **settings.VNEXT,
        "OUTBOX_TARGETS": {"bus": {"broker": "rabbitmq"}, "stream": {"broker": "redis"}},
    }
    return {
        "bus-pending": _row("bus", published=False),
        "bus-published": _row("bus", published=True),
        "stream-pending": _row("stream", published=False),
    }


def _listed(admin_client: Any, **query: str) -> set[int]:
    response = admin_client.get(reverse(LIST), query)
    assert response.status_code == 200
    return {row.pk for row in response.context["cl"].result_list}


def test_the_list_filters_pending_published_and_target(admin_client, rows):
    ids = {name: row.pk for name, row in rows.items()}

    assert _listed(admin_client) == set(ids.values())
    assert _listed(admin_client, published="no") == {ids["bus-pending"], ids["stream-pending"]}
    assert _listed(admin_client, published="yes") == {ids["bus-published"]}
    assert _listed(admin_client, published="no", target="bus") == {ids["bus-pending"]}


def test_an_event_is_read_only(admin_client, rows):
    row = rows["bus-pending"]
    page = admin_client.get(reverse("admin:instances_outboxevent_change", args=[row.pk]))

    assert page.status_code == 200
    assert b"io.vnext.instance.completed" in page.content
    assert admin_client.get(reverse("admin:instances_outboxevent_add")).status_code == 403
    deleted = admin_client.post(
        reverse("admin:instances_outboxevent_delete", args=[row.pk]), {"post": "yes"}
    )
    assert deleted.status_code == 403
    assert OutboxEvent.objects.filter(pk=row.pk).exists()


@pytest.mark.parametrize("changelist", [LIST, "admin:instances_humantask_changelist"])
def test_the_outbox_and_human_task_lists_count_through_a_limit(admin_client, rows, changelist):
    # A COUNT(*) of the whole table on every page load is a sequential scan at a million rows.
    with CaptureQueriesContext(connection) as queries:
        assert admin_client.get(reverse(changelist), {"all": "1"}).status_code == 200
    counts = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    assert counts, "the list shows a count"
    assert all("LIMIT" in sql.upper() for sql in counts), counts
