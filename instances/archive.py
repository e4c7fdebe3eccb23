"""Retention and archive (README "Retention and archive"): completed instances older than their
workflow's retention leave the hot tables, with every row that refers to them, for gzip JSON
Lines files (one per completion day and workflow, each beside a manifest); a tombstone remembers
where each went, so the API answers 410 and `instances_restore` can read it back.

Concurrency: one short transaction per batch (`ARCHIVE_BATCH_SIZE` instances). It locks its
candidates `FOR UPDATE SKIP LOCKED`, so a row another transaction holds is skipped, never waited
for; candidates are Completed (terminal: no transition writes them any more), with no pending or
running job and no live parent or child, so a driven instance is never touched. The batch writes
and reads back its files, then deletes and leaves tombstones; a failure rolls the batch back and
removes its files. Every statement waits at most `LOCK_TIMEOUT` for a lock (PostgreSQL).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, models, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from instances.instance_rows import (
    UnknownColumn,
    instance_rows_delete,
    instance_rows_insert,
    instance_rows_of,
)
from instances.models import (
    ArchivedInstance,
    Correlation,
    Instance,
    OperatorAction,
)
from instances.queue import jobs_live_list
from instances.status import Channel, InstanceStatus
from vnext.conf import vnext_setting
from workflows.documents import ComponentKind
from workflows.models import Component

logger = logging.getLogger("vnext.archive")

FORMAT = "vnext-archive/1"
DATA_SUFFIX = ".jsonl.gz"
MANIFEST_SUFFIX = ".manifest.json"
# How long one statement of a batch waits for a lock before the batch gives up (and is retried
# by the next run): the archive yields to the live work, never the other way round.
LOCK_TIMEOUT = "2s"


class ArchiveError(Exception):
    """The archive refused or could not do what was asked; the message says why."""


# --- the store: a folder (an S3-compatible store would be another class with these methods) ---


class FolderArchive:
    """Archive files under a root folder; every write atomic (a temporary file, fsync, rename,
    fsync of the folder), so a reader sees a whole file or none."""

    def __init__(self, root: Path | str | None = None) -> None:
        configured = root or vnext_setting("ARCHIVE_DIR")
        self.root = Path(configured) if configured else Path(settings.BASE_DIR) / "var" / "archive"

    def write(self, relative: str, content: bytes) -> None:
        """Write `content` at `relative` atomically."""
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        with open(temporary, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
        folder = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)

    def read(self, relative: str) -> bytes:
        """The bytes at `relative`; ArchiveError when there is no such file."""
        try:
            return (self.root / relative).read_bytes()
        except FileNotFoundError:
            raise ArchiveError(f"archive file {relative} is missing under {self.root}") from None

    def remove(self, relative: str) -> None:
        """Remove `relative` if it is there."""
        (self.root / relative).unlink(missing_ok=True)

    def manifests(self) -> Iterator[str]:
        """Every manifest, as paths relative to the root, sorted."""
        if self.root.is_dir():
            for path in sorted(self.root.rglob(f"*{MANIFEST_SUFFIX}")):
                yield path.relative_to(self.root).as_posix()

    def data_files(self) -> Iterator[str]:
        """Every data file, relative to the root, sorted."""
        if self.root.is_dir():
            for path in sorted(self.root.rglob(f"*{DATA_SUFFIX}")):
                yield path.relative_to(self.root).as_posix()


def manifest_of(data_file: str) -> str:
    """The manifest beside a data file."""
    return data_file.removesuffix(DATA_SUFFIX) + MANIFEST_SUFFIX


# --- retention -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Retention:
    """How long a workflow's completed instances stay: `days` None keeps them forever."""

    domain: str
    workflow: str
    days: int | None

    @property
    def name(self) -> str:
        """`domain/workflow`."""
        return f"{self.domain}/{self.workflow}"


def retention_list(*, older_than_days: int | None = None) -> list[Retention]:
    """Each published workflow's retention: its newest version's `attributes.retentionDays`,
    else `RETENTION_DAYS`; `older_than_days` (an operator's choice) overrides both."""
    default = vnext_setting("RETENTION_DAYS")
    rows = (
        Component.objects.filter(kind=ComponentKind.WORKFLOW)
        .order_by(
            "domain",
            "key",
            "-version_major",
            "-version_minor",
            "-version_patch",
            "-version_is_release",
            "-version_prerelease",
        )
        .values_list("domain", "key", "document__attributes__retentionDays")
    )
    newest: dict[tuple[str, str], Any] = {}
    for domain, key, days in rows:
        newest.setdefault((domain, key), days)
    retentions = []
    for (domain, key), days in newest.items():
        chosen = older_than_days if older_than_days is not None else (days or default)
        retentions.append(Retention(domain, key, int(chosen) if chosen else None))
    return retentions


def archive_candidate_list(*, retention: Retention, now: datetime) -> models.QuerySet[Instance]:
    """The instances of a workflow the archive may take now, oldest completion first: Completed
    longer ago than the retention, with no pending or running job, and no relative that is not
    Completed (archiving would write its rows)."""
    if retention.days is None:
        return Instance.objects.none()
    cutoff = now - timedelta(days=retention.days)
    live_job = jobs_live_list(instance_id=OuterRef("pk"))
    live_child = Correlation.objects.filter(parent_id=OuterRef("pk"), child__isnull=False).exclude(
        child__status=InstanceStatus.COMPLETED
    )
    live_parent = Correlation.objects.filter(
        Q(child_id=OuterRef("pk")) | Q(pk=OuterRef("parent_correlation_id"))
    ).exclude(parent__status=InstanceStatus.COMPLETED)
    return (
        Instance.objects.filter(
            domain=retention.domain,
            workflow_key=retention.workflow,
            status=InstanceStatus.COMPLETED,
            completed_at__lt=cutoff,
        )
        .exclude(Exists(live_job))
        .exclude(Exists(live_child))
        .exclude(Exists(live_parent))
        .order_by("completed_at", "id")
    )


# --- archiving -------------------------------------------------------------------------------


@dataclass
class ArchiveReport:
    """What a run did (or, with `dry_run`, would do)."""

    dry_run: bool = False
    archived: int = 0
    by_workflow: Counter[str] = field(default_factory=Counter)
    files: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def instances_archive(
    *,
    limit: int | None = None,
    workflow: str | None = None,
    older_than_days: int | None = None,
    dry_run: bool = False,
    batch_size: int | None = None,
    archive: FolderArchive | None = None,
    now: datetime | None = None,
) -> ArchiveReport:
    """Archive up to `limit` completed instances past their retention (of `workflow`, `KEY` or
    `DOMAIN/KEY`, when given), batch by batch; `dry_run` only counts them. A batch that fails
    (a lock not granted in time, a file that does not read back) is rolled back, its files
    removed, and reported in `errors`; the run goes on with the next workflow."""
    report = ArchiveReport(dry_run=dry_run)
    store = archive or FolderArchive()
    size = max(1, int(batch_size or vnext_setting("ARCHIVE_BATCH_SIZE")))
    yield_ratio = max(0.0, float(vnext_setting("ARCHIVE_YIELD_RATIO")))
    moment = now or timezone.now()
    remaining = limit
    for retention in retention_list(older_than_days=older_than_days):
        if workflow and workflow not in (retention.workflow, retention.name):
            continue
        candidates = archive_candidate_list(retention=retention, now=moment)
        if dry_run:
            counted = (
                candidates[:remaining].count() if remaining is not None else candidates.count()
            )
            if counted:
                report.by_workflow[retention.name] += counted
                report.archived += counted
            if remaining is not None:
                remaining -= counted
        while not dry_run and (remaining is None or remaining > 0):
            wanted = size if remaining is None else min(size, remaining)
            began = time.monotonic()
            try:
                done = _archive_batch(candidates, wanted, store, report, moment)
                # Live traffic first: rest `ARCHIVE_YIELD_RATIO` times as long as the batch
                # took (1.0: the archive keeps at most half of one core and of the disk busy).
                time.sleep((time.monotonic() - began) * yield_ratio if done else 0.0)
            except (DatabaseError, ArchiveError) as failure:
                message = f"{retention.name}: batch not archived ({failure})"
                logger.warning("%s", message)
                report.errors.append(message)
                break
            if not done:
                break
            report.archived += done
            report.by_workflow[retention.name] += done
            if remaining is not None:
                remaining -= done
        if remaining is not None and remaining <= 0:
            break
    return report


def _archive_batch(
    candidates: models.QuerySet[Instance],
    size: int,
    store: FolderArchive,
    report: ArchiveReport,
    now: datetime,
) -> int:
    """One batch in one transaction; how many instances it archived (0: none left)."""
    written: list[str] = []
    try:
        with transaction.atomic():
            _short_lock_waits()
            locked = candidates.select_for_update(skip_locked=True).values()[:size]
            instances: list[dict[str, Any]] = [dict(row) for row in locked]
            if not instances:
                return 0
            ids = [row["id"] for row in instances]
            rows = instance_rows_of(ids, instances)
            by_day: dict[date, list[Any]] = defaultdict(list)
            for row in instances:
                by_day[row["completed_at"].astimezone(UTC).date()].append(row["id"])
            location_of: dict[Any, str] = {}
            first = instances[0]
            for day, day_ids in sorted(by_day.items()):
                relative = _file_name(first["domain"], first["workflow_key"], day, now)
                _write_verified(store, relative, first, day, day_ids, rows, written)
                location_of.update(dict.fromkeys(day_ids, relative))
            instance_rows_delete(ids, rows)
            ArchivedInstance.objects.bulk_create(
                [
                    ArchivedInstance(
                        instance_id=row["id"],
                        domain=row["domain"],
                        workflow_key=row["workflow_key"],
                        key=row["key"],
                        completed_at=row["completed_at"],
                        archived_at=now,
                        location=location_of[row["id"]],
                    )
                    for row in instances
                ]
            )
    except BaseException:
        # The rows stay in the database: files describing them as archived must not.
        for relative in written:
            store.remove(relative)
        raise
    report.files.extend(name for name in written if name.endswith(DATA_SUFFIX))
    return len(instances)


def _short_lock_waits() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")


def _file_name(domain: str, workflow: str, day: date, now: datetime) -> str:
    stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%S")
    return (
        f"{domain}/{workflow}/{day.isoformat()}/"
        f"{workflow}-{day.isoformat()}-{stamp}-{uuid.uuid4().hex[:8]}{DATA_SUFFIX}"
    )


def _write_verified(
    store: FolderArchive,
    relative: str,
    first: dict[str, Any],
    day: date,
    day_ids: list[Any],
    rows: dict[str, list[dict[str, Any]]],
    written: list[str],
) -> None:
    """Write one day's file and its manifest, then read both back and check them."""
    wanted = set(day_ids)
    lines: list[bytes] = []
    counts: Counter[str] = Counter()
    for table, table_rows in rows.items():
        for row in table_rows:
            if row["_instance"] not in wanted:
                continue
            body = {name: value for name, value in row.items() if name != "_instance"}
            lines.append(_line(table, row["_instance"], body))
            counts[table] += 1
    content = gzip.compress(b"".join(lines), compresslevel=6, mtime=0)
    manifest = {
        "format": FORMAT,
        "file": relative.rsplit("/", 1)[-1],
        "domain": first["domain"],
        "workflow": first["workflow_key"],
        "day": day.isoformat(),
        "instances": len(day_ids),
        "rows": dict(sorted(counts.items())),
        "bytes": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
        "createdAt": timezone.now().isoformat(),
    }
    written.append(relative)
    store.write(relative, content)
    written.append(manifest_of(relative))
    store.write(manifest_of(relative), json.dumps(manifest, indent=2).encode())
    problems = verify_file(store, manifest_of(relative))
    if problems:
        raise ArchiveError(f"{relative} did not read back: {'; '.join(problems)}")


def _line(table: str, instance_id: Any, row: dict[str, Any]) -> bytes:
    record = {"table": table, "instance": str(instance_id), "row": row}
    text = json.dumps(record, default=_encode, ensure_ascii=False, separators=(",", ":"))
    return text.encode() + b"\n"


def _encode(value: Any) -> Any:
    # Full precision: a restored row equals the archived one (DjangoJSONEncoder drops
    # microseconds).
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, uuid.UUID | Decimal):
        return str(value)
    raise TypeError(f"cannot archive a {type(value).__name__}")


# --- reading back ----------------------------------------------------------------------------


def read_lines(content: bytes) -> Iterator[dict[str, Any]]:
    """The records of a data file's bytes."""
    for raw in gzip.decompress(content).splitlines():
        if raw.strip():
            yield json.loads(raw)


def verify_file(store: FolderArchive, manifest_path: str) -> list[str]:
    """What is wrong with one manifest's data file (digest, size, row counts per table): an
    empty list when it verifies."""
    try:
        manifest = json.loads(store.read(manifest_path))
    except (ArchiveError, ValueError) as failure:
        return [f"manifest unreadable: {failure}"]
    data_path = manifest_path.removesuffix(MANIFEST_SUFFIX) + DATA_SUFFIX
    try:
        content = store.read(data_path)
    except ArchiveError as failure:
        return [str(failure)]
    problems = []
    digest = hashlib.sha256(content).hexdigest()
    if digest != manifest.get("sha256"):
        problems.append(f"sha256 {digest} is not the manifest's {manifest.get('sha256')}")
    if len(content) != manifest.get("bytes"):
        problems.append(f"{len(content)} bytes, the manifest says {manifest.get('bytes')}")
    counts: Counter[str] = Counter()
    instances = set()
    try:
        for record in read_lines(content):
            counts[record["table"]] += 1
            if record["table"] == "instance":
                instances.add(record["instance"])
    except (OSError, EOFError, ValueError, KeyError) as failure:
        return [*problems, f"unreadable: {failure}"]
    if dict(sorted(counts.items())) != manifest.get("rows"):
        problems.append(
            f"rows {dict(sorted(counts.items()))}, the manifest says {manifest['rows']}"
        )
    if len(instances) != manifest.get("instances"):
        problems.append(f"{len(instances)} instances, the manifest says {manifest['instances']}")
    return problems


@dataclass
class VerifyReport:
    """Each file checked and what is wrong with it (nothing, for a file that verifies)."""

    checked: int = 0
    problems: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every file verified."""
        return not self.problems


def archive_verify(*, archive: FolderArchive | None = None) -> VerifyReport:
    """Check every archive file against its manifest (sha256, size, rows per table, instances);
    a data file without a manifest is a problem too."""
    store = archive or FolderArchive()
    report = VerifyReport()
    with_manifest = set()
    for manifest_path in store.manifests():
        data_path = manifest_path.removesuffix(MANIFEST_SUFFIX) + DATA_SUFFIX
        with_manifest.add(data_path)
        report.checked += 1
        problems = verify_file(store, manifest_path)
        if problems:
            report.problems[data_path] = problems
    for data_path in store.data_files():
        if data_path not in with_manifest:
            report.checked += 1
            report.problems[data_path] = ["no manifest"]
    return report


def archived_instance_get(*, domain: str, workflow: str, ref: str) -> ArchivedInstance | None:
    """The tombstone of `ref` (UUID or business key) of a workflow, or None: the API's 410."""
    try:
        instance_id = uuid.UUID(ref)
    except ValueError:
        return (
            ArchivedInstance.objects.filter(domain=domain, workflow_key=workflow, key=ref)
            .order_by("-archived_at")
            .first()
        )
    return ArchivedInstance.objects.filter(
        pk=instance_id, domain=domain, workflow_key=workflow
    ).first()


# --- restoring -------------------------------------------------------------------------------


@dataclass
class RestoreReport:
    """The rows put back, per table, and the file they came from."""

    instance_id: uuid.UUID
    location: str
    rows: Counter[str] = field(default_factory=Counter)


def instance_restore(
    *,
    instance_id: uuid.UUID | str,
    archive: FolderArchive | None = None,
    actor: str = "instances_restore",
) -> RestoreReport:
    """Read an archived instance back from its file into the database, with every row it had,
    and remove its tombstone; the file stays (archive files are never rewritten). The links
    archiving nulled on rows that stayed are put back where both ends exist. Audited as
    `actor`'s `restore` (one more operator-action row beside the restored ones)."""
    store = archive or FolderArchive()
    wanted = uuid.UUID(str(instance_id))
    tombstone = ArchivedInstance.objects.filter(pk=wanted).first()
    if tombstone is None:
        raise ArchiveError(f"instance {wanted} is not archived (no tombstone)")
    if Instance.objects.filter(pk=wanted).exists():
        raise ArchiveError(f"instance {wanted} is in the database already")
    problems = verify_file(store, manifest_of(tombstone.location))
    if problems:
        raise ArchiveError(f"{tombstone.location} does not verify: {'; '.join(problems)}")
    records = [
        record
        for record in read_lines(store.read(tombstone.location))
        if record["instance"] == str(wanted)
    ]
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        grouped[record["table"]].append(record["row"])
    if len(grouped.get("instance", [])) != 1:
        raise ArchiveError(f"{tombstone.location} does not hold instance {wanted}")
    report = RestoreReport(instance_id=wanted, location=tombstone.location)
    with transaction.atomic():
        try:
            report.rows.update(instance_rows_insert(grouped))
        except UnknownColumn as exc:
            raise ArchiveError(str(exc)) from exc
        tombstone.delete()
        OperatorAction.objects.create(
            actor=actor,
            action=OperatorAction.Action.RESTORE,
            channel=Channel.COMMAND,  # `instances_restore` is its only way in
            instance_id=wanted,
            target=tombstone.location[:200],
            outcome="restored",
        )
    return report
