"""Admin for the component registry: browse by kind/domain/key/version; read-only detail."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.db.models import Count
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from instances.engine.definition import WorkflowDefinition
from instances.engine.scripts import ScriptTextMissing, script_text
from instances.models import Instance
from instances.status import InstanceStatus, StateType, Trigger
from instances.status import choices as choices_of
from instances.wiring import engine
from workflows.diagram import render, unavailable_reason
from workflows.documents import ComponentKind, ComponentRef
from workflows.models import Component, DomainReach, WorkflowGrant
from workflows.validation.scripts import is_platform_mapping, iter_script_sites

_CODE = HtmlFormatter(linenos="table", cssclass="vnext-code", wrapcode=True)
# The page's one style block: highlighted code, the document wrapped, the diagram scaled.
_STYLE = (
    "<style>"
    + _CODE.get_style_defs(".vnext-code")
    + ".vnext-code{overflow-x:auto;max-width:100%}.vnext-code pre{margin:0;font-size:12px}"
    ".vnext-code td.linenos{color:#90a4ae;padding-right:.6em;user-select:none}"
    "pre.vnext-json{white-space:pre-wrap;word-break:break-all;max-height:40em;overflow:auto}"
    ".vnext-diagram{width:100%;overflow-x:auto}.vnext-diagram svg{width:100%;height:auto}"
    "table.vnext-summary td,table.vnext-summary th{padding:2px 10px 2px 0}"
    "</style>"
)


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
    readonly_fields = (
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
        "summary",
        "diagram",
        "scripts",
        "pretty_document",
    )
    _HEADER = readonly_fields[:10]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        """A workflow version shows its summary, diagram and scripts before its document; a
        task, view, schema ... its scripts (if any) and its document."""
        if obj is not None and obj.kind == ComponentKind.WORKFLOW:
            return [*self._HEADER, "summary", "diagram", "scripts", "pretty_document"]
        return [*self._HEADER, "scripts", "pretty_document"]

    @admin.display(description="Document")
    def pretty_document(self, component: Component) -> str:
        """The stored JSON, indented and wrapped (its scripts are shown highlighted above)."""
        text = json.dumps(component.document, indent=2, ensure_ascii=False, sort_keys=False)
        return format_html('{}<pre class="vnext-json">{}</pre>', mark_safe(_STYLE), text)

    @admin.display(description="Summary")
    def summary(self, component: Component) -> str:
        """States by type, transitions by trigger, tasks, subflows, timers, and this version's
        instances by status (each a link to the list)."""
        definition = _definition(component)
        states = Counter(_label(StateType, s.state_type) for s in definition.states.values())
        transitions = [t for s in definition.states.values() for t in s.transitions]
        transitions += [*definition.shared, *definition.specials()]
        triggers = Counter(_label(Trigger, t.trigger_type) for t in transitions)
        tasks = _task_references(component.document)
        subflows = [
            str((s.subflow or {}).get("process", {}).get("key", "?"))
            for s in definition.states.values()
            if s.subflow
        ]
        timers = sum(1 for t in transitions if t.trigger_type == Trigger.SCHEDULED)
        counts = (
            Instance.objects.filter(
                domain=component.domain,
                workflow_key=component.key,
                workflow_version=component.version,
            )
            .values_list("status")
            .annotate(n=Count("id"))
            .order_by("status")
        )
        instances = format_html_join(
            ", ",
            '<a href="{}">{} {}</a>',
            (
                (
                    self._instances_url(component, status__exact=status),
                    n,
                    _label(InstanceStatus, status).lower(),
                )
                for status, n in counts
            ),
        )
        rows = [
            ("States", ", ".join(f"{n} {kind.lower()}" for kind, n in sorted(states.items()))),
            (
                "Transitions",
                ", ".join(f"{n} {kind.lower()}" for kind, n in sorted(triggers.items())),
            ),
            ("Tasks", f"{len(tasks)} references to {len(set(tasks))} task(s)"),
            ("Subflows", ", ".join(subflows) or "none"),
            ("Timers", f"{timers} scheduled transition(s)"
             + (", a workflow timeout" if definition.timeout else "")),
        ]  # fmt: skip
        body = format_html_join("", "<tr><th>{}</th><td>{}</td></tr>", rows)
        return format_html(
            '<table class="vnext-summary">{}<tr><th>Instances</th><td>{} (<a href="{}">all</a>)'
            "</td></tr></table>",
            body,
            instances or "none yet",
            self._instances_url(component),
        )

    @admin.display(description="Diagram")
    def diagram(self, component: Component) -> str:
        """The state diagram; each state links to this version's instances in it."""
        definition = _definition(component)
        drawn = render(definition, lambda key: self._instances_url(component, state=key))
        if drawn is None:
            return format_html("<p>No diagram: {}.</p>", unavailable_reason())
        return format_html('<div class="vnext-diagram">{}</div>', mark_safe(drawn.svg))

    @admin.display(description="Scripts")
    def scripts(self, component: Component) -> str:
        """Every script of the component, highlighted with line numbers, under its pointer."""
        blocks = []
        for site in iter_script_sites(component.document, component.kind):
            if is_platform_mapping(site):
                continue  # `{"type": "G"}`: no mapping, nothing to show
            try:
                source = script_text(site.node, _no_registry)
            except ScriptTextMissing as missing:
                source = f"# {missing}"
            blocks.append(
                (
                    site.pointer,
                    site.location,
                    SafeString(highlight(source, PythonLexer(), _CODE)),
                )
            )
        if not blocks:
            return "none"
        return format_html_join("", "<h4>{} <small>({})</small></h4>{}", blocks)

    @staticmethod
    def _instances_url(component: Component, **filters: str) -> str:
        # The instance list's registry filters (workflow, version, state; instances.admin).
        query = {
            "workflow": f"{component.domain}/{component.key}",
            "version": component.version,
            **filters,
        }
        return reverse("admin:instances_instance_changelist") + "?" + urlencode(query)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # publishing goes through validation: the API or import_components

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _task_references(document: dict[str, Any]) -> list[str]:
    # Every task a workflow runs (a task may be referenced more than once).
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            ref = ComponentRef.from_reference(node.get("task")) if "task" in node else None
            if ref is not None and "order" in node:
                found.append(f"{ref.domain}/{ref.key}@{ref.version}")
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document.get("attributes"))
    return found


def _definition(component: Component) -> WorkflowDefinition:
    # The engine's parsed definition of the version: parsed (and its diagram drawn) once.
    found = engine().components.workflow(component.domain, component.key, component.version)
    return found if found is not None else WorkflowDefinition(component.document)


def _label(choices: Any, value: Any) -> str:
    # The label of a choices value, or the value itself when it is not one of them.
    return str(dict(choices_of(choices)).get(value, value))


def _no_registry(reference: dict[str, Any]) -> dict[str, Any] | None:
    # REF scripts were embedded by `import_components`: the admin does not resolve others.
    return None


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
