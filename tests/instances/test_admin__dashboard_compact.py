"""The dashboard is a grid of compact cards (a figure and its label on one line each, no "·"
separators), shows cancelled instances apart from completed ones, and charts each workflow's
last hour (transitions and faults per minute, inline SVG) from one grouped, index-served query
of the history; the jobs list keeps each row to one line."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from instances.admin.dashboard import activity_rows
from instances.job_table import Job
from instances.models import Instance, InstanceTransition
from instances.operations import operator_cancel
from tests.instances.operator_fixtures import faulted_instance, publish_workflows

pytestmark = pytest.mark.django_db


def figures(html: str) -> dict[str, tuple[str, int]]:
    """The dashboard's links: label -> (url, count)."""
    found = re.findall(
        r'<a href="([^"]+)" class="vnext-figure">([^<]+): <strong>(\d+)</strong></a>', html
    )
    return {label: (url.replace("&amp;", "&"), int(count)) for url, label, count in found}


def dashboard_html(admin_client) -> str:
    page = admin_client.get(reverse("admin:index"))
    assert page.status_code == 200
    html = page.content.decode()
    return html[html.index('id="vnext-dashboard"') : html.index('id="content-related"')]


def test_cancelled_instances_are_shown_apart_from_completed_ones(admin_client):
    publish_workflows()
    cancelled, finished = faulted_instance(), faulted_instance()
    faulted_instance()
    operator_cancel(instance=cancelled, actor="ops", reason="customer withdrew")
    Instance.objects.filter(pk=finished.pk).update(
        status="C", current_state="done", effective_state_subtype="success"
    )
    assert Instance.objects.get(pk=cancelled.pk).status == "C"

    shown = figures(dashboard_html(admin_client))

    assert shown["Completed"][1] == 1
    assert shown["Cancelled"][1] == 1
    assert shown["Faulted"][1] == 1
    for label, instance in (("Completed", finished), ("Cancelled", cancelled)):
        listing = admin_client.get(shown[label][0])
        assert listing.status_code == 200
        html = listing.content.decode()
        assert html.count('class="action-select"') == 1, label
        assert str(instance.pk) in html


def test_the_figures_sit_in_cards_one_line_each(admin_client):
    publish_workflows()
    faulted_instance()
    Job.objects.create(kind="timer", run_at=timezone.now())

    html = dashboard_html(admin_client)

    assert "&middot;" not in html
    assert "·" not in html
    assert html.count('<section class="vnext-card">') == 4
    for title in ("Instances", "Open incidents", "Job queue", "Needs attention"):
        assert f'<section class="vnext-card"><h3>{title}</h3><ul>' in html
    # Every figure is one list item: its label and count in one link.
    items = re.findall(r"<li>(.*?)</li>", html)
    assert len(items) == len(figures(html))
    assert all(item.startswith('<a href="') for item in items)
    page = admin_client.get(reverse("admin:index")).content.decode()
    assert 'href="/static/vnext/dashboard.css"' in page
    css = (Path(settings.BASE_DIR) / "static" / "vnext" / "dashboard.css").read_text()
    assert "display: grid" in css


def history(instance: Instance, minutes_ago: float, *, status: str = "completed") -> None:
    InstanceTransition.objects.create(
        instance=instance,
        transition_key="compute",
        trigger_type=0,
        status=status,
        started_at=timezone.now() - timedelta(minutes=minutes_ago),
    )


def test_each_workflow_gets_a_sparkline_of_its_last_hour(admin_client):
    publish_workflows()
    busy, other = faulted_instance(), faulted_instance("uncancellable")
    # faulted_instance wrote a start and a faulted compute for each, just now.
    for minutes in (5, 5, 30):
        history(busy, minutes)
    history(busy, 10, status="faulted")
    history(busy, 90)  # older than the hour: not charted
    history(other, 2)

    html = dashboard_html(admin_client)

    charts = re.findall(
        r'<section class="vnext-card vnext-chart"><h3><a href="([^"]+)">([^<]+)</a></h3>'
        r"(<svg .*?</svg>)<p><strong>(\d+)</strong> transitions, <strong>(\d+)</strong> faulted",
        html,
    )
    assert [(name, int(n), int(f)) for _, name, _, n, f in charts] == [
        ("core/fixable", 6, 2),
        ("core/uncancellable", 3, 1),
    ]
    url, _, svg, _, _ = charts[0]
    assert url.replace("&amp;", "&").endswith("?workflow=core%2Ffixable")
    lines = re.findall(r'<polyline class="vnext-spark-(\w+)" fill="none" points="([^"]+)"/>', svg)
    assert [name for name, _ in lines] == ["transitions", "faults"]
    for _, points in lines:
        assert len(points.split()) == 60  # a point per minute


def test_the_activity_query_reads_a_range_of_the_history_not_the_table():
    # At scale: 20,000 instances, 200,000 history rows over a month, 100 in the last hour.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO instances_instance (id, domain, workflow_key, workflow_version, status,"
            " current_state, effective_state, effective_state_type, effective_state_subtype,"
            " data, data_version_major, data_version_minor, data_version_patch, etag,"
            " entity_etag, state_version, busy_owner, tags, stage, extra, created_by,"
            " modified_by, created_at, updated_at)"
            " SELECT gen_random_uuid(), 'core', 'w' || (n % 7), '1.0.0', 'A', 's', 's',"
            " 'initial', 'none', '{}', 1, 0, 0, 'e', 'e', 0, '', '[]', '', '{}', '', '', now(),"
            " now() FROM generate_series(1, 20000) n"
        )
        cursor.execute(
            "INSERT INTO instances_instancetransition (id, instance_id, transition_key,"
            " from_state, to_state, trigger_type, body, actor, status, error_code,"
            " error_message, effective_state, effective_state_type, effective_state_subtype,"
            " stage, chain_depth, started_at)"
            " SELECT gen_random_uuid(), ids.a[1 + n % 20000], 't', '', '', 0, '{}', '',"
            " 'completed', '', '', '', '', '', '', 0,"
            " now() - interval '61 minutes' - (n * interval '13 seconds')"
            " FROM generate_series(1, 200000) n,"
            " (SELECT array_agg(id) AS a FROM instances_instance) ids"
        )
        cursor.execute(
            "UPDATE instances_instancetransition SET started_at = now() - interval '5 minutes'"
            " WHERE id IN (SELECT id FROM instances_instancetransition LIMIT 100)"
        )
        cursor.execute("ANALYZE instances_instance")
        cursor.execute("ANALYZE instances_instancetransition")

    start = timezone.now() - timedelta(minutes=59)
    plan = json.dumps(json.loads(activity_rows(start).explain(format="json")))

    assert "transition_started" in plan
    assert '"Node Type": "Seq Scan"' not in plan
    assert sum(row[2] for row in activity_rows(start)) == 100


def test_job_rows_stay_on_one_line(admin_client):
    publish_workflows()
    instance = faulted_instance()
    payload = {"transition": "compute", "attributes": {"note": "y" * 200}}
    Job.objects.create(kind="transition", instance=instance, status="failed", payload=payload)

    listing = admin_client.get(reverse("admin:instances_job_changelist")).content.decode()

    short = str(instance.pk)[:8]
    assert re.search(rf'<a href="[^"]+" title="{instance.pk}" style="white-space:nowrap', listing)
    assert f">{short}</a>" in listing
    assert f">{instance.pk}</a>" not in listing
    assert str(instance) not in listing  # not the instance's long description
    preview = re.search(
        r'<span title="([^"]*)" style="white-space:nowrap[^"]*">([^<]*)</span>', listing
    )
    assert preview is not None
    title, shown = (part.replace("&quot;", '"') for part in preview.groups())
    assert json.loads(title) == payload  # the whole payload, in the title
    assert shown.startswith('{"attributes":{"note":"yyy')
    assert shown.endswith("...")
    assert len(shown) == 60
    assert "<pre" not in listing
