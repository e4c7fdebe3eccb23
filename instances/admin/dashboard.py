"""The operations dashboard on the admin's home page: what needs an operator now, each figure a
link to the list it counts. A handful of aggregate queries, whatever the table sizes: instances
by status from the counters (`instances.counts`), never a count of the instances table; the
cancelled ones through their small partial index; the last hour's transitions and faults per
workflow and minute in one grouped query over a range of the history's `started_at` index,
drawn as inline SVG sparklines."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.db.models import CharField, Count, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Concat, TruncMinute
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.timesince import timesince

from instances.counts import cancelled_count, instance_counts
from instances.models import Incident, Instance, InstanceTransition
from instances.queue import jobs_count, jobs_tally_list
from instances.status import InstanceStatus, JobStatus, TransitionStatus, choices
from vnext.conf import vnext_setting

# The activity charts: the last hour, a point per minute.
MINUTES = 60
# Workflows charted, busiest first.
MAX_WORKFLOWS = 12


@dataclass(frozen=True)
class Figure:
    """One line of the dashboard: what, how many, and the list behind it."""

    label: str
    count: int
    url: str
    note: str = ""


@dataclass(frozen=True)
class Activity:
    """A workflow's last hour: transitions and faults started per minute, oldest first."""

    domain: str
    workflow: str
    transitions: tuple[int, ...]
    faults: tuple[int, ...]
    url: str

    @property
    def total(self) -> int:
        return sum(self.transitions)

    @property
    def faulted(self) -> int:
        return sum(self.faults)

    @property
    def sparkline(self) -> SafeString:
        """Two lines on one scale, transitions and (red) faults, a point per minute."""
        return sparkline(self.transitions, self.faults)


def _instances(**query: Any) -> str:
    return reverse("admin:instances_instance_changelist") + "?" + urlencode(query)


def _jobs(**query: Any) -> str:
    return reverse("admin:instances_job_changelist") + "?" + urlencode(query)


def dashboard() -> dict[str, list[Figure] | list[Activity]]:
    """Instances by status, open incidents by error code, the job queue by kind (depth and the
    oldest due job's age), failed jobs, and Busy instances past their lease."""
    now = timezone.now()
    by_status = instance_counts()
    cancelled, estimated = cancelled_count()
    about = "estimate" if estimated else ""
    statuses = []
    for value, label in choices(InstanceStatus):
        if value != InstanceStatus.COMPLETED:
            statuses.append(Figure(label, by_status.get(value, 0), _instances(status__exact=value)))
            continue
        # The workflow's cancel ends an instance Completed too: told apart, shown apart.
        completed = max(by_status.get(value, 0) - cancelled, 0)
        statuses.append(
            Figure(label, completed, _instances(status__exact=value, ended="completed"), about)
        )
        statuses.append(
            Figure(
                "Cancelled", cancelled, _instances(status__exact=value, ended="cancelled"), about
            )
        )
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
        "activity": activity(now),
    }


def activity(now: datetime) -> list[Activity]:
    """Transitions and faults per workflow and minute over the last hour (the current minute
    last), busiest workflows first: one grouped query over a range of `transition_started`
    (the hour's rows only, each looking its instance up by primary key)."""
    start = now.astimezone(UTC).replace(second=0, microsecond=0) - timedelta(minutes=MINUTES - 1)
    series: dict[tuple[str, str], tuple[list[int], list[int]]] = defaultdict(
        lambda: ([0] * MINUTES, [0] * MINUTES)
    )
    for name, minute, n, faults in activity_rows(start):
        slot = int((minute - start).total_seconds() // 60)
        domain, _, workflow = (name or "").partition("/")
        if 0 <= slot < MINUTES:
            series[(domain, workflow)][0][slot] += n
            series[(domain, workflow)][1][slot] += faults
    charted = [
        Activity(
            domain,
            workflow,
            tuple(transitions),
            tuple(faults),
            _instances(workflow=f"{domain}/{workflow}"),
        )
        for (domain, workflow), (transitions, faults) in series.items()
    ]
    charted.sort(key=lambda chart: (-chart.total, chart.domain, chart.workflow))
    return charted[:MAX_WORKFLOWS]


def activity_rows(start: datetime) -> QuerySet[Any, tuple[str, datetime, int, int]]:
    """`("domain/workflow", minute, transitions, faults)` of the transitions started since
    `start`: a range of `transition_started`, grouped once. Each row's workflow is a scalar
    subquery on the instance's primary key, so the plan stays the hour's rows times an index
    lookup (a join could hash the whole instance table)."""
    workflow = Instance.objects.filter(pk=OuterRef("instance_id")).annotate(
        name=Concat("domain", Value("/"), "workflow_key", output_field=CharField())
    )
    return (
        InstanceTransition.objects.filter(started_at__gte=start)
        .annotate(
            workflow=Subquery(workflow.values("name")[:1]),
            minute=TruncMinute("started_at", tzinfo=UTC),
        )
        .values_list("workflow", "minute")
        .annotate(
            n=Count("pk"),
            faults=Count("pk", filter=Q(status=TransitionStatus.FAULTED)),
        )
        .order_by()
    )


def sparkline(
    transitions: tuple[int, ...], faults: tuple[int, ...], width: int = 180, height: int = 32
) -> SafeString:
    """An inline SVG: transitions (blue) and faults (red) per minute, on the same scale."""
    peak = max(max(transitions, default=0), 1)
    step = width / max(len(transitions) - 1, 1)

    def points(values: tuple[int, ...]) -> str:
        return " ".join(
            f"{index * step:.1f},{height - 1 - value * (height - 2) / peak:.1f}"
            for index, value in enumerate(values)
        )

    return format_html(
        '<svg class="vnext-spark" width="{}" height="{}" viewBox="0 0 {} {}" role="img">'
        "<title>peak {} per minute</title>"
        '<polyline class="vnext-spark-transitions" fill="none" points="{}"/>'
        '<polyline class="vnext-spark-faults" fill="none" points="{}"/></svg>',
        width,
        height,
        width,
        height,
        peak,
        points(transitions),
        points(faults),
    )
