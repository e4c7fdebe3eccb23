"""`manage.py jobs_run`: run due jobs in this process (once, or as a standalone embedded worker)."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from instances.job_handlers import jobs_run_due


class Command(BaseCommand):
    """Run the jobs that are due now."""

    help = "Run due jobs here: once, or --loop until interrupted."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--loop", action="store_true", help="keep polling every second")

    def handle(self, *args: Any, **options: Any) -> None:
        while True:
            counts = jobs_run_due()
            if counts or not options["loop"]:
                self.stdout.write(", ".join(f"{n} {k}" for k, n in counts.items()) or "no job due")
            if not options["loop"]:
                return
            time.sleep(1.0)
