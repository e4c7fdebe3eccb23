"""Job selection options shared by `jobs_list` and `jobs_replay`."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db.models import QuerySet
from django.utils.dateparse import parse_datetime

from instances.models import Job
from instances.status import JobKind, JobStatus


def add_filters(parser: CommandParser) -> None:
    """--id, --instance, --kind, --status, --since, --until."""
    parser.add_argument("--id", type=int, action="append", dest="ids", help="a job id (repeat)")
    parser.add_argument("--instance", help="instance UUID")
    parser.add_argument("--kind", choices=[kind.value for kind in JobKind])
    parser.add_argument("--status", choices=[status.value for status in JobStatus])
    parser.add_argument("--since", help="created at or after (ISO 8601)")
    parser.add_argument("--until", help="created before (ISO 8601)")


def _moment(value: str, name: str) -> Any:
    parsed = parse_datetime(value)
    if parsed is None:
        raise CommandError(f"--{name} {value!r} is not an ISO 8601 date-time")
    return parsed


def selected_jobs(options: dict[str, Any]) -> QuerySet[Job]:
    """The jobs the options select, oldest first."""
    jobs = Job.objects.all()
    if options.get("ids"):
        jobs = jobs.filter(pk__in=options["ids"])
    if options.get("instance"):
        jobs = jobs.filter(instance_id=options["instance"])
    if options.get("kind"):
        jobs = jobs.filter(kind=options["kind"])
    if options.get("status"):
        jobs = jobs.filter(status=options["status"])
    if options.get("since"):
        jobs = jobs.filter(created_at__gte=_moment(options["since"], "since"))
    if options.get("until"):
        jobs = jobs.filter(created_at__lt=_moment(options["until"], "until"))
    return jobs.order_by("created_at", "pk")
