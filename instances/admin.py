"""Admin for instances: find them by workflow, status, state, date, id or key; read their
history, tasks and incidents. Status changes happen through services, never by editing rows."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from instances.job_handlers import REPLAYED, job_replay
from instances.models import Incident, Instance, InstanceTask, InstanceTransition, Job


class _ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class TransitionInline(_ReadOnlyInline):
    model = InstanceTransition
    fields = readonly_fields = (
        "started_at",
        "transition_key",
        "from_state",
        "to_state",
        "status",
        "actor",
        "error_code",
    )
    ordering = ["started_at"]


class TaskInline(_ReadOnlyInline):
    model = InstanceTask
    fields = readonly_fields = (
        "created_at",
        "task_key",
        "phase",
        "order",
        "status",
        "duration_ms",
        "error_code",
    )


class IncidentInline(_ReadOnlyInline):
    model = Incident
    fields = readonly_fields = (
        "created_at",
        "error_code",
        "state",
        "transition_key",
        "layer",
        "message",
        "resolved",
    )


@admin.register(Instance)
class InstanceAdmin(admin.ModelAdmin):
    """The instance inspector."""

    list_display = ["id", "workflow_key", "key", "status", "current_state", "updated_at"]
    list_filter = ["status", "workflow_key", "current_state", "domain"]
    search_fields = ["id", "key"]
    date_hierarchy = "created_at"
    fields = readonly_fields = (
        "id",
        "domain",
        "workflow_key",
        "workflow_version",
        "key",
        "status",
        "current_state",
        "effective_state_type",
        "effective_state_subtype",
        "data_version",
        "busy_owner",
        "busy_since",
        "created_at",
        "updated_at",
        "completed_at",
        "pretty_data",
        "pretty_extra",
    )
    inlines = [TransitionInline, TaskInline, IncidentInline]

    @admin.display(description="Data")
    def pretty_data(self, instance: Instance) -> str:
        """The instance data, indented."""
        return format_html("<pre>{}</pre>", json.dumps(instance.data, indent=2, ensure_ascii=False))

    @admin.display(description="Extra properties")
    def pretty_extra(self, instance: Instance) -> str:
        """`resource.locks` and other extra properties."""
        return format_html(
            "<pre>{}</pre>", json.dumps(instance.extra, indent=2, ensure_ascii=False)
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    """The durable job queue; operators replay jobs through the same service as `jobs_replay`."""

    list_display = ["id", "kind", "instance", "state", "status", "run_at", "attempts", "last_error"]
    list_filter = ["kind", "status", "run_at"]
    search_fields = ["instance__id", "dedupe_key"]
    readonly_fields = [f.name for f in Job._meta.fields]
    actions = ["replay", "replay_forced"]

    @admin.action(description="Replay the selected jobs")
    def replay(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        """Put the selected jobs back in the queue, in the operator's name."""
        self._replay(request, queryset, force=False)

    @admin.action(description="Replay with force (succeeded timers fire again)")
    def replay_forced(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        """The same, succeeded timers included."""
        self._replay(request, queryset, force=True)

    def _replay(self, request: HttpRequest, queryset: QuerySet[Job], *, force: bool) -> None:
        operator = request.user.get_username()
        results = [job_replay(job=job, force=force, operator=operator) for job in queryset]
        replayed = [result for result in results if result.outcome == REPLAYED]
        if replayed:
            self.message_user(request, f"{len(replayed)} job(s) replayed", messages.SUCCESS)
        for result in results:
            if result.outcome != REPLAYED:
                self.message_user(request, str(result), messages.WARNING)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
