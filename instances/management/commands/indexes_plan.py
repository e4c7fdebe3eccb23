"""`manage.py indexes_plan`: the search indexes of the instance listings, as SQL to review."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from instances.index_plans import plan_sql
from instances.management.commands._index_options import add_workflow_option, selected_plan


class Command(BaseCommand):
    """Print the plan: present indexes as comments, the SQL of missing (and invalid) ones."""

    help = (
        "Print the SQL of the search indexes the x-indexed master-schema fields and the "
        "instance columns need (CREATE INDEX CONCURRENTLY); manage.py indexes_apply runs it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_workflow_option(parser)
        parser.add_argument(
            "--all", action="store_true", help="The statements of present indexes too."
        )
        parser.add_argument(
            "--check",
            action="store_true",
            help="Exit with status 1 when an index is missing or invalid.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        plan = selected_plan(options)
        self.stdout.write(plan_sql(plan, everything=options["all"]), ending="")
        if options["check"] and plan.pending:
            raise SystemExit(1)
