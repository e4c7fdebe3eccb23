"""Admin for resource locks: owners, expiry, filters, and an operator's force release."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from instances.admin import PermittedActionsMixin
from instances.operations import lock_force_release
from locks.models import ResourceLock


class ExpiredFilter(admin.SimpleListFilter):
    """Held (TTL running) or expired (waiting for the sweep or a take-over)."""

    title = "expiry"
    parameter_name = "expired"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("no", "Held"), ("yes", "Expired")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        now = timezone.now()
        if self.value() == "yes":
            return queryset.filter(expires_at__lte=now)
        if self.value() == "no":
            return queryset.filter(expires_at__gt=now)
        return queryset


@admin.register(ResourceLock)
class ResourceLockAdmin(PermittedActionsMixin, admin.ModelAdmin):
    """Locks are taken by transitions; operators may only force-release them."""

    list_display = ["key", "owner_link", "transition_key", "acquired_at", "expires_at", "expired"]
    list_filter = [ExpiredFilter, "transition_key"]
    search_fields = ["key", "owner"]
    fields = readonly_fields = ("key", "owner_link", "transition_key", "acquired_at", "expires_at")
    actions = ["force_release"]
    action_permission = "locks.change_resourcelock"

    @admin.display(description="Owner instance")
    def owner_link(self, lock: ResourceLock) -> str:
        """A link to the owning instance."""
        url = reverse("admin:instances_instance_change", args=[lock.owner])
        return format_html('<a href="{}">{}</a>', url, lock.owner)

    @admin.display(boolean=True, description="Expired")
    def expired(self, lock: ResourceLock) -> bool:
        """TTL passed."""
        return lock.is_expired

    @admin.action(description="Force release (recorded in the owner's history)")
    def force_release(self, request: HttpRequest, queryset: QuerySet[ResourceLock]) -> None:
        """Release the selected locks in the operator's name (and in the audit trail)."""
        operator = request.user.get_username()
        count = 0
        for lock in queryset:
            lock_force_release(lock=lock, operator=operator)
            count += 1
        self.message_user(request, f"{count} lock(s) released", messages.SUCCESS)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
