"""The admin's home page is the operations dashboard (and `/` leads to it): instances by status,
open incidents by error code, the job queue, failed jobs and Busy instances past their lease,
each a link to the filtered list that shows exactly what it counts. A favicon; no periodic-task
pages without a broker."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from instances.job_table import Job
from instances.models import Instance
from tests.instances.operator_fixtures import faulted_instance, publish_workflows, viewer

pytestmark = pytest.mark.django_db


def figures(html: str) -> dict[str, tuple[str, int]]:
    """The dashboard's links: label -> (url, count)."""
    found = re.findall(
        r'<a href="([^"]+)" class="vnext-figure">([^<]+): <strong>(\d+)</strong></a>', html
    )
    return {label: (url.replace("&amp;", "&"), int(count)) for url, label, count in found}


def listed(client, url: str) -> int:
    page = client.get(url)
    assert page.status_code == 200
    return page.content.decode().count('class="action-select"')


def test_every_figure_links_to_the_list_of_what_it_counts(admin_client):
    publish_workflows()
    faulted_instance()
    faulted_instance()
    stuck = faulted_instance()
    Instance.objects.filter(pk=stuck.pk).update(
        status="B", busy_owner="gone", busy_since=timezone.now() - timedelta(hours=2)
    )
    Job.objects.create(kind="timer", instance=stuck, run_at=timezone.now() - timedelta(minutes=5))
    Job.objects.create(kind="transition", instance=stuck, status="failed", last_error="boom")

    home = admin_client.get(reverse("admin:index"))

    assert home.status_code == 200
    shown = figures(home.content.decode())
    assert shown["Faulted"][1] == 2
    assert shown["Busy"][1] == 1
    assert shown["Task:400008"][1] == 3  # the three incidents are still open
    assert shown["timer"][1] == 1
    assert "oldest due 5" in home.content.decode()
    assert shown["failed jobs"][1] == 1
    assert shown["Busy past their lease"][1] == 1
    for label in ("Faulted", "Busy", "Task:400008", "Busy past their lease"):
        url, count = shown[label]
        assert listed(admin_client, url) == count, label
    for label in ("timer", "failed jobs"):
        url, count = shown[label]
        assert listed(admin_client, url) == count, label


def test_the_site_home_leads_to_the_dashboard_and_has_a_favicon(client, admin_client):
    assert admin_client.get("/").url == reverse("admin:index")
    favicon = client.get("/favicon.ico")
    assert favicon.status_code == 301
    assert favicon.url.endswith("vnext/favicon.svg")
    assert 'rel="icon"' in admin_client.get(reverse("admin:index")).content.decode()


def test_no_periodic_task_pages_without_a_broker(admin_client):
    home = admin_client.get(reverse("admin:index")).content.decode()
    assert "Periodic tasks" not in home
    assert admin_client.get("/admin/django_celery_beat/periodictask/").status_code == 404


def test_a_viewer_sees_the_dashboard_and_no_operator_action_on_the_list(client):
    client.force_login(viewer())
    home = client.get(reverse("admin:index"))
    listing = client.get(reverse("admin:instances_instance_changelist"))
    assert 'id="vnext-dashboard"' in home.content.decode()
    assert 'name="action"' not in listing.content.decode()


def test_a_job_shows_its_payload_indented_and_the_list_a_short_error(admin_client):
    publish_workflows()
    instance = faulted_instance()
    job = Job.objects.create(
        kind="transition",
        instance=instance,
        status="failed",
        payload={"transition": "compute", "attributes": {"n": 1}},
        last_error="Traceback: " + "x" * 300 + "\nsecond line",
    )

    page = admin_client.get(reverse("admin:instances_job_change", args=[job.pk])).content.decode()
    listing = admin_client.get(reverse("admin:instances_job_changelist")).content.decode()

    shown = page.replace("&quot;", '"')
    assert '{\n  "attributes": {\n    "n": 1\n  },\n  "transition": "compute"\n}' in shown
    assert "Traceback: " + "x" * 66 + "..." in listing
    assert "second line" not in listing
