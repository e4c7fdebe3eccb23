"""The business resource-lock app."""

from django.apps import AppConfig


class LocksConfig(AppConfig):
    """Resource locks (TTL rows acquired by compare-and-set)."""

    name = "locks"
    verbose_name = "Resource locks"
    default_auto_field = "django.db.models.BigAutoField"
