"""The inspector's operator buttons, each a POST to one of these admin views: retry with
corrected data, cancel with a reason, suspend, resume, and migrate to another version (a dry
run first). Each view checks the permission, calls the same service as the API, in the staff
user's name through the `admin` channel (the audit records both), and goes back to the page."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from instances.engine.errors import Violation, VNextError
from instances.models import Instance
from instances.operations import (
    CANCELLED,
    RETRIED,
    operator_cancel,
    operator_retry,
    retry_correction_check,
    retry_plan,
)
from instances.repair import (
    Actor,
    MigrationPlan,
    instance_migrate,
    instance_resume,
    instance_suspend,
)
from instances.snapshots import snapshot_of
from instances.status import Channel, InstanceStatus
from workflows.documents import ComponentKind
from workflows.models import Component

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

TEMPLATE = "admin/instances/instance/operate.html"


@dataclass(frozen=True)
class Buttons:
    """Which operator buttons the inspector shows for an instance (none without permission)."""

    retry: bool = False
    cancel: bool = False
    suspend: bool = False
    resume: bool = False
    migrate: bool = False

    @property
    def any(self) -> bool:
        """At least one applies."""
        return self.retry or self.cancel or self.suspend or self.resume or self.migrate


def buttons_for(instance: Instance, *, permitted: bool) -> Buttons:
    """The buttons that apply to `instance` in its status; none for view-only staff."""
    if not permitted:
        return Buttons()
    live = instance.status != InstanceStatus.COMPLETED
    return Buttons(
        retry=instance.status == InstanceStatus.FAULTED,
        cancel=live,
        suspend=instance.status == InstanceStatus.ACTIVE,
        resume=instance.status == InstanceStatus.PASSIVE,
        migrate=live,
    )


def other_versions(instance: Instance) -> list[str]:
    """The workflow's other published versions (Component rows of kind workflow), newest
    first."""
    return [
        version
        for version in Component.objects.filter(
            kind=ComponentKind.WORKFLOW, domain=instance.domain, key=instance.workflow_key
        )
        .order_by("-version_major", "-version_minor", "-version_patch", "-version_is_release")
        .values_list("version", flat=True)
        if version != instance.workflow_version
    ]


def state_mapping(text: str) -> tuple[dict[str, str], list[str]]:
    """`old=new` per line (blank lines ignored) as a mapping, and the lines that are not."""
    mapping: dict[str, str] = {}
    bad = []
    for line in text.splitlines():
        if not line.strip():
            continue
        old, separator, new = line.partition("=")
        if not separator or not old.strip() or not new.strip():
            bad.append(line.strip())
            continue
        mapping[old.strip()] = new.strip()
    return mapping, bad


@dataclass
class Page:
    """What an operator page shows beside its form: errors, a dry-run report."""

    errors: list[Violation] = field(default_factory=list)
    report: dict[str, Any] | None = None


class OperatorPages:
    """The views, bound to the instance admin (for its permission, site context and urls)."""

    def __init__(self, model_admin: ModelAdmin[Instance]) -> None:
        self.model_admin = model_admin

    # --- helpers ---------------------------------------------------------------------------

    def _instance(self, request: HttpRequest, object_id: str) -> Instance:
        # Operators only: view-only staff get 403, whatever they post by hand.
        if not self.model_admin.has_change_permission(request):
            raise PermissionDenied
        instance = self.model_admin.get_object(request, object_id)
        if instance is None:
            raise Http404("no such instance")
        return instance

    def _actor(self, request: HttpRequest) -> str:
        return str(request.user.get_username())

    def _back(self, instance: Instance) -> HttpResponseRedirect:
        return HttpResponseRedirect(reverse("admin:instances_instance_change", args=[instance.pk]))

    def _page(
        self,
        request: HttpRequest,
        instance: Instance,
        operation: str,
        *,
        status: int = 200,
        **context: Any,
    ) -> TemplateResponse:
        opts = self.model_admin.model._meta
        return TemplateResponse(
            request,
            TEMPLATE,
            {
                **self.model_admin.admin_site.each_context(request),
                "opts": opts,
                "original": instance,
                "operation": operation,
                "title": f"{operation.capitalize()} instance {instance.pk}",
                **context,
            },
            status=status,
        )

    def _refused(self, request: HttpRequest, refusal: VNextError) -> None:
        self.model_admin.message_user(
            request, f"refused ({refusal.code}: {refusal.detail})", messages.ERROR
        )

    # --- the views -------------------------------------------------------------------------

    def retry(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: the JSON editor; POST: check the correction (JSON, then the faulted
        transition's schema), then `operator_retry` with it."""
        instance = self._instance(request, object_id)
        text = request.POST.get("correction", "{}") if request.method == "POST" else "{}"
        plan = retry_plan(instance=instance)
        if request.method != "POST":
            return self._page(request, instance, "retry", text=text, plan=plan, page=Page())
        page = Page()
        correction: Any = {}
        try:
            correction = json.loads(text or "{}")
        except json.JSONDecodeError as bad:
            page.errors.append(Violation("", f"not JSON: {bad.msg} (line {bad.lineno})"))
        if not page.errors and not isinstance(correction, dict):
            page.errors.append(Violation("", "the corrected data is a JSON object"))
        if not page.errors:
            try:
                retry_correction_check(instance=instance, correction=correction)
            except VNextError as refused:
                page.errors = refused.violations or [Violation("", refused.detail)]
        if page.errors:
            return self._page(
                request, instance, "retry", text=text, plan=plan, page=page, status=400
            )
        result = operator_retry(
            instance=instance,
            actor=self._actor(request),
            correction=correction or None,
            channel=Channel.ADMIN,
        )
        level = messages.SUCCESS if result.outcome == RETRIED else messages.ERROR
        self.model_admin.message_user(request, str(result), level)
        return self._back(instance)

    def cancel(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: the reason form; POST: `operator_cancel` with the (required) reason."""
        instance = self._instance(request, object_id)
        reason = request.POST.get("reason", "").strip()
        if request.method != "POST" or not reason:
            page = Page(
                errors=[Violation("/reason", "a reason is required")]
                if request.method == "POST"
                else []
            )
            status = 400 if request.method == "POST" else 200
            return self._page(request, instance, "cancel", page=page, status=status)
        result = operator_cancel(
            instance=instance, actor=self._actor(request), reason=reason, channel=Channel.ADMIN
        )
        level = messages.SUCCESS if result.outcome == CANCELLED else messages.ERROR
        self.model_admin.message_user(request, str(result), level)
        return self._back(instance)

    def suspend(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST: `instance_suspend` (timers and automatic re-evaluations held)."""
        return self._suspend_or_resume(request, object_id, suspend=True)

    def resume(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST: `instance_resume` (held jobs pending again)."""
        return self._suspend_or_resume(request, object_id, suspend=False)

    def _suspend_or_resume(
        self, request: HttpRequest, object_id: str, *, suspend: bool
    ) -> HttpResponse:
        instance = self._instance(request, object_id)
        if request.method != "POST":
            return self._back(instance)
        service = instance_suspend if suspend else instance_resume
        try:
            moved = service(
                domain=instance.domain,
                workflow=instance.workflow_key,
                ref=str(instance.pk),
                actor=Actor(self._actor(request), Channel.ADMIN),
                reason=request.POST.get("reason", "").strip(),
            )
        except VNextError as refused:
            self._refused(request, refused)
        else:
            done = "suspended" if suspend else "resumed"
            self.model_admin.message_user(
                request, f"{instance.pk}: {done} (status {moved.status})", messages.SUCCESS
            )
        return self._back(instance)

    def migrate(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: the other published versions and a state mapping; POST `dry_run`: the
        `MigrationPlan` report; POST `apply`: `instance_migrate`."""
        instance = self._instance(request, object_id)
        versions = other_versions(instance)
        target = request.POST.get("target_version", versions[0] if versions else "")
        mapping_text = request.POST.get("state_mapping", "")
        context: dict[str, Any] = {
            "versions": versions,
            "target": target,
            "mapping_text": mapping_text,
        }
        if request.method != "POST":
            return self._page(request, instance, "migrate", page=Page(), **context)
        mapping, bad = state_mapping(mapping_text)
        if bad or not target:
            page = Page(errors=[Violation("/stateMapping", f"not old=new: {line}") for line in bad])
            if not target:
                page.errors.append(Violation("/targetVersion", "choose a version"))
            return self._page(request, instance, "migrate", page=page, status=400, **context)
        actor = Actor(self._actor(request), Channel.ADMIN)
        dry_run = "apply" not in request.POST
        try:
            plan = instance_migrate(
                domain=instance.domain,
                workflow=instance.workflow_key,
                ref=str(instance.pk),
                target_version=target,
                state_mapping=mapping,
                actor=actor,
                dry_run=dry_run,
            )
        except VNextError as refused:
            report = MigrationPlan(snapshot_of(instance), target).as_json()
            report["refused"] = {"code": refused.code, "detail": refused.detail}
            page = Page(report=report)
            return self._page(request, instance, "migrate", page=page, status=409, **context)
        if dry_run:
            return self._page(
                request, instance, "migrate", page=Page(report=plan.as_json()), **context
            )
        self.model_admin.message_user(
            request,
            f"{instance.pk}: migrated {plan.instance.workflow_version} -> {plan.target_version}, "
            f"state {plan.instance.current_state} -> {plan.to_state}",
            messages.SUCCESS,
        )
        return self._back(instance)


# The list's filters a batch can take over, as the list API's `field=operator:value`; any
# other narrows the list in a way the API's filter cannot say, so the batch is refused.
_BATCH_FILTERS = {"status__exact": "status", "state": "currentState"}
_LIST_ONLY = frozenset({"o", "p", "workflow", "_changelist_filters", "_to_field", "_popup"})


def list_filter_as_batch(query: dict[str, str]) -> tuple[str, str, list[str]] | str:
    """The Instances list's filter (its query string) as a batch's `(domain, workflow,
    filter)`, or why it cannot be one: a batch is over one workflow, and only the status and
    state filters translate."""
    domain, _, key = query.get("workflow", "").partition("/")
    if not domain or not key:
        return "filter the list by one workflow first (a batch runs over one workflow)"
    untranslatable = sorted(
        name for name in query if name not in _LIST_ONLY and name not in _BATCH_FILTERS
    )
    if untranslatable:
        return "a batch takes the workflow, status and state filters only; remove " + ", ".join(
            untranslatable
        )
    filters = [
        f"{field}=eq:{query[name]}" for name, field in _BATCH_FILTERS.items() if query.get(name)
    ]
    return domain, key, filters
