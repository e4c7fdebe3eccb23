"""The instances app."""

from django.apps import AppConfig


class InstancesConfig(AppConfig):
    """Instances, transitions, task journal, jobs and the engine."""

    name = "instances"
    verbose_name = "Workflow instances"
    default_auto_field = "django.db.models.BigAutoField"
