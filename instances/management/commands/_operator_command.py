"""What the suspend, resume and migrate commands share: instances named by `--id` (UUID or
business key) of one `--workflow`, each handled through the same service as the API, audited
with channel `command`, a summary at the end and exit code 1 when any was refused."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from instances.engine.errors import VNextError
from instances.management.commands._instance_refs import instance_id_of
from instances.repair import Actor
from instances.status import Channel


class OperatorCommand(BaseCommand):
    """Run `apply(domain, workflow, ref, actor, options) -> str` on each `--id`."""

    verb = "handled"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--id",
            action="append",
            dest="refs",
            required=True,
            help="an instance UUID or business key (repeat)",
        )
        parser.add_argument("--workflow", required=True, help="workflow key")
        parser.add_argument("--domain", default="core", help="domain (default core)")
        parser.add_argument("--operator", default=self.default_operator(), help="audited actor")

    def default_operator(self) -> str:
        """The actor recorded when `--operator` is not given: the command's name."""
        return type(self).__module__.rsplit(".", 1)[-1]

    def apply(self, domain: str, workflow: str, ref: str, actor: Actor, options: Any) -> str:
        """Handle one instance; the line to print. Raise `VNextError` to refuse it."""
        raise NotImplementedError

    def handle(self, *args: Any, **options: Any) -> None:
        domain, workflow = options["domain"], options["workflow"]
        actor = Actor(options["operator"], Channel.COMMAND)
        refused = 0
        for ref in options["refs"]:
            instance_id = instance_id_of(ref, domain=domain, workflow=workflow)
            try:
                line = self.apply(domain, workflow, str(instance_id), actor, options)
                self.stdout.write(f"{instance_id}: {line}")
            except VNextError as exc:
                refused += 1
                self.stdout.write(f"{instance_id}: refused ({exc.code}: {exc.detail})")
        total = len(options["refs"])
        self.stdout.write(f"{total - refused} {self.verb}, {refused} refused")
        if refused:
            raise CommandError(f"{refused} instance(s) refused", returncode=1)
