"""`manage.py jobs_prune`: delete ended jobs past their retention, then give the job table's
space back to new jobs (`VACUUM (ANALYZE)` on PostgreSQL, outside any transaction)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from instances.queue import jobs_prune_finished, jobs_reclaim_space


class Command(BaseCommand):
    """Prune ended jobs and reclaim the job table's space."""

    help = (
        "Delete succeeded, cancelled and skipped jobs older than VNEXT_JOB_RETENTION_DAYS and "
        "failed and instance-faulted ones older than VNEXT_FAILED_JOB_RETENTION_DAYS (never a "
        "pending or running one), then VACUUM (ANALYZE) the job table on PostgreSQL so the "
        "space is reused and the planner sees the smaller table (--no-vacuum skips it)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--no-vacuum", action="store_true", help="prune only")

    def handle(self, *args: Any, **options: Any) -> None:
        pruned = jobs_prune_finished()
        self.stdout.write(f"{pruned} job(s) pruned")
        if not options["no_vacuum"]:
            if jobs_reclaim_space():
                self.stdout.write("job table vacuumed and analyzed")
            else:
                self.stdout.write("job table not vacuumed (PostgreSQL only, outside a transaction)")
