"""`manage.py instances_migrate`: migrate running instances to another published version of their
workflow, as the API does (`--dry-run` prints each one's report and changes nothing)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser

from instances.management.commands._operator_command import OperatorCommand
from instances.repair import Actor, instance_migrate


def _mapping(pairs: list[str]) -> dict[str, str]:
    mapping = {}
    for pair in pairs:
        old, sep, new = pair.partition("=")
        if not sep or not old or not new:
            raise CommandError(f"--map {pair!r}: write old-state=new-state")
        mapping[old] = new
    return mapping


class Command(OperatorCommand):
    """Migrate instances to another version."""

    help = (
        "Migrate running instances (--id, repeatable) of a --workflow to --to VERSION, each state "
        "to its counterpart (same key, or --map old=new). --dry-run prints the report only."
    )
    verb = "migrated"

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--to", required=True, dest="target", help="target version")
        parser.add_argument(
            "--map", action="append", default=[], help="old-state=new-state (repeat)"
        )
        parser.add_argument("--dry-run", action="store_true", help="print, change nothing")

    def apply(self, domain: str, workflow: str, ref: str, actor: Actor, options: Any) -> str:
        """Migrate one instance (or report what that would do)."""
        plan = instance_migrate(
            domain=domain,
            workflow=workflow,
            ref=ref,
            target_version=options["target"],
            state_mapping=_mapping(options["map"]),
            actor=actor,
            dry_run=options["dry_run"],
        )
        if options["dry_run"]:
            if plan.refusal is not None:
                raise plan.refusal
            return "would migrate: " + json.dumps(plan.as_json(), sort_keys=True)
        timers = ", ".join(f"{t.transition} {t.action}" for t in plan.timers) or "no timers"
        return (
            f"{plan.instance.workflow_version} -> {plan.target_version}, state "
            f"{plan.instance.current_state} -> {plan.to_state}; {timers}"
        )
