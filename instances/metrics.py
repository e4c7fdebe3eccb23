"""The metrics the database holds, read when `/metrics` is scraped: every server process agrees
on them, and no process has to keep them up to date. A handful of aggregate queries on indexed
columns (jobs by status and kind, open incidents by code) and the instance counters (instances
by status: `instances.counts`, never a count of the instances table)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from django.db.models import Count
from django.utils import timezone
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from instances.counts import instance_counts
from instances.models import Incident, Instance
from instances.outbox import pending_summary
from instances.queue import jobs_tally_list
from instances.status import InstanceStatus, JobStatus
from vnext.conf import vnext_setting

# Job statuses a queue holds (the others are terminal).
QUEUED = (JobStatus.PENDING, JobStatus.RUNNING)


class DatabaseCollector(Collector):
    """Job queue depth and oldest due age by kind, instances by status, Busy past their lease,
    open incidents by error code."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Read the figures now."""
        now = timezone.now()
        depth = GaugeMetricFamily(
            "vnext_job_queue_depth",
            "Jobs waiting or running, by kind and status",
            labels=["kind", "status"],
        )
        age = GaugeMetricFamily(
            "vnext_job_queue_oldest_due_age_seconds",
            "How long the oldest due pending job of a kind has waited past its due time (0: none)",
            labels=["kind"],
        )
        rows = jobs_tally_list(statuses=QUEUED, by=["kind", "status"], oldest=True)
        oldest_by_kind: dict[str, float] = {}
        for kind, status, count, oldest in rows:
            depth.add_metric([kind, status], count)
            if status == JobStatus.PENDING:
                waited = (now - oldest).total_seconds() if oldest and oldest <= now else 0.0
                oldest_by_kind[kind] = max(oldest_by_kind.get(kind, 0.0), waited)
        for kind, waited in sorted(oldest_by_kind.items()):
            age.add_metric([kind], waited)
        yield depth
        yield age

        failed = GaugeMetricFamily(
            "vnext_jobs_failed", "Jobs failed for good (an operator replays them)", labels=["kind"]
        )
        for kind, count in jobs_tally_list(statuses=[JobStatus.FAILED], by=["kind"]):
            failed.add_metric([kind], count)
        yield failed

        instances = GaugeMetricFamily(
            "vnext_instances", "Instances by status (A, B, C, F, ...)", labels=["status"]
        )
        for status, count in sorted(instance_counts().items()):
            instances.add_metric([status], count)
        yield instances

        lease = timedelta(seconds=float(vnext_setting("BUSY_LEASE_SECONDS")))
        # A range of the (status, busy_since) index: the few Busy instances past their lease.
        yield GaugeMetricFamily(
            "vnext_instances_busy_past_lease",
            "Busy instances past VNEXT_BUSY_LEASE_SECONDS (the reaper faults them)",
            value=Instance.objects.filter(
                status=InstanceStatus.BUSY, busy_since__lt=now - lease
            ).count(),
        )

        incidents = GaugeMetricFamily(
            "vnext_incidents_open", "Open incidents by error code", labels=["error_code"]
        )
        for code, count in (
            Incident.objects.filter(resolved=False)
            .values_list("error_code")
            .annotate(n=Count("id"))
            .order_by("error_code")
        ):
            incidents.add_metric([code], count)
        yield incidents

        # The outbox's partial index of pending rows: a relay that is down or behind shows here.
        pending = GaugeMetricFamily(
            "vnext_outbox_pending_events",
            "Outbox events not yet confirmed by their broker, by target (counted up to 10,000)",
            labels=["target"],
        )
        oldest = GaugeMetricFamily(
            "vnext_outbox_oldest_pending_age_seconds",
            "Age of the oldest pending outbox event of a target (the relay's lag)",
            labels=["target"],
        )
        for target, count, since in pending_summary():
            pending.add_metric([target], count)
            oldest.add_metric([target], max((now - since).total_seconds(), 0.0))
        yield pending
        yield oldest

    @classmethod
    def registry(cls) -> CollectorRegistry:
        """A registry holding only this collector (scraped beside the process metrics)."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(cls())
        return registry
