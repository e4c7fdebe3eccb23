"""`manage.py batches`: batch operations over a filter, as the API runs them — `create` (or its
`--dry-run` count), `show` (progress and the items not done), `cancel`, and `run` (work a batch
off in this process, for an installation without a running job runner)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from instances.batches import (
    batch_cancel,
    batch_count,
    batch_create,
    batch_items,
    batch_request,
    batch_work,
)
from instances.engine.errors import VNextError
from instances.models import Batch
from instances.repair import Actor
from instances.status import BatchOperation, BatchOutcome, Channel


class Command(BaseCommand):
    """Create, show, cancel or run batch operations."""

    help = (
        "Batch operations (retry, cancel, suspend, resume, migrate) over the instances a filter "
        "of the list API's language matches: create | show ID | cancel ID | run ID."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="freeze the matching ids and start")
        create.add_argument("--workflow", required=True)
        create.add_argument("--domain", default="core")
        create.add_argument(
            "--operation", required=True, choices=[str(op) for op in BatchOperation]
        )
        create.add_argument(
            "--filter",
            action="append",
            default=[],
            help="the list API's filter (repeat: all must hold; a JSON object is the JSON form)",
        )
        create.add_argument("--reason", help="cancel, suspend, resume: why")
        create.add_argument("--to", dest="target", help="migrate: the target version")
        create.add_argument("--map", action="append", default=[], help="migrate: old=new")
        create.add_argument("--attributes", help="retry: the correction, a JSON object")
        create.add_argument("--dry-run", action="store_true", help="count only")
        create.add_argument("--operator", default="batches", help="the audited actor")
        for name in ("show", "cancel", "run"):
            one = actions.add_parser(name)
            one.add_argument("batch", help="the batch id")
            if name == "cancel":
                one.add_argument("--operator", default="batches", help="the audited actor")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            getattr(self, f"_{options['action']}")(options)
        except VNextError as exc:
            raise CommandError(f"{exc.code}: {exc.detail}", returncode=1) from exc

    def _create(self, options: Any) -> None:
        body: dict[str, Any] = {"operation": options["operation"]}
        filters = [json.loads(f) if f.lstrip().startswith("{") else f for f in options["filter"]]
        body["filter"] = (
            filters[0] if len(filters) == 1 and isinstance(filters[0], dict) else filters
        )
        if options.get("reason"):
            body["reason"] = options["reason"]
        if options.get("target"):
            body["targetVersion"] = options["target"]
        if options["map"]:
            body["stateMapping"] = dict(pair.split("=", 1) for pair in options["map"])
        if options.get("attributes"):
            body["attributes"] = json.loads(options["attributes"])
        request = batch_request(body)
        scope = {"domain": options["domain"], "workflow": options["workflow"]}
        if options["dry_run"]:
            total = batch_count(**scope, request=request, visible=None, roles=frozenset())
            self.stdout.write(f"{total} instance(s) match; nothing created (--dry-run)")
            return
        batch = batch_create(
            **scope,
            request=request,
            actor=Actor(options["operator"], Channel.COMMAND),
            visible=None,
            roles=frozenset(),
        )
        self.stdout.write(f"batch {batch.pk}: {batch.total} instance(s), {batch.status}")

    def _batch(self, options: Any) -> Batch:
        try:
            return Batch.objects.get(pk=uuid.UUID(options["batch"]))
        except (ValueError, Batch.DoesNotExist):
            raise CommandError(f"no batch {options['batch']!r}", returncode=1) from None

    def _show(self, options: Any) -> None:
        batch = self._batch(options)
        self.stdout.write(
            f"{batch.operation} batch {batch.pk} [{batch.status}] of "
            f"{batch.domain}/{batch.workflow_key}: {batch.handled}/{batch.total} handled, "
            f"{batch.done} done, {batch.refused} refused, {batch.failed} failed"
        )
        for outcome in (BatchOutcome.REFUSED, BatchOutcome.FAILED):
            for item in batch_items(batch, outcome=outcome, limit=1000):
                self.stdout.write(f"  {item.instance_id}: {item.outcome} ({item.reason})")

    def _cancel(self, options: Any) -> None:
        batch = batch_cancel(
            batch=self._batch(options), actor=Actor(options["operator"], Channel.COMMAND)
        )
        self.stdout.write(f"batch {batch.pk} cancelled after {batch.handled}/{batch.total}")

    def _run(self, options: Any) -> None:
        batch = self._batch(options)
        while batch_work(batch.pk):
            batch.refresh_from_db()
            self.stdout.write(f"{batch.handled}/{batch.total} handled")
        self._show(options)
