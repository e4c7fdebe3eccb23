"""`manage.py instances_suspend`: suspend Active instances (status P), as the API and the admin
do: their transitions and retries are refused and their timers wait until they are resumed."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from instances.management.commands._operator_command import OperatorCommand
from instances.repair import Actor, instance_suspend


class Command(OperatorCommand):
    """Suspend instances."""

    help = "Suspend Active instances (--id UUID or business key, repeatable) of a --workflow."
    verb = "suspended"

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--reason", default="", help="why (kept in the history and audit)")

    def apply(self, domain: str, workflow: str, ref: str, actor: Actor, options: Any) -> str:
        """Suspend one instance."""
        instance = instance_suspend(
            domain=domain, workflow=workflow, ref=ref, actor=actor, reason=options["reason"]
        )
        return f"suspended in {instance.current_state}"
