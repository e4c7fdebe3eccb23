"""`manage.py validate_components PATH...`: the import checks, nothing stored."""

from __future__ import annotations

from workflows.management.commands.import_components import Command as ImportCommand


class Command(ImportCommand):
    """Validate component files exactly as `import_components` would, without publishing."""

    help = (
        "Validate component definitions (the same checks as import_components) without "
        "storing anything. Exit code 1 when anything is invalid."
    )
    dry_run = True
    verb = "validating"
