"""`manage.py locks_sweep`: delete resource locks whose TTL has passed."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from locks.services import locks_sweep_expired


class Command(BaseCommand):
    """Sweep expired resource locks (the periodic sweep runs the same service)."""

    help = "Delete resource locks whose TTL has passed."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"{locks_sweep_expired()} expired lock(s) swept")
