"""Admin for instances: find them by workflow, status, state, date, id or key; read their
history, tasks, incidents and the operators' audit trail. Status changes happen through services,
never by editing rows: operators (the `instances.change_instance` permission) retry, cancel,
resolve, suspend, resume, migrate or batch instances with actions that confirm first, and with
the inspector's buttons (`operator_pages`), all calling the same services as the API and
`manage.py instances_retry`, audited with channel `admin`.

Built for tables of millions of rows: the sidebar's choices come from the component registry
and the status vocabulary (never a `DISTINCT` over instances), there is no date hierarchy, the
result count comes from the counters or the planner (`EstimatedCountPaginator`), and the search
box finds an instance by exact id or by exact or prefix business key through indexes."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html

from instances.admin import batches as batches  # registers the Batches admin
from instances.admin import human_tasks as human_tasks  # registers the Human tasks admin
from instances.admin import inspector
from instances.admin import outbox as outbox  # registers the Outbox events admin
from instances.admin.operator_pages import (
    OperatorPages,
    buttons_for,
    list_filter_as_batch,
    other_versions,
    state_mapping,
)
from instances.admin.paginators import BoundedCountPaginator
from instances.batches import batch_count, batch_create, batch_request
from instances.counts import instance_counts
from instances.engine.errors import VNextError
from instances.models import (
    Correlation,
    Incident,
    Instance,
    OperatorAction,
)
from instances.operations import (
    OperatorResult,
    incident_resolve,
    operator_action_record,
    operator_cancel,
    operator_retry,
    retry_plan,
)
from instances.repair import Actor, instance_migrate, instance_resume, instance_suspend
from instances.replay import REPLAYED, job_replay
from instances.status import BatchOperation, Channel, FlowType, InstanceStatus, choices
from instances.wiring import engine
from vnext.admin_site import broker_configured
from vnext.conf import vnext_setting
from workflows.documents import ComponentKind
from workflows.models import Component

if TYPE_CHECKING:
    from instances.job_table import Job


class _ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class OpenIncidentFilter(admin.SimpleListFilter):
    """Instances with (or without) an open incident."""

    title = "open incident"
    parameter_name = "open_incident"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Yes"), ("no", "No")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        open_ones = Incident.objects.filter(instance=OuterRef("pk"), resolved=False)
        if self.value() == "yes":
            return queryset.filter(Exists(open_ones))
        if self.value() == "no":
            return queryset.exclude(Exists(open_ones))
        return queryset


class BusyPastLeaseFilter(admin.SimpleListFilter):
    """Busy instances whose owner has held them longer than the Busy lease (stuck)."""

    title = "busy past its lease"
    parameter_name = "busy_past_lease"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Yes")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() != "yes":
            return queryset
        lease = timedelta(seconds=float(vnext_setting("BUSY_LEASE_SECONDS")))
        return queryset.filter(status=InstanceStatus.BUSY, busy_since__lt=timezone.now() - lease)


class EndedFilter(admin.SimpleListFilter):
    """Completed instances by how they ended: the workflow's cancel (state subtype
    `cancelled`, the partial index `instance_cancelled`) or otherwise (the dashboard's links)."""

    title = "ended"
    parameter_name = "ended"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("completed", "Completed"), ("cancelled", "Cancelled")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        cancelled = Q(status=InstanceStatus.COMPLETED, effective_state_subtype="cancelled")
        if self.value() == "cancelled":
            return queryset.filter(cancelled)
        if self.value() == "completed":
            return queryset.filter(status=InstanceStatus.COMPLETED).exclude(cancelled)
        return queryset


class ErrorCodeFilter(admin.SimpleListFilter):
    """Instances by the error code of an open incident (the codes open right now)."""

    title = "error code (open incident)"
    parameter_name = "error_code"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        codes = (
            Incident.objects.filter(resolved=False)
            .values_list("error_code", flat=True)
            .distinct()
            .order_by("error_code")[:50]
        )
        return [(code, code) for code in codes]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if not self.value():
            return queryset
        matching = Incident.objects.filter(
            instance=OuterRef("pk"), resolved=False, error_code=self.value()
        )
        return queryset.filter(Exists(matching))


def _chosen_workflow(request: HttpRequest) -> tuple[str, str] | None:
    """The `(domain, workflow)` the list is filtered on (`?workflow=domain/key`), if any."""
    value = request.GET.get(WorkflowFilter.parameter_name, "")
    domain, _, key = value.partition("/")
    return (domain, key) if domain and key else None


def _published_versions(domain: str, key: str) -> list[str]:
    return list(
        Component.objects.filter(kind=ComponentKind.WORKFLOW, domain=domain, key=key)
        .order_by("-version_major", "-version_minor", "-version_patch", "-version_is_release")
        .values_list("version", flat=True)
    )


class WorkflowFilter(admin.SimpleListFilter):
    """Instances of one workflow; the choices are the published workflows (the registry)."""

    title = "workflow"
    parameter_name = "workflow"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        published = (
            Component.objects.filter(kind=ComponentKind.WORKFLOW)
            .values_list("domain", "key")
            .distinct()
            .order_by("domain", "key")
        )
        return [(f"{domain}/{key}", f"{domain}/{key}") for domain, key in published]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        chosen = _chosen_workflow(request)
        if chosen is None:
            return queryset
        return queryset.filter(domain=chosen[0], workflow_key=chosen[1])


class WorkflowVersionFilter(admin.SimpleListFilter):
    """Instances pinned to one version of the chosen workflow (its published versions)."""

    title = "workflow version"
    parameter_name = "version"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        chosen = _chosen_workflow(request)
        if chosen is None:
            return []
        return [(version, version) for version in _published_versions(*chosen)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(workflow_version=self.value()) if self.value() else queryset


class StateFilter(admin.SimpleListFilter):
    """Instances in one state of the chosen workflow (the states its versions define)."""

    title = "current state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        chosen = _chosen_workflow(request)
        if chosen is None:
            return []
        states: dict[str, None] = {}
        for version in _published_versions(*chosen):
            definition = engine().components.workflow(chosen[0], chosen[1], version)
            states.update(dict.fromkeys(definition.states if definition else ()))
        return [(state, state) for state in sorted(states)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(current_state=self.value()) if self.value() else queryset


# Above this many rows (by the planner's estimate) a filtered list shows the estimate; below,
# the rows are counted, at most this many + 1 read.
# The list filters the counters answer exactly (beside paging and ordering).
_COUNTED_PARAMETERS = frozenset({"status__exact", WorkflowFilter.parameter_name})
_LIST_PARAMETERS = frozenset({"o", "p", "_changelist_filters", "_to_field", "_popup"})


class EstimatedCountPaginator(BoundedCountPaginator):
    """The instance list's paginator: the instance counters when the list is filtered by
    workflow and/or status only, else `BoundedCountPaginator`'s count (the list says "about"
    when it is the planner's estimate)."""

    def __init__(
        self, queryset: QuerySet[Instance], *args: Any, request: HttpRequest, **kwargs: Any
    ) -> None:
        super().__init__(queryset, *args, **kwargs)
        self.request = request

    @cached_property
    def count(self) -> int:
        """The number of rows, exact or (`estimated`) the planner's."""
        asked = {name for name in self.request.GET if name not in _LIST_PARAMETERS}
        if asked <= _COUNTED_PARAMETERS:
            chosen = _chosen_workflow(self.request)
            counts = instance_counts(
                domain=chosen[0] if chosen else None, workflow=chosen[1] if chosen else None
            )
            wanted = self.request.GET.get("status__exact")
            return counts.get(wanted, 0) if wanted else sum(counts.values())
        return super().count


class IncidentInline(_ReadOnlyInline):
    model = Incident
    fields = readonly_fields = (
        "created_at",
        "error_code",
        "state",
        "transition_key",
        "task_key",
        "step",
        "layer",
        "boundary_action",
        "boundary_level",
        "message",
        "resolved",
        "resolution",
    )


class OperatorActionInline(_ReadOnlyInline):
    """The audit trail of operators' actions on the instance, newest first."""

    model = OperatorAction
    fields = readonly_fields = ("created_at", "actor", "channel", "action", "target", "outcome")
    ordering = ["-created_at"]
    verbose_name_plural = "Operator actions (audit)"


def _instance_link(instance_id: Any) -> str:
    url = reverse("admin:instances_instance_change", args=[instance_id])
    return format_html('<a href="{}">{}</a>', url, instance_id)


class ChildCorrelationInline(_ReadOnlyInline):
    """The subflows (S) and subprocesses (P) the instance started, with links to them."""

    model = Correlation
    fk_name = "parent"
    fields = readonly_fields = (
        "created_at",
        "type",
        "parent_state",
        "child_link",
        "status",
        "completed_at",
    )
    ordering = ["created_at"]
    verbose_name_plural = "Subflows and subprocesses started"

    @admin.display(description="Child instance")
    def child_link(self, correlation: Correlation) -> str:
        """A link to the child's page."""
        return _instance_link(correlation.child_id) if correlation.child_id else "-"


# The operator actions of the instance admin; posting one needs `instances.change_instance`.
OPERATOR_ACTIONS = (
    "retry",
    "cancel",
    "resolve_incidents",
    "suspend",
    "resume",
    "migrate",
    "run_batch",
)
_LEVELS = {
    "retried": messages.SUCCESS,
    "cancelled": messages.SUCCESS,
    "resolved": messages.SUCCESS,
    "suspended": messages.SUCCESS,
    "resumed": messages.SUCCESS,
    "migrated": messages.SUCCESS,
    "skipped": messages.INFO,
}


@admin.register(Instance)
class InstanceAdmin(admin.ModelAdmin):
    """The instance inspector. Every field stays read-only; the change permission only unlocks
    the operator actions."""

    list_display = [
        "id",
        "workflow_key",
        "workflow_version",
        "key",
        "status",
        "current_state",
        "open_incident",
        "modified",
    ]
    list_filter = [
        "status",
        WorkflowFilter,
        WorkflowVersionFilter,
        StateFilter,
        OpenIncidentFilter,
        ErrorCodeFilter,
        BusyPastLeaseFilter,
        EndedFilter,
        ("created_at", admin.DateFieldListFilter),
        ("updated_at", admin.DateFieldListFilter),
    ]
    # Searched by `get_search_results`: exact id, exact or prefix key (indexes serve both).
    search_fields = ["key"]
    search_help_text = "An instance id, or a business key or the start of one (case matters)."
    show_full_result_count = False
    change_list_template = "admin/instances/instance/change_list.html"
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
        "parent_link",
        "created_at",
        "updated_at",
        "completed_at",
        "diagram",
        "timeline",
        "data_versions",
        "task_journal",
        "jobs",
        "locks",
        "pretty_data",
        "pretty_extra",
    )
    inlines = [
        IncidentInline,
        ChildCorrelationInline,
        OperatorActionInline,
    ]
    actions = ["retry", "cancel", "resolve_incidents", "suspend", "resume", "migrate", "run_batch"]

    def get_urls(self) -> list[URLPattern]:
        """The inspector's operator buttons (`operator_pages`): each a POST, operators only."""
        pages = OperatorPages(self)
        routes = [
            path(
                f"<path:object_id>/operate/{name}/",
                self.admin_site.admin_view(getattr(pages, name)),
                name=f"instances_instance_{name}",
            )
            for name in ("retry", "cancel", "suspend", "resume", "migrate")
        ]
        return [*routes, *super().get_urls()]

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Instance], search_term: str
    ) -> tuple[QuerySet[Instance], bool]:
        """The instance with that id, else those whose key is or starts with the term: the
        primary key and the business-key index answer, never `UPPER(...) LIKE '%...%'`."""
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            return queryset.filter(pk=uuid.UUID(term)), False
        except ValueError:
            return queryset.filter(key__startswith=term), False

    def get_paginator(
        self,
        request: HttpRequest,
        queryset: QuerySet[Instance],
        per_page: int,
        orphans: int = 0,
        allow_empty_first_page: bool = True,
    ) -> EstimatedCountPaginator:
        """A paginator that never counts the whole table (`EstimatedCountPaginator`)."""
        return EstimatedCountPaginator(
            queryset, per_page, orphans, allow_empty_first_page, request=request
        )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Instance]:
        """Rows with the code of their newest open incident (the list's column), one query."""
        newest_open = Incident.objects.filter(instance=OuterRef("pk"), resolved=False).order_by(
            "-created_at"
        )
        return (
            super()
            .get_queryset(request)
            .annotate(open_error=Subquery(newest_open.values("error_code")[:1]))
        )

    @admin.display(description="Open incident", ordering="open_error")
    def open_incident(self, instance: Instance) -> str:
        """The error code of the newest open incident, if any."""
        return getattr(instance, "open_error", None) or "-"

    @admin.display(description="Modified", ordering="updated_at")
    def modified(self, instance: Instance) -> str:
        """Last change, to the second, with its age."""
        return inspector.when(instance.updated_at)

    @admin.display(description="Diagram")
    def diagram(self, instance: Instance) -> str:
        """The workflow's diagram: this instance's state and the path it took."""
        return inspector.diagram_panel(instance, self._history(instance))

    @admin.display(description="Timeline")
    def timeline(self, instance: Instance) -> str:
        """Every transition: who, when, trigger, duration, outcome, error."""
        return inspector.timeline_panel(self._history(instance))

    @admin.display(description="Data versions")
    def data_versions(self, instance: Instance) -> str:
        """The data versions, newest first, with what each changed."""
        return inspector.data_panel(instance)

    @admin.display(description="Task journal")
    def task_journal(self, instance: Instance) -> str:
        """Every task run, in write order; a fan-out batch's items indented under it."""
        return inspector.tasks_panel(instance)

    @admin.display(description="Jobs")
    def jobs(self, instance: Instance) -> str:
        """Pending, running and failed jobs."""
        return inspector.jobs_panel(instance)

    @admin.display(description="Locks held")
    def locks(self, instance: Instance) -> str:
        """The resource locks it holds."""
        return inspector.locks_panel(instance)

    def _history(self, instance: Instance) -> list[Any]:
        # Read once per page for both the diagram and the timeline.
        cached = getattr(instance, "_admin_history", None)
        if cached is None:
            cached = inspector.history(instance)
            instance._admin_history = cached  # type: ignore[attr-defined]
        return cached

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The list, with the instances counted by status at the top (each a filter link; the
        counters', so for the chosen workflow or all).
        An operator action posted by hand without the permission is a 403, not a quiet
        'no action selected'."""
        if (
            request.method == "POST"
            and request.POST.get("action") in OPERATOR_ACTIONS
            and not self.has_change_permission(request)
        ):
            raise PermissionDenied
        chosen = _chosen_workflow(request)
        counts = instance_counts(
            domain=chosen[0] if chosen else None, workflow=chosen[1] if chosen else None
        )
        base = reverse("admin:instances_instance_changelist")
        status_counts = [
            (label, counts.get(value, 0), f"{base}?status__exact={value}")
            for value, label in choices(InstanceStatus)
        ]
        extra_context = {**(extra_context or {}), "status_counts": status_counts}
        return super().changelist_view(request, extra_context)

    @admin.display(description="Started by")
    def parent_link(self, instance: Instance) -> str:
        """Who started this instance (`created_by`, else its first history row's actor), and
        the parent that started it as a subflow or subprocess, if any."""
        correlation = instance.parent_correlation
        parent = ""
        if correlation is not None:
            kind = "subflow" if correlation.type == FlowType.SUBFLOW else "subprocess"
            parent = format_html(
                "{} ({} in state {}, {})",
                _instance_link(correlation.parent_id),
                kind,
                correlation.parent_state,
                correlation.status,
            )
        return inspector.started_by_panel(instance, self._history(instance), parent)

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

    @admin.action(description="Retry the selected faulted instances", permissions=["change"])
    def retry(self, request: HttpRequest, queryset: QuerySet[Instance]) -> TemplateResponse | None:
        """Confirm (what re-runs, which incident it resolves), then `operator_retry` each."""
        instances = list(queryset.order_by("created_at"))
        if request.POST.get("confirm") != "yes":
            plans = [retry_plan(instance=instance) for instance in instances]
            return self._confirmation(request, "retry", "Retry", plans=plans)
        actor = request.user.get_username()
        self._report(request, [operator_retry(instance=i, actor=actor) for i in instances])
        return None

    @admin.action(description="Cancel the selected instances", permissions=["change"])
    def cancel(self, request: HttpRequest, queryset: QuerySet[Instance]) -> TemplateResponse | None:
        """Confirm with a reason, then `operator_cancel` each (the workflow's cancel)."""
        instances = list(queryset.order_by("created_at"))
        if request.POST.get("confirm") != "yes":
            return self._confirmation(request, "cancel", "Cancel", instances=instances)
        actor = request.user.get_username()
        reason = request.POST.get("reason", "").strip()
        self._report(
            request,
            [operator_cancel(instance=i, actor=actor, reason=reason) for i in instances],
        )
        return None

    @admin.action(
        description="Resolve open incidents without retry (status unchanged)",
        permissions=["change"],
    )
    def resolve_incidents(
        self, request: HttpRequest, queryset: QuerySet[Instance]
    ) -> TemplateResponse | None:
        """For causes repaired outside: close the open incidents; the instance stays as it is."""
        instances = list(queryset.order_by("created_at"))
        if request.POST.get("confirm") != "yes":
            plans = [retry_plan(instance=instance) for instance in instances]
            return self._confirmation(
                request, "resolve_incidents", "Resolve without retry", plans=plans
            )
        actor = request.user.get_username()
        self._report(request, [incident_resolve(instance=i, actor=actor) for i in instances])
        return None

    @admin.action(description="Suspend the selected instances", permissions=["change"])
    def suspend(
        self, request: HttpRequest, queryset: QuerySet[Instance]
    ) -> TemplateResponse | None:
        """Confirm, then `instance_suspend` each (only Active ones are; the rest refused)."""
        return self._suspend_or_resume(request, queryset, suspend=True)

    @admin.action(description="Resume the selected suspended instances", permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Instance]) -> TemplateResponse | None:
        """Confirm, then `instance_resume` each."""
        return self._suspend_or_resume(request, queryset, suspend=False)

    def _suspend_or_resume(
        self, request: HttpRequest, queryset: QuerySet[Instance], *, suspend: bool
    ) -> TemplateResponse | None:
        instances = list(queryset.order_by("created_at"))
        action, title = ("suspend", "Suspend") if suspend else ("resume", "Resume")
        if request.POST.get("confirm") != "yes":
            return self._confirmation(request, action, title, instances=instances)
        service = instance_suspend if suspend else instance_resume
        actor = Actor(request.user.get_username(), Channel.ADMIN)
        results = []
        for instance in instances:
            try:
                moved = service(
                    domain=instance.domain,
                    workflow=instance.workflow_key,
                    ref=str(instance.pk),
                    actor=actor,
                )
                done = "suspended" if suspend else "resumed"
                results.append(OperatorResult(instance.pk, done, f"status {moved.status}"))
            except VNextError as refused:
                results.append(
                    OperatorResult(instance.pk, "refused", f"{refused.code}: {refused.detail}")
                )
        self._report(request, results)
        return None

    @admin.action(
        description="Migrate the selected instances to a version…", permissions=["change"]
    )
    def migrate(
        self, request: HttpRequest, queryset: QuerySet[Instance]
    ) -> TemplateResponse | None:
        """Choose a version (and a state mapping), see each instance's dry run, then apply
        `instance_migrate` to each; a refusal is reported per instance."""
        instances = list(queryset.order_by("created_at"))
        versions: dict[str, None] = {}
        for instance in instances:
            versions.update(dict.fromkeys(other_versions(instance)))
        target = request.POST.get("target_version", "")
        mapping_text = request.POST.get("state_mapping", "")
        mapping, bad = state_mapping(mapping_text)
        actor = Actor(request.user.get_username(), Channel.ADMIN)
        if request.POST.get("confirm") != "yes" or not target or bad:
            reports = (
                [self._migration_report(instance, target, mapping, actor) for instance in instances]
                if target and not bad
                else []
            )
            return self._confirmation(
                request,
                "migrate",
                "Migrate to version",
                instances=instances,
                versions=list(versions),
                target=target,
                mapping_text=mapping_text,
                bad_mapping=bad,
                reports=reports,
                applicable=any(report["refused"] is None for report in reports),
            )
        results = []
        for instance in instances:
            try:
                plan = instance_migrate(
                    domain=instance.domain,
                    workflow=instance.workflow_key,
                    ref=str(instance.pk),
                    target_version=target,
                    state_mapping=mapping,
                    actor=actor,
                )
                detail = (
                    f"{plan.instance.workflow_version} -> {plan.target_version}, "
                    f"state {plan.instance.current_state} -> {plan.to_state}"
                )
                results.append(OperatorResult(instance.pk, "migrated", detail))
            except VNextError as refused:
                results.append(
                    OperatorResult(instance.pk, "refused", f"{refused.code}: {refused.detail}")
                )
        self._report(request, results)
        return None

    @admin.action(description="Run a batch over this filter…", permissions=["change"])
    def run_batch(self, request: HttpRequest, queryset: QuerySet[Instance]) -> HttpResponse | None:
        """A batch over every instance the list's filter matches (not only the ticked rows):
        choose the operation and its fields, see how many it would freeze, then create it
        (`batch_create`, as the API does) and go to its page."""
        translated = list_filter_as_batch(request.GET.dict())
        fields = {
            name: request.POST.get(name, "").strip()
            for name in ("operation", "reason", "attributes", "target_version", "state_mapping")
        }
        context: dict[str, Any] = {
            "fields": fields,
            "operations": choices(BatchOperation),
            "total": None,
        }
        if isinstance(translated, str):
            context["refusal"] = translated
            return self._confirmation(request, "run_batch", "Run a batch", **context)
        domain, key, filters = translated
        context.update(domain=domain, workflow=key, filters=filters)
        context["versions"] = _published_versions(domain, key)
        if not fields["operation"]:
            return self._confirmation(request, "run_batch", "Run a batch", **context)
        try:
            wanted = batch_request(self._batch_body(fields, filters))
            if request.POST.get("confirm") != "yes":
                context["total"] = batch_count(
                    domain=domain, workflow=key, request=wanted, visible=None, roles=frozenset()
                )
                return self._confirmation(request, "run_batch", "Run a batch", **context)
            batch = batch_create(
                domain=domain,
                workflow=key,
                request=wanted,
                actor=Actor(request.user.get_username(), Channel.ADMIN),
                visible=None,
                roles=frozenset(),
            )
        except (VNextError, ValueError) as refused:
            context["refusal"] = str(refused)
            return self._confirmation(request, "run_batch", "Run a batch", **context)
        self.message_user(request, f"{batch} created: {batch.total} instance(s)", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:instances_batch_change", args=[batch.pk]))

    def _batch_body(self, fields: dict[str, str], filters: list[str]) -> dict[str, Any]:
        # The API's body: a JSON correction (retry), a reason, a target and a mapping (migrate).
        body: dict[str, Any] = {"operation": fields["operation"], "filter": filters}
        if fields["reason"]:
            body["reason"] = fields["reason"]
        if fields["operation"] == BatchOperation.RETRY and fields["attributes"]:
            body["attributes"] = json.loads(fields["attributes"])
        if fields["operation"] == BatchOperation.MIGRATE:
            mapping, bad = state_mapping(fields["state_mapping"])
            if bad:
                raise ValueError(f"state mapping: not old=new: {', '.join(bad)}")
            body["targetVersion"] = fields["target_version"]
            body["stateMapping"] = mapping
        return body

    def _migration_report(
        self, instance: Instance, target: str, mapping: dict[str, str], actor: Actor
    ) -> dict[str, Any]:
        try:
            plan = instance_migrate(
                domain=instance.domain,
                workflow=instance.workflow_key,
                ref=str(instance.pk),
                target_version=target,
                state_mapping=mapping,
                actor=actor,
                dry_run=True,
            )
        except VNextError as refused:  # not found any more, or not readable
            return {
                "instanceId": str(instance.pk),
                "fromVersion": instance.workflow_version,
                "toVersion": target,
                "fromState": instance.current_state,
                "toState": None,
                "timers": [],
                "refused": {"code": refused.code, "detail": refused.detail},
            }
        return plan.as_json()

    def _confirmation(
        self, request: HttpRequest, action: str, title: str, **rows: Any
    ) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": f"{title}: are you sure?",
            "action": action,
            "action_title": title,
            "opts": self.model._meta,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
            "select_across": request.POST.get("select_across", "0"),
            **rows,
        }
        return TemplateResponse(
            request, "admin/instances/instance/operator_action_confirmation.html", context
        )

    def _report(self, request: HttpRequest, results: list[OperatorResult]) -> None:
        for result in results:
            self.message_user(request, str(result), _LEVELS.get(result.outcome, messages.ERROR))

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> Any:
        """Read-only for everyone: no save buttons, and no saving the row by POST; operators
        get the buttons that apply to the instance's status (each posts to its own view)."""
        if request.method == "POST":
            raise PermissionDenied
        instance = self.get_object(request, object_id) if object_id else None
        buttons = (
            buttons_for(instance, permitted=self.has_change_permission(request))
            if instance is not None
            else None
        )
        extra_context = {
            **(extra_context or {}),
            "operator_buttons": buttons,
            "show_save": False,
            "show_save_and_continue": False,
            "show_save_and_add_another": False,
            "show_delete": False,
        }
        return super().changeform_view(request, object_id, form_url, extra_context)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Operators only; it unlocks the actions, never the fields (all are read-only)."""
        return request.user.has_perm("instances.change_instance")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class PermittedActionsMixin:
    """Actions of a read-only admin for users with `action_permission` only: others see none,
    and get 403 when they post one by hand (not a quiet 'no action selected')."""

    action_permission: str = ""

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions: dict[str, Any] = super().get_actions(request)  # type: ignore[misc]
        return actions if request.user.has_perm(self.action_permission) else {}

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if (
            request.method == "POST"
            and request.POST.get("action")
            and not request.user.has_perm(self.action_permission)
        ):
            raise PermissionDenied
        response: HttpResponse = super().changelist_view(  # type: ignore[misc]
            request, extra_context
        )
        return response


# A list cell kept to one line, in monospace (ids, JSON).
_ONE_LINE = "white-space:nowrap;font-family:monospace;font-size:11px"

# Only `instances.queue` imports the job model (the import contract): its page takes the class
# from the app registry.
_JOB_MODEL = apps.get_model("instances", "Job")


@admin.register(_JOB_MODEL)
class JobAdmin(PermittedActionsMixin, admin.ModelAdmin):
    """The durable job queue; operators replay jobs through the same service as `jobs_replay`."""

    # Compact rows: the instance as a short id (the whole one in its title), the payload and
    # the error cut to one line; no row grows past one line at 1440 px.
    list_display = [
        "id",
        "kind",
        "instance_short",
        "state",
        "status",
        "due",
        "attempts",
        "payload_preview",
        "error",
    ]
    list_filter = ["kind", "status", "run_at"]
    search_fields = ["instance__id", "dedupe_key"]
    readonly_fields = [
        *(f.name for f in _JOB_MODEL._meta.fields if f.name != "payload"),
        "pretty_payload",
    ]
    fields = tuple(readonly_fields)

    @admin.display(description="Due", ordering="run_at")
    def due(self, job: Job) -> str:
        """When it is (or was) due, to the second, with its age."""
        return inspector.when(job.run_at)

    @admin.display(description="Instance", ordering="instance_id")
    def instance_short(self, job: Job) -> str:
        """The instance's id cut to 8 characters (whole in the title), linking to its page."""
        if job.instance_id is None:
            return "-"
        url = reverse("admin:instances_instance_change", args=[job.instance_id])
        return format_html(
            '<a href="{}" title="{}" style="{}">{}</a>',
            url,
            job.instance_id,
            _ONE_LINE,
            str(job.instance_id)[:8],
        )

    @admin.display(description="Payload")
    def payload_preview(self, job: Job) -> str:
        """The payload as one line of compact JSON, cut to fit (the title and the job's page
        have more)."""
        text = json.dumps(job.payload, ensure_ascii=False, separators=(",", ":"), default=str)
        shown = text if len(text) <= 60 else text[:57] + "..."
        return format_html('<span title="{}" style="{}">{}</span>', text[:1000], _ONE_LINE, shown)

    @admin.display(description="Last error")
    def error(self, job: Job) -> str:
        """The last error's first line, cut to fit the list (the job's page has it whole)."""
        first = job.last_error.strip().splitlines()[0] if job.last_error.strip() else ""
        shown = first if len(first) <= 80 else first[:77] + "..."
        return format_html('<span title="{}" style="white-space:nowrap">{}</span>', first, shown)

    @admin.display(description="Payload")
    def pretty_payload(self, job: Job) -> str:
        """The payload, indented."""
        text = json.dumps(job.payload, indent=2, ensure_ascii=False)
        return format_html('<pre style="white-space:pre-wrap">{}</pre>', text)

    actions = ["replay", "replay_forced"]
    action_permission = "instances.change_job"

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
        results = []
        for job in queryset:
            result = job_replay(job=job, force=force, operator=operator)
            operator_action_record(
                actor=operator,
                action=OperatorAction.Action.REPLAY,
                instance_id=job.instance_id,
                target=f"job {job.pk} ({job.kind})" + (" forced" if force else ""),
                outcome=str(result),
            )
            results.append(result)
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


def _hide_periodic_tasks_without_a_broker() -> None:
    # django-celery-beat's pages edit schedules that only a beat with a broker runs: with none
    # configured (`make run`'s in-memory default) they would do nothing, so they are not shown.
    if broker_configured():
        return
    from django_celery_beat import models as beat

    for model in (
        beat.PeriodicTask,
        beat.IntervalSchedule,
        beat.CrontabSchedule,
        beat.SolarSchedule,
        beat.ClockedSchedule,
    ):
        if admin.site.is_registered(model):
            admin.site.unregister(model)


_hide_periodic_tasks_without_a_broker()
