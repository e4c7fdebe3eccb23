"""`manage.py instances_resume`: resume suspended instances, as the API and the admin do: timers
that came due while they were suspended fire now, the others at their time."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from instances.management.commands._operator_command import OperatorCommand
from instances.repair import Actor, instance_resume


class Command(OperatorCommand):
    """Resume instances."""

    help = "Resume suspended instances (--id UUID or business key, repeatable) of a --workflow."
    verb = "resumed"

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--reason", default="", help="why (kept in the history and audit)")

    def apply(self, domain: str, workflow: str, ref: str, actor: Actor, options: Any) -> str:
        """Resume one instance."""
        instance = instance_resume(
            domain=domain, workflow=workflow, ref=ref, actor=actor, reason=options["reason"]
        )
        return f"resumed in {instance.current_state}"
