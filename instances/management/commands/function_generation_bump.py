"""`manage.py function_generation_bump`: move a custom-function cache generation on
(`cache.generationKey` / `generationKeyExpression`), so every function answer cached under the old
generation is unreachable at once (`instances.functions.function_generation_bump`)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from instances.functions import DEFAULT_STORE, function_generation_bump


class Command(BaseCommand):
    """Give one or more function cache generations of a domain a new stamp."""

    help = (
        "Invalidate the cached answers of every custom function whose cache names one of these "
        "generations (generationKey, or the value of its generationKeyExpression) in DOMAIN."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """`domain`, one or more generation names, and the cache store (`--store`)."""
        parser.add_argument("domain", help="the functions' domain, e.g. core")
        parser.add_argument("generations", nargs="+", help="generation names")
        parser.add_argument(
            "--store",
            default=DEFAULT_STORE,
            help="the CACHES alias the functions' storeName names (default: default)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Bump each generation; print its new stamp."""
        store = options["store"]
        if store not in settings.CACHES:
            known = ", ".join(sorted(settings.CACHES))
            raise CommandError(f"no cache store {store!r}: CACHES has {known}")
        for generation in options["generations"]:
            stamp = function_generation_bump(options["domain"], generation, store)
            self.stdout.write(f"{options['domain']} {generation}: {stamp}")
