"""Admin > Outbox events: the instance events waiting for the relay or published by it,
read-only, newest first, filtered by pending/published and by target (the targets settings
names: no `DISTINCT` over a table that grows with every hop)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from instances.admin.paginators import BoundedCountAdmin
from instances.models import OutboxEvent
from vnext.conf import vnext_setting


class PublishedFilter(admin.SimpleListFilter):
    """Pending (the relay's partial index) or published."""

    title = "published"
    parameter_name = "published"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        """The two states of a row."""
        return [("no", "Pending"), ("yes", "Published")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Rows of the chosen state."""
        if self.value() == "no":
            return queryset.filter(published_at__isnull=True)
        if self.value() == "yes":
            return queryset.filter(published_at__isnull=False)
        return queryset


class TargetFilter(admin.SimpleListFilter):
    """The targets of `OUTBOX_TARGETS` and `OUTBOX_SUBSCRIPTIONS`."""

    title = "target"
    parameter_name = "target"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        """The configured target names."""
        names = set(vnext_setting("OUTBOX_TARGETS") or {})
        for entries in (vnext_setting("OUTBOX_SUBSCRIPTIONS") or {}).values():
            for entry in [entries] if isinstance(entries, dict) else entries or []:
                names.add(str(entry.get("target", "")))
        return [(name, name) for name in sorted(names) if name]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Rows of the chosen target."""
        return queryset.filter(target=self.value()) if self.value() else queryset


@admin.register(OutboxEvent)
class OutboxEventAdmin(BoundedCountAdmin):
    """Read-only: rows are written by the store and marked by the relay alone."""

    list_display = ["id", "type", "instance_id", "subject", "target", "time", "published_at"]
    list_filter = [PublishedFilter, TargetFilter]
    ordering = ["-id"]
    fields = readonly_fields = (
        "id",
        "event_id",
        "type",
        "source",
        "subject",
        "instance_id",
        "time",
        "target",
        "published_at",
        "data",
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Events come from changes of instances only."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Read-only."""
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Pruned by the relay, never by hand (a pending row deleted is an event lost)."""
        return False
