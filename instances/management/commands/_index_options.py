"""The `--workflow` option `indexes_plan` and `indexes_apply` share, and their plan."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from instances.index_plans import IndexesUnsupported, IndexPlan, index_plan


def add_workflow_option(parser: CommandParser) -> None:
    """`--workflow DOMAIN/KEY`, repeatable: only these workflows (and the column indexes)."""
    parser.add_argument(
        "--workflow",
        action="append",
        metavar="DOMAIN/KEY",
        help="Only this workflow's field indexes, beside the column indexes (repeatable).",
    )


def selected_plan(options: dict[str, Any]) -> IndexPlan:
    """The plan for the chosen workflows (every published one by default)."""
    chosen = None
    if options.get("workflow"):
        chosen = []
        for text in options["workflow"]:
            domain, slash, key = text.partition("/")
            if not slash or not domain or not key:
                raise CommandError(f"--workflow takes DOMAIN/KEY, got {text!r}")
            chosen.append((domain, key))
    try:
        return index_plan(chosen)
    except (IndexesUnsupported, LookupError) as error:
        raise CommandError(str(error).strip("'\"")) from None
