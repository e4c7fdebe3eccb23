"""`manage.py import_components PATH...`: validate and publish component files."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from workflows.loader import discover_files, load_file
from workflows.services import BatchItem, components_publish_batch


class Command(BaseCommand):
    """Publish every component under the given files/folders in dependency order."""

    help = (
        "Validate and publish component definitions (files or folder trees such as "
        "core/Workflows/...). Script files named by `location` are embedded. Exit code 1 when "
        "anything was rejected."
    )
    dry_run = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", help="JSON files or folders")
        parser.add_argument("--published-by", default="import_components", help="audit name")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            files = list(discover_files(options["paths"]))
        except FileNotFoundError as exc:
            raise CommandError(str(exc)) from exc
        quiet = options["no_progress"] or options["verbosity"] == 0
        items = [load_file(path, root) for path, root in tqdm(files, desc="reading", disable=quiet)]
        pending = [item for item in items if item.status == "pending"]
        with tqdm(total=len(pending), desc=self.verb, disable=quiet) as bar:
            components_publish_batch(
                items=pending,
                published_by=options["published_by"],
                dry_run=self.dry_run,
                on_done=lambda _item: _advance(bar),
            )
        self._report(items, options["verbosity"])
        if any(item.status == "rejected" for item in items):
            raise CommandError("some components were rejected", returncode=1)

    verb = "publishing"

    def _report(self, items: list[BatchItem], verbosity: int) -> None:
        for item in items:
            if item.status == "rejected":
                self.stderr.write(self.style.ERROR(f"rejected  {item.source}"))
                if item.message:
                    self.stderr.write(f"    {item.message}")
                for violation in item.violations:
                    self.stderr.write(f"    {violation.pointer or '/'}: {violation.message}")
            elif verbosity >= 2 or (verbosity >= 1 and item.status == "published"):
                self.stdout.write(f"{item.status:<9} {item.ref or item.source}")
        counts: dict[str, int] = {}
        for item in items:
            counts[item.status] = counts.get(item.status, 0) + 1
        summary = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
        self.stdout.write(self.style.SUCCESS(f"{len(items)} file(s): {summary or 'nothing'}"))


def _advance(bar: tqdm) -> None:
    bar.update(1)
