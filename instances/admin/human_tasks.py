"""Admin > Human tasks: the inbox entries of task type 5, open work first (the default filter is
open + claimed, newest first, served by the partial `human_task_open` index), filtered by status,
claimed or not, workflow (the registry's, no `DISTINCT` over the table) and overdue; searched by
exact task or instance id, claimer or task key. Read-only: entries change through the inbox API
(claim, release, complete) and the instance's own transitions; an operator's release or cancel
goes through the API too, where it is recorded in the instance's history."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone

from instances.admin.paginators import BoundedCountAdmin
from instances.human_task_table import OPEN_STATUSES, HumanTask
from instances.status import HumanTaskStatus
from workflows.models import Component


class OpenFilter(admin.SimpleListFilter):
    """Open work (open or claimed) by default; or one status; or all."""

    title = "status"
    parameter_name = "state_of_task"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        """Open work, each status, everything."""
        return [
            ("work", "Open or claimed"),
            *[(status.value, str(status.label)) for status in HumanTaskStatus],
            ("all", "All"),
        ]

    def value(self) -> str:
        """The chosen lookup; open work when none."""
        return str(super().value() or "work")

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Rows of the chosen status."""
        chosen = self.value()
        if chosen == "work":
            return queryset.filter(status__in=OPEN_STATUSES)
        if chosen in {status.value for status in HumanTaskStatus}:
            return queryset.filter(status=chosen)
        return queryset


class ClaimedFilter(admin.SimpleListFilter):
    """Claimed by someone, or not."""

    title = "claimed"
    parameter_name = "claimed"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        """Yes / no."""
        return [("yes", "Claimed"), ("no", "Unclaimed")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Rows with or without a claimer."""
        if self.value() == "yes":
            return queryset.exclude(claimed_by="")
        if self.value() == "no":
            return queryset.filter(claimed_by="")
        return queryset


class WorkflowFilter(admin.SimpleListFilter):
    """The published workflows, from the registry."""

    title = "workflow"
    parameter_name = "workflow"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        """`domain/key` of each published workflow."""
        found = (
            Component.objects.filter(kind="workflow")
            .values_list("domain", "key")
            .order_by("domain", "key")
            .distinct()
        )
        return [(f"{domain}/{key}", f"{domain}/{key}") for domain, key in found]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Rows of the chosen workflow."""
        if not self.value():
            return queryset
        domain, _, key = str(self.value()).partition("/")
        return queryset.filter(domain=domain, workflow_key=key)


class OverdueFilter(admin.SimpleListFilter):
    """Open work past its due date."""

    title = "due"
    parameter_name = "overdue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        """Overdue, or with no due date."""
        return [("yes", "Overdue"), ("none", "No due date")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Rows past due (open or claimed), or without one."""
        if self.value() == "yes":
            return queryset.filter(due_at__lt=timezone.now(), status__in=OPEN_STATUSES)
        if self.value() == "none":
            return queryset.filter(due_at__isnull=True)
        return queryset


@admin.register(HumanTask)
class HumanTaskAdmin(BoundedCountAdmin):
    """Read-only list and detail of human tasks."""

    list_display = [
        "title",
        "status",
        "workflow_key",
        "state",
        "instance_id",
        "assigned",
        "claimed_by",
        "due_at",
        "created_at",
    ]
    list_filter = [OpenFilter, ClaimedFilter, WorkflowFilter, OverdueFilter]
    ordering = ["-created_at"]
    search_fields = ["claimed_by", "task_key"]
    fields = readonly_fields = (
        "id",
        "title",
        "instructions",
        "status",
        "domain",
        "workflow_key",
        "state",
        "task_key",
        "instance",
        "transition_id",
        "roles",
        "users",
        "form",
        "context",
        "claimed_by",
        "claimed_at",
        "completed_by",
        "completed_at",
        "result",
        "due_at",
        "created_at",
        "closed_at",
    )

    @admin.display(description="assigned to")
    def assigned(self, obj: HumanTask) -> str:
        """Roles and users, as the task names them."""
        return ", ".join([*(obj.roles or []), *(f"user:{u}" for u in obj.users or [])])

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        """An exact task or instance id; else an exact claimer or task key (no `LIKE '%..%'`)."""
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            key = uuid.UUID(term)
        except ValueError:
            return queryset.filter(Q(claimed_by=term) | Q(task_key=term)), False
        return queryset.filter(Q(pk=key) | Q(instance_id=key)), False

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Human tasks are opened by their state's task only."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Claim, release and complete go through the inbox API."""
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """An entry deleted is work lost: they go with their instance."""
        return False
