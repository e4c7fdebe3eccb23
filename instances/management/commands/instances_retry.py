"""`manage.py instances_retry`: retry Faulted instances in bulk through the same service as the
admin's Retry action and the API's `POST .../retry` (`operator_retry` -> `instance_retry`)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Q, QuerySet
from django.utils.dateparse import parse_datetime
from tqdm import tqdm

from instances.management.commands._instance_refs import instance_id_of
from instances.models import Instance
from instances.operations import (
    FAULTED_AGAIN,
    REFUSED,
    RETRIED,
    SKIPPED,
    operator_retry,
    retry_plan,
)
from instances.status import Channel, InstanceStatus

_SELECTORS = ("refs", "workflow", "state", "error_code", "since", "until", "all")


def _moment(value: str, name: str) -> Any:
    parsed = parse_datetime(value)
    if parsed is None:
        raise CommandError(f"--{name} {value!r} is not an ISO 8601 date-time")
    return parsed


class Command(BaseCommand):
    """Retry Faulted instances selected by id, workflow, state, error code or time range."""

    help = (
        "Retry Faulted instances: each re-runs its faulting transition from the step that "
        "failed, and is reported as retried (new status), faulted again (code), refused (why) "
        "or skipped (not faulted). --since/--until match an open incident's creation or the "
        "instance's last change. --id takes a UUID or a business key (the live instance first). "
        "--dry-run prints what would re-run. Exit code 1 when any retry faulted again or was "
        "refused, or a named instance does not exist; 2 when a business key names instances "
        "of several workflows (add --workflow/--domain)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--id",
            action="append",
            dest="refs",
            help="an instance UUID or business key (repeat; a key shared by several workflows "
            "needs --workflow, and --domain)",
        )
        parser.add_argument("--workflow", help="workflow key")
        parser.add_argument("--domain", help="domain (narrows --id business keys and --workflow)")
        parser.add_argument("--state", help="current state key")
        parser.add_argument("--error-code", dest="error_code", help="an open incident's code")
        parser.add_argument("--since", help="faulted at or after (ISO 8601)")
        parser.add_argument("--until", help="faulted before (ISO 8601)")
        parser.add_argument("--all", action="store_true", help="every Faulted instance")
        parser.add_argument("--dry-run", action="store_true", help="print, change nothing")
        parser.add_argument("--operator", default="instances_retry", help="the audited actor")
        parser.add_argument("--no-progress", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        if not any(options.get(name) for name in _SELECTORS):
            raise CommandError(
                "select instances with --id, --workflow, --state, --error-code, --since, "
                "--until, or --all"
            )
        options["ids"] = [
            instance_id_of(ref, domain=options.get("domain"), workflow=options.get("workflow"))
            for ref in options.get("refs") or []
        ]
        instances = list(self._selected(options))
        missing = set(options.get("ids") or []) - {instance.id for instance in instances}
        if missing:
            raise CommandError(f"no instance with id {', '.join(sorted(map(str, missing)))}")
        if options["dry_run"]:
            for instance in instances:
                plan = retry_plan(instance=instance)
                if not plan.faulted:
                    self.stdout.write(f"{instance.id}: not faulted, skipped")
                    continue
                incident = plan.incident.error_code if plan.incident else "none"
                self.stdout.write(
                    f"would retry {instance.id} ({instance.workflow_key}, state "
                    f"{instance.current_state}): re-runs {plan.reruns}; resolves {incident}"
                )
            self.stdout.write(f"{len(instances)} instance(s) selected; nothing changed (--dry-run)")
            return
        quiet = options["no_progress"] or options["verbosity"] == 0
        counts = dict.fromkeys((RETRIED, FAULTED_AGAIN, REFUSED, SKIPPED), 0)
        for instance in tqdm(instances, desc="retrying", disable=quiet):
            result = operator_retry(
                instance=instance, actor=options["operator"], channel=Channel.COMMAND
            )
            counts[result.outcome] += 1
            if result.failed:
                self.stderr.write(self.style.WARNING(str(result)))
            else:
                self.stdout.write(str(result))
        self.stdout.write(
            f"{counts[RETRIED]} retried, {counts[FAULTED_AGAIN]} faulted again, "
            f"{counts[REFUSED]} refused, {counts[SKIPPED]} skipped"
        )
        if counts[FAULTED_AGAIN] or counts[REFUSED]:
            raise CommandError("some retries failed", returncode=1)

    def _selected(self, options: dict[str, Any]) -> QuerySet[Instance]:
        """Faulted instances matching every option, oldest first; named ones in any status
        (they are reported as skipped when not faulted)."""
        instances = Instance.objects.all()
        if options.get("ids"):
            instances = instances.filter(pk__in=options["ids"])
        else:
            instances = instances.filter(status=InstanceStatus.FAULTED)
        if options.get("domain"):
            instances = instances.filter(domain=options["domain"])
        if options.get("workflow"):
            instances = instances.filter(workflow_key=options["workflow"])
        if options.get("state"):
            instances = instances.filter(current_state=options["state"])
        if options.get("error_code"):
            instances = instances.filter(
                incidents__resolved=False, incidents__error_code=options["error_code"]
            )
        if options.get("since"):
            since = _moment(options["since"], "since")
            instances = instances.filter(
                Q(updated_at__gte=since)
                | Q(incidents__resolved=False, incidents__created_at__gte=since)
            )
        if options.get("until"):
            until = _moment(options["until"], "until")
            instances = instances.filter(
                Q(updated_at__lt=until)
                | Q(incidents__resolved=False, incidents__created_at__lt=until)
            )
        return instances.distinct().order_by("created_at", "id")
