"""The admin site: its home page opens with the operations dashboard."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse


class VNextAdminSite(admin.AdminSite):
    """`admin.site`: the project's titles and the dashboard on the index."""

    site_header = "vNext operations"
    site_title = "vNext"
    index_title = "Operations"

    def index(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        """The model list, after the dashboard for those who may see instances."""
        from instances.admin.dashboard import dashboard

        context = dict(extra_context or {})
        if request.user.has_perm("instances.view_instance"):
            context["vnext_dashboard"] = dashboard()
        response: TemplateResponse = super().index(request, context)
        return response


def broker_configured() -> bool:
    """True when Celery has a real broker (not the in-memory default of `make run`)."""
    return not str(getattr(settings, "CELERY_BROKER_URL", "")).startswith("memory://")
