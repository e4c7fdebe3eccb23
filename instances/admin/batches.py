"""Admin > Batches: operators' batch operations, read-only. The list shows each batch's
operation, status and progress (done + refused + failed of total); a batch's page its counters,
a progress bar and its items page by page (by outcome), and "Cancel batch" while it runs —
`batch_cancel`, the API's service, in the staff user's name through the `admin` channel."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from instances.admin import inspector
from instances.batches import batch_cancel
from instances.engine.errors import VNextError
from instances.models import Batch, BatchItem
from instances.repair import Actor
from instances.status import BatchOutcome, BatchStatus, Channel, choices

# Items a batch's page lists at a time.
ITEMS_PER_PAGE = 100


def progress_bar(batch: Batch) -> str:
    """An HTML `<progress>` of the handled items, with `handled/total` beside it."""
    return format_html(
        '<progress class="vnext-batch-progress" value="{}" max="{}" title="{} of {}">'
        '</progress> <span class="vnext-batch-count">{}/{}</span>',
        batch.handled,
        max(batch.total, 1),
        batch.handled,
        batch.total,
        batch.handled,
        batch.total,
    )


@admin.register(Batch)
class BatchAdmin(admin.ModelAdmin):
    """Read-only: batches change through their job and `batch_cancel` only."""

    list_display = [
        "id",
        "operation",
        "workflow",
        "status",
        "progress",
        "done",
        "refused",
        "failed",
        "created_by",
        "channel",
        "created",
    ]
    list_filter = ["status", "operation"]
    ordering = ["-created_at"]
    show_full_result_count = False
    fields = readonly_fields = (
        "id",
        "domain",
        "workflow_key",
        "operation",
        "status",
        "total",
        "done",
        "refused",
        "failed",
        "arguments",
        "filter",
        "created_by",
        "channel",
        "created_at",
        "finished_at",
    )
    change_form_template = "admin/instances/batch/change_form.html"

    @admin.display(description="Workflow")
    def workflow(self, batch: Batch) -> str:
        """`domain/key`."""
        return f"{batch.domain}/{batch.workflow_key}"

    @admin.display(description="Progress")
    def progress(self, batch: Batch) -> str:
        """Handled of total, as a bar."""
        return progress_bar(batch)

    @admin.display(description="Created", ordering="created_at")
    def created(self, batch: Batch) -> str:
        """When, to the second, with its age."""
        return inspector.when(batch.created_at)

    def get_urls(self) -> list[URLPattern]:
        """ "Cancel batch": a POST, operators only."""
        cancel = path(
            "<path:object_id>/cancel/",
            self.admin_site.admin_view(self.cancel_view),
            name="instances_batch_cancel",
        )
        return [cancel, *super().get_urls()]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The batch's counters and progress, and a page of its items (`?outcome=`, `?page=`)."""
        if request.method == "POST":
            raise PermissionDenied
        batch = self.get_object(request, object_id)
        context: dict[str, Any] = {}
        if batch is not None:
            outcome = request.GET.get("outcome", "")
            items = BatchItem.objects.filter(batch=batch).order_by("position")
            if outcome in BatchOutcome._value2member_map_:
                items = items.filter(outcome=outcome)
            else:
                outcome = ""
            # Counted through the batch's own (batch, position) constraint: at most its total.
            page = Paginator(items, ITEMS_PER_PAGE).get_page(request.GET.get("page"))
            context = {
                "batch": batch,
                "progress": progress_bar(batch),
                "items_page": page,
                "outcome": outcome,
                "outcomes": choices(BatchOutcome),
                "pending": max(batch.total - batch.handled, 0)
                if batch.status == BatchStatus.RUNNING
                else 0,
                "can_cancel": batch.status == BatchStatus.RUNNING and self._may_operate(request),
            }
        extra_context = {
            **(extra_context or {}),
            **context,
            "show_save": False,
            "show_save_and_continue": False,
            "show_save_and_add_another": False,
            "show_delete": False,
        }
        return super().change_view(request, object_id, form_url, extra_context)

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST: `batch_cancel` (its pending items end `cancelled`), then back to its page."""
        if not self._may_operate(request):
            raise PermissionDenied
        batch = self.get_object(request, object_id)
        if batch is None:
            raise Http404("no such batch")
        if request.method == "POST":
            try:
                batch_cancel(batch=batch, actor=Actor(request.user.get_username(), Channel.ADMIN))
                self.message_user(request, f"batch {batch.pk} cancelled", messages.SUCCESS)
            except VNextError as refused:
                self.message_user(
                    request, f"refused ({refused.code}: {refused.detail})", messages.ERROR
                )
        return HttpResponseRedirect(reverse("admin:instances_batch_change", args=[batch.pk]))

    def _may_operate(self, request: HttpRequest) -> bool:
        # The same permission as the instances' operator actions (the `operators` group).
        return bool(request.user.has_perm("instances.change_instance"))

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Whoever may see instances sees the batches over them (no grant of its own)."""
        return bool(
            request.user.has_perm("instances.view_batch")
            or request.user.has_perm("instances.view_instance")
            or self._may_operate(request)
        )

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
