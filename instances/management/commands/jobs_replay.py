"""`manage.py jobs_replay`: put selected jobs back in the queue (the admin action does the same)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from instances.management.commands._job_filters import add_filters, selected_jobs
from instances.models import OperatorAction
from instances.operations import operator_action_record
from instances.replay import REPLAYED, job_replay
from instances.status import Channel


class Command(BaseCommand):
    """Replay jobs by id, instance, kind, status or time range."""

    help = (
        "Replay jobs. Each is reported as replayed, refused (why) or no effect (why). Succeeded "
        "timers are refused unless --force; --dry-run prints what would run. Exit code 1 when a "
        "named job does not exist or any job was not replayed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_filters(parser)
        parser.add_argument("--dry-run", action="store_true", help="print, change nothing")
        parser.add_argument("--force", action="store_true", help="replay succeeded jobs too")
        parser.add_argument("--operator", default="jobs_replay", help="recorded on the job")
        parser.add_argument("--no-progress", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        if not any(
            options.get(name) for name in ("ids", "instance", "kind", "status", "since", "until")
        ):
            raise CommandError(
                "select jobs with --id, --instance, --kind, --status, --since or --until"
            )
        jobs = list(selected_jobs(options))
        missing = set(options.get("ids") or []) - {job.pk for job in jobs}
        if missing:
            raise CommandError(f"no job with id {', '.join(map(str, sorted(missing)))}")
        if options["dry_run"]:
            for job in jobs:
                self.stdout.write(f"would replay job {job.pk} ({job.kind}, {job.status})")
            self.stdout.write(f"{len(jobs)} job(s) selected; nothing changed (--dry-run)")
            return
        results = []
        quiet = options["no_progress"] or options["verbosity"] == 0
        for job in tqdm(jobs, desc="replaying", disable=quiet):
            result = job_replay(job=job, force=options["force"], operator=options["operator"])
            operator_action_record(
                actor=options["operator"],
                action=OperatorAction.Action.REPLAY,
                channel=Channel.COMMAND,
                instance_id=job.instance_id,
                target=f"job {job.pk} ({job.kind})" + (" forced" if options["force"] else ""),
                outcome=str(result),
            )
            results.append(result)
        counts = {"replayed": 0, "refused": 0, "no effect": 0}
        for result in results:
            counts[result.outcome] += 1
            if result.outcome == REPLAYED:
                self.stdout.write(str(result))
            else:
                self.stderr.write(self.style.WARNING(str(result)))
        self.stdout.write(
            f"{counts['replayed']} replayed, {counts['refused']} refused, "
            f"{counts['no effect']} with no effect"
        )
        if counts["replayed"] != len(results):
            raise CommandError("some jobs were not replayed", returncode=1)
