"""`manage.py instances_archive`: archive completed instances past their retention to gzip JSON
Lines files and delete them from the database (`instances.archive`), or `--verify` the files."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from instances.archive import FolderArchive, archive_verify, instances_archive


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise CommandError(f"{value!r} is not a positive whole number")
    return number


class Command(BaseCommand):
    """Archive completed instances older than their workflow's retention, or verify the files."""

    help = (
        "Archive completed instances whose completion is older than their workflow's retention "
        "(attributes.retentionDays of its newest version, else VNEXT_RETENTION_DAYS; neither: "
        "kept forever): each batch is exported with its history, data versions, tasks, "
        "incidents, jobs and audit rows to one gzip JSON Lines file per completion day and "
        "workflow under VNEXT_ARCHIVE_DIR, with a manifest, read back, then deleted, leaving a "
        "tombstone (the API answers 410). --dry-run counts, --verify checks every file against "
        "its manifest. Exit code 1 when a batch failed or a file does not verify."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="count, change nothing")
        parser.add_argument("--limit", type=_positive, help="archive at most this many")
        parser.add_argument("--workflow", help="only this workflow (KEY or DOMAIN/KEY)")
        parser.add_argument(
            "--older-than-days",
            type=_positive,
            help="instead of every retention: completed more than this many days ago",
        )
        parser.add_argument("--batch-size", type=_positive, help="instances per transaction")
        parser.add_argument("--archive-dir", help="instead of VNEXT_ARCHIVE_DIR")
        parser.add_argument(
            "--verify", action="store_true", help="check the files (digest, counts); archive none"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        store = FolderArchive(options["archive_dir"])
        if options["verify"]:
            self._verify(store)
            return
        report = instances_archive(
            limit=options["limit"],
            workflow=options["workflow"],
            older_than_days=options["older_than_days"],
            dry_run=options["dry_run"],
            batch_size=options["batch_size"],
            archive=store,
        )
        verb = "would archive" if report.dry_run else "archived"
        for name, count in sorted(report.by_workflow.items()):
            self.stdout.write(f"{name}: {verb} {count}")
        for error in report.errors:
            self.stderr.write(error)
        if report.dry_run:
            self.stdout.write(
                f"{report.archived} instance(s) selected; nothing changed (--dry-run)"
            )
        else:
            self.stdout.write(
                f"{report.archived} instance(s) archived to {len(report.files)} file(s) under "
                f"{store.root}"
            )
        if report.errors:
            raise CommandError(f"{len(report.errors)} batch(es) not archived", returncode=1)

    def _verify(self, store: FolderArchive) -> None:
        report = archive_verify(archive=store)
        for name, problems in sorted(report.problems.items()):
            self.stderr.write(f"{name}: {'; '.join(problems)}")
        self.stdout.write(
            f"{report.checked} file(s) checked under {store.root}, "
            f"{len(report.problems)} with problems"
        )
        if not report.ok:
            raise CommandError(
                f"{len(report.problems)} archive file(s) do not verify", returncode=1
            )
