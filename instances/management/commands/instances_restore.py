"""`manage.py instances_restore`: read archived instances back from the archive into the
database (`instances.archive.instance_restore`), each with every row it had."""

from __future__ import annotations

import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from instances.archive import ArchiveError, FolderArchive, instance_restore


def _uuid(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError as error:
        raise CommandError(f"{value!r} is not an instance UUID") from error


class Command(BaseCommand):
    """Restore archived instances by id."""

    help = (
        "Read archived instances back into the database: the instance, its history, data "
        "versions, tasks, incidents, jobs and audit rows, from the file its tombstone names "
        "(checked against its manifest first); the tombstone is removed, the file stays. Exit "
        "code 1 when one could not be restored."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("ids", nargs="+", type=_uuid, help="archived instance UUIDs")
        parser.add_argument("--archive-dir", help="instead of VNEXT_ARCHIVE_DIR")
        parser.add_argument("--operator", default="instances_restore", help="the audited actor")

    def handle(self, *args: Any, **options: Any) -> None:
        store = FolderArchive(options["archive_dir"])
        failed = 0
        for instance_id in options["ids"]:
            try:
                report = instance_restore(
                    instance_id=instance_id, archive=store, actor=options["operator"]
                )
            except ArchiveError as error:
                failed += 1
                self.stderr.write(f"{instance_id}: not restored ({error})")
                continue
            rows = ", ".join(f"{table} {count}" for table, count in report.rows.items() if count)
            self.stdout.write(f"{instance_id}: restored from {report.location} ({rows})")
        if failed:
            raise CommandError(f"{failed} instance(s) not restored", returncode=1)
