"""The instances app."""

from django.apps import AppConfig

from instances.engine.script_pool import configure_pool
from vnext.conf import script_pool_settings


class InstancesConfig(AppConfig):
    """Instances, transitions, task journal, jobs and the engine."""

    name = "instances"
    verbose_name = "Workflow instances"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Configure the script worker pool (started on first use, or by `vnext_run` and the
        Celery worker at start-up)."""
        configure_pool(script_pool_settings())
