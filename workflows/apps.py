"""The component registry app."""

from django.apps import AppConfig


class WorkflowsConfig(AppConfig):
    """Component registry: definitions, validation, versions."""

    name = "workflows"
    verbose_name = "Workflow definitions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Connect the receivers that keep cached access (grants, roles) current."""
        from workflows import access  # noqa: F401
