"""The operations dashboard on the admin's home page: what needs an operator now, each figure a
link to the list it counts. A handful of aggregate queries, whatever the table sizes: instances
by status from the counters (`instances.counts`), never a count of the instances table."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.db.models import Count
from django.urls import reverse
from django.utils import timezone
from django.utils.timesince import timesince

from instances.counts import instance_counts
from instances.models import Incident, Instance
from instances.queue import jobs_count, jobs_tally_list
from instances.status import InstanceStatus, JobStatus, choices
from vnext.conf import vnext_setting


@dataclass(frozen=True)
class Figure:
    """One line of the dashboard: what, how many, and the list behind it."""

    label: str
    count: int
    url: str
    note: str = ""


def _instances(**query: Any) -> str:
    return reverse("admin:instances_instance_changelist") + "?" + urlencode(query)


def _jobs(**query: Any) -> str:
    return reverse("admin:instances_job_changelist") + "?" + urlencode(query)


def dashboard() -> dict[str, list[Figure]]:
    """Instances by status, open incidents by error code, the job queue by kind (depth and the
    oldest due job's age), failed jobs, and Busy instances past their lease."""
    now = timezone.now()
    by_status = instance_counts()
    statuses = [
        Figure(label, by_status.get(value, 0), _instances(status__exact=value))
        for value, label in choices(InstanceStatus)
    ]
    incidents = [
        Figure(code, n, _instances(error_code=code))
        for code, n in Incident.objects.filter(resolved=False)
        .values_list("error_code")
        .annotate(n=Count("instance_id", distinct=True))
        .order_by("-n", "error_code")[:20]
    ]
    queue = [
        Figure(
            kind,
            n,
            _jobs(status__exact=JobStatus.PENDING, kind__exact=kind),
            f"oldest due {timesince(oldest, now)} ago" if oldest and oldest <= now else "",
        )
        for kind, n, oldest in jobs_tally_list(
            statuses=[JobStatus.PENDING], by=["kind"], oldest=True
        )
    ]
    lease = timedelta(seconds=float(vnext_setting("BUSY_LEASE_SECONDS")))
    attention = [
        Figure(
            "failed jobs",
            jobs_count(status=JobStatus.FAILED),
            _jobs(status__exact=JobStatus.FAILED),
        ),
        Figure(
            "Busy past their lease",
            Instance.objects.filter(status=InstanceStatus.BUSY, busy_since__lt=now - lease).count(),
            _instances(status__exact=InstanceStatus.BUSY, busy_past_lease="yes"),
            f"lease {lease.total_seconds():g} s",
        ),
    ]
    return {
        "statuses": statuses,
        "incidents": incidents,
        "queue": queue,
        "attention": attention,
    }
