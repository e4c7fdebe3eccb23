"""Admin for the component registry: browse by kind/domain/key/version; read-only detail."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html

from workflows.models import Component, DomainReach, WorkflowGrant


@admin.register(Component)
class ComponentAdmin(admin.ModelAdmin):
    """Published components are immutable: the admin shows them, it never edits them."""

    list_display = ["key", "kind", "domain", "version", "flow", "published_by", "created_at"]
    list_filter = ["kind", "domain", "version_is_release"]
    search_fields = ["key", "domain", "version", "tags"]
    ordering = [
        "kind",
        "domain",
        "key",
        "-version_major",
        "-version_minor",
        "-version_patch",
        "-version_is_release",
    ]
    date_hierarchy = "created_at"
    fields = readonly_fields = (
        "kind",
        "domain",
        "key",
        "version",
        "flow",
        "flow_version",
        "tags",
        "content_hash",
        "published_by",
        "created_at",
        "pretty_document",
    )

    @admin.display(description="Document")
    def pretty_document(self, component: Component) -> str:
        """The stored JSON, indented."""
        text = json.dumps(component.document, indent=2, ensure_ascii=False, sort_keys=False)
        return format_html('<pre class="vnext-json">{}</pre>', text)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # publishing goes through validation: the API or import_components

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(WorkflowGrant)
class WorkflowGrantAdmin(admin.ModelAdmin):
    """Which groups may read definitions, read, start and drive instances of a workflow."""

    list_display = [
        "group",
        "domain",
        "workflow_or_all",
        "read_definitions",
        "read_instances",
        "start_instances",
        "drive_instances",
    ]
    list_filter = ["domain", "group", "read_instances", "start_instances", "drive_instances"]
    search_fields = ["domain", "workflow", "group__name"]
    autocomplete_fields = ["group"]

    @admin.display(description="workflow", ordering="workflow")
    def workflow_or_all(self, grant: WorkflowGrant) -> str:
        """Blank means every workflow of the domain."""
        return grant.workflow or "(every workflow)"


@admin.register(DomainReach)
class DomainReachAdmin(admin.ModelAdmin):
    """Workflows whose tasks may read or trigger instances of another domain."""

    list_display = ["domain", "workflow", "target_domain"]
    list_filter = ["domain", "target_domain"]
    search_fields = ["domain", "workflow", "target_domain"]
