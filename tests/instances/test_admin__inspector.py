"""The inspector page of an instance with a long history (500 transitions, 200 data versions)
renders with a bounded number of queries: each panel reads its rows at once. (Its time is a
benchmark: `python -m bench admin`.) "Started by" names who started the instance."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from instances.admin.inspector import MAX_ROWS
from instances.models import Instance, InstanceTransition
from tests.instances.operator_fixtures import (
    faulted_instance,
    long_history_instance,
    publish_workflows,
)

pytestmark = pytest.mark.django_db

# Session and user, the instance, its panels (history, data versions, jobs, locks), the inlines
# (tasks, incidents, children, audit), the parent link: a fixed set, whatever the history.
MAX_QUERIES = 20


def test_a_long_history_renders_in_a_bounded_number_of_queries(
    admin_client, django_assert_max_num_queries
):
    instance = long_history_instance(transitions=500, versions=200)
    url = reverse("admin:instances_instance_change", args=[instance.pk])
    admin_client.get(url)  # the diagram is drawn once per version: not what is counted

    with django_assert_max_num_queries(MAX_QUERIES):
        page = admin_client.get(url)

    assert page.status_code == 200
    html = page.content.decode()
    assert html.count('<tr class="completed">') == 500
    assert html.count("<del>") >= 200  # every version says what it changed
    assert 'class="vnext-diagram"' in html


def test_a_short_and_a_long_history_cost_the_same_queries(admin_client):
    short = long_history_instance(transitions=2, versions=1)
    long = long_history_instance(transitions=300, versions=100)
    counts = []
    for instance in (short, long):
        url = reverse("admin:instances_instance_change", args=[instance.pk])
        admin_client.get(url)
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(url).status_code == 200
        counts.append(len(captured))

    assert counts[0] == counts[1]


def started_by(admin_client, instance) -> str:
    """The inspector's "Started by" field, as text."""
    html = admin_client.get(reverse("admin:instances_instance_change", args=[instance.pk]))
    found = re.search(
        r'field-parent_link.*?<label>Started by:</label>\s*<div class="readonly">(.*?)</div>',
        html.content.decode(),
        re.S,
    )
    assert found is not None
    return found.group(1).strip()


def test_started_by_shows_who_started_the_instance(admin_client):
    publish_workflows()
    instance = faulted_instance()  # started by the actor "client"
    assert started_by(admin_client, instance) == "client"


def test_started_by_falls_back_to_the_first_history_row(admin_client):
    instance = long_history_instance(transitions=3, versions=1)
    Instance.objects.filter(pk=instance.pk).update(created_by="")
    InstanceTransition.objects.filter(instance=instance).update(actor="night-batch")
    first = InstanceTransition.objects.filter(instance=instance).order_by("started_at").first()
    assert first is not None
    InstanceTransition.objects.filter(pk=first.pk).update(actor="teller-42")

    assert started_by(admin_client, instance) == "teller-42"


def test_started_by_finds_the_start_beyond_the_newest_rows(admin_client):
    instance = long_history_instance(transitions=MAX_ROWS + 5, versions=1)
    Instance.objects.filter(pk=instance.pk).update(created_by="")
    InstanceTransition.objects.filter(instance=instance).update(actor="later")
    first = InstanceTransition.objects.filter(instance=instance).order_by("started_at").first()
    assert first is not None
    InstanceTransition.objects.filter(pk=first.pk).update(actor="the-starter")

    assert started_by(admin_client, instance) == "the-starter"
