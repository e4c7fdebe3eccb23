"""Job selection options shared by `jobs_list` and `jobs_replay`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.management.base import CommandError, CommandParser
from django.db.models import QuerySet
from django.utils.dateparse import parse_datetime

from instances.queue import jobs_list
from instances.status import JobKind, JobStatus

if TYPE_CHECKING:
    from instances.job_table import Job


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
    return jobs_list(
        ids=options.get("ids") or (),
        instance_id=options.get("instance"),
        kind=options.get("kind"),
        status=options.get("status"),
        since=_moment(options["since"], "since") if options.get("since") else None,
        until=_moment(options["until"], "until") if options.get("until") else None,
    )
