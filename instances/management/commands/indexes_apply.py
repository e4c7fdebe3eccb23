"""`manage.py indexes_apply`: build the planned search indexes without blocking writes."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from instances.index_plans import ApplyRefused, index_apply
from instances.management.commands._index_options import add_workflow_option, selected_plan


class Command(BaseCommand):
    """Build what `indexes_plan` shows missing, one CREATE INDEX CONCURRENTLY at a time."""

    help = (
        "Build the missing search indexes (and rebuild invalid ones) with CREATE INDEX "
        "CONCURRENTLY, reporting progress; safe to run again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_workflow_option(parser)
        parser.add_argument(
            "--drop-obsolete",
            action="store_true",
            help="Also drop vnext_ix_ indexes the plan no longer has (DROP INDEX CONCURRENTLY).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        plan = selected_plan(options)
        if not plan.pending and not (options["drop_obsolete"] and plan.obsolete):
            self.stdout.write(f"Nothing to build: {len(plan.indexes)} planned indexes checked.")
            return
        try:
            result = index_apply(
                plan, drop_obsolete=options["drop_obsolete"], report=self.stdout.write
            )
        except ApplyRefused as error:
            raise CommandError(str(error)) from None
        self.stdout.write(
            f"Built {len(result.built)}, failed {len(result.failed)}, skipped "
            f"{len(result.skipped)}, dropped {len(result.dropped)}."
        )
        if result.failed:
            raise CommandError(f"{len(result.failed)} index(es) failed: {', '.join(result.failed)}")
