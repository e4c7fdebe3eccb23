"""`manage.py jobs_list`: the job queue, filtered."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from instances.management.commands._job_filters import add_filters, selected_jobs


class Command(BaseCommand):
    """List jobs by id, instance, kind, status or time range."""

    help = "List jobs of the durable queue."

    def add_arguments(self, parser: CommandParser) -> None:
        add_filters(parser)
        parser.add_argument("--limit", type=int, default=50)

    def handle(self, *args: Any, **options: Any) -> None:
        jobs = selected_jobs(options)[: options["limit"]]
        self.stdout.write(
            f"{'id':>8}  {'kind':<10} {'status':<10} {'attempts':>8}  run_at / instance"
        )
        for job in jobs:
            self.stdout.write(
                f"{job.pk:>8}  {job.kind:<10} {job.status:<10} {job.attempts:>8}  "
                f"{job.run_at:%Y-%m-%d %H:%M:%S}  {job.instance_id or '-'}"
                + (f"  ({job.last_error[:60]})" if job.last_error else "")
            )
