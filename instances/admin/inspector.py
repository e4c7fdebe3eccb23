"""The instance inspector's panels: the diagram with the current state and the path taken, the
timeline, the data versions with what each changed, the jobs and the locks. Each panel reads
its rows in one query, so the page's query count does not grow with the instance's history."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince

from instances.engine.cron import cron_describe
from instances.engine.scripts import CronSchedule
from instances.job_payloads import TimerJob
from instances.models import (
    Incident,
    Instance,
    InstanceDataVersion,
    InstanceTask,
    InstanceTransition,
)
from instances.queue import jobs_of_instance_list
from instances.status import JobKind, JobStatus, Trigger, choices
from instances.wiring import engine
from locks.models import ResourceLock
from workflows.diagram import render, unavailable_reason

# Timelines and data histories longer than this show their newest rows (the rest are counted).
MAX_ROWS = 500
_STYLE = mark_safe(
    "<style>"
    ".vnext-diagram{width:100%;overflow-x:auto}.vnext-diagram svg{width:100%;height:auto}"
    "table.vnext-rows{width:100%;border-collapse:collapse;font-size:12px}"
    "table.vnext-rows th,table.vnext-rows td{padding:3px 6px;border-bottom:1px solid #eceff1;"
    "text-align:left;vertical-align:top}"
    "table.vnext-rows tr.failed td,table.vnext-rows tr.faulted td{background:#ffebee}"
    ".vnext-change del{background:#ffebee;text-decoration:none}"
    ".vnext-change ins{background:#e8f5e9;text-decoration:none}"
    ".vnext-age{color:#78909c}"
    "</style>"
)


def when(moment: datetime | None) -> SafeString | str:
    """A time to the second, with its age (`2026-12-01 10:07:31 (4 minutes ago)`)."""
    if moment is None:
        return "-"
    local = timezone.localtime(moment)
    return format_html(
        '{} <span class="vnext-age">({} ago)</span>',
        local.strftime("%Y-%m-%d %H:%M:%S"),
        timesince(moment).split(",")[0],
    )


def diagram_panel(instance: Instance, path: list[InstanceTransition]) -> SafeString:
    """The version's diagram, the current state filled and the transitions taken drawn heavy."""
    definition = engine().components.workflow(
        instance.domain, instance.workflow_key, instance.workflow_version
    )
    drawn = render(definition) if definition is not None else None
    if drawn is None:
        reason = "the workflow version is not published"
        if definition is not None:
            reason = unavailable_reason()
        return format_html("<p>No diagram: {}.</p>", reason)
    scope = f"diagram-{instance.pk}"
    taken = [(row.from_state, row.transition_key) for row in path if row.status == "completed"]
    style = drawn.highlight(scope, instance.current_state, taken)
    svg, badge = drawn.svg, ""
    incident = (
        Incident.objects.filter(instance=instance, resolved=False)
        .order_by("-created_at")
        .values_list("error_code", "state")
        .first()
    )
    node = drawn.states.get((incident[1] or instance.current_state) if incident else "")
    if incident and node:
        svg = _incident_marked(svg, node, incident[0])
        badge = (
            f"#{scope} g#{node}.vnext-incident path, #{scope} g#{node}.vnext-incident polygon "
            "{stroke:#c62828;stroke-width:4px;stroke-dasharray:6 3}"
            f"#{scope} g#{node}.vnext-incident text {{fill:#b71c1c;font-weight:bold}}"
        )
    return format_html(
        '{}<div id="{}" class="vnext-diagram">{}<style>{}</style>{}{}</div>',
        _STYLE,
        scope,
        mark_safe(style),
        mark_safe(badge),
        format_html(
            '<p class="vnext-incident-badge" style="color:#c62828">&#9888; open incident {} in '
            "state {}</p>",
            incident[0],
            incident[1] or instance.current_state,
        )
        if incident and node
        else "",
        mark_safe(svg),
    )


def _incident_marked(svg: str, node: str, code: str) -> str:
    """The SVG with the state node `node` carrying the class `vnext-incident` (drawn red by
    the panel's style) and its open incident's error code in its title (the tooltip)."""
    opening = re.compile(rf'(<g id="{re.escape(node)}" class=")([^"]*)(">\s*<title>)([^<]*)')
    return opening.sub(
        lambda m: f"{m[1]}vnext-incident {m[2]}{m[3]}{m[4]} (open incident {escape(code)})",
        svg,
        count=1,
    )


def history(instance: Instance) -> list[InstanceTransition]:
    """The instance's transitions, oldest first (the newest MAX_ROWS)."""
    rows = list(
        InstanceTransition.objects.filter(instance=instance)
        .defer("body")
        .order_by("-started_at")[:MAX_ROWS]
    )
    rows.reverse()
    return rows


def started_by_panel(
    instance: Instance, rows: list[InstanceTransition], parent: SafeString | str = ""
) -> SafeString | str:
    """Who started the instance: its `created_by`, else the actor of its first history row
    (the start), and the parent that started it as a subflow or subprocess, if any."""
    actor = instance.created_by
    if not actor and rows:
        first = rows[0]
        if len(rows) == MAX_ROWS:
            # Only the newest rows were read: the start is the oldest row of all (one index
            # lookup on `transition_history`).
            first = (
                InstanceTransition.objects.filter(instance=instance).order_by("started_at").first()
                or first
            )
        actor = first.actor
    if not parent:
        return actor or "-"
    return format_html("{} (for {})", actor or "-", parent) if actor else parent


def timeline_panel(rows: list[InstanceTransition]) -> SafeString | str:
    """Who, when, trigger, transition, from -> to, duration, outcome, error."""
    if not rows:
        return "no transition yet"
    triggers = dict(choices(Trigger))
    lines = format_html_join(
        "",
        '<tr class="{}"><td>{}</td><td>{}</td><td>{}</td><td>{} &rarr; {}</td><td>{}</td>'
        "<td>{}</td><td>{}</td><td>{}</td></tr>",
        (
            (
                row.status,
                when(row.started_at),
                row.actor or "-",
                triggers.get(row.trigger_type, row.trigger_type),
                row.from_state or "-",
                row.to_state or "-",
                row.transition_key,
                _duration(row),
                row.status,
                f"{row.error_code}: {row.error_message}" if row.error_code else "",
            )
            for row in rows
        ),
    )
    more = f"<p>The newest {MAX_ROWS} transitions.</p>" if len(rows) == MAX_ROWS else ""
    return format_html(
        '{}{}<table class="vnext-rows vnext-timeline"><tr><th>When</th><th>Who</th>'
        "<th>Trigger</th><th>From &rarr; to</th><th>Transition</th><th>Took</th>"
        "<th>Outcome</th><th>Error</th></tr>{}</table>",
        _STYLE,
        mark_safe(more),
        lines,
    )


def _duration(row: InstanceTransition) -> str:
    if row.finished_at is None:
        return "running" if row.status == "running" else "-"
    milliseconds = (row.finished_at - row.started_at).total_seconds() * 1000
    return f"{milliseconds:.0f} ms" if milliseconds < 10_000 else f"{milliseconds / 1000:.1f} s"


def data_panel(instance: Instance) -> SafeString | str:
    """Every data version (newest first) with what it changed against the one before."""
    versions = list(
        InstanceDataVersion.objects.filter(instance=instance)
        .select_related("transition")
        .only("version", "data", "created_at", "transition__transition_key")
        .order_by("created_at")
    )[-MAX_ROWS:]
    if not versions:
        return "no data version yet"
    rows = []
    before: dict[str, Any] = {}
    for version in versions:
        after = _flatten(version.data)
        rows.append(
            (
                version.version,
                when(version.created_at),
                version.transition.transition_key if version.transition else "-",
                _changes(before, after),
            )
        )
        before = after
    rows.reverse()
    body = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        rows,
    )
    return format_html(
        '{}<table class="vnext-rows vnext-data"><tr><th>Version</th><th>When</th>'
        "<th>Transition</th><th>Changed</th></tr>{}</table>",
        _STYLE,
        body,
    )


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    # Leaves by JSON pointer: {"a": {"b": 1}} -> {"/a/b": 1}; lists are leaves.
    if not isinstance(data, dict) or not data:
        return {prefix or "/": data}
    flat: dict[str, Any] = {}
    for key, value in data.items():
        flat.update(_flatten(value, f"{prefix}/{key}"))
    return flat


def _changes(before: dict[str, Any], after: dict[str, Any]) -> SafeString | str:
    changed = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path, _MISSING), after.get(path, _MISSING)
        if old == new:
            continue
        changed.append((path, _shown(old), _shown(new)))
    if not changed:
        return "no change"
    return format_html_join(
        "",
        '<div class="vnext-change"><code>{}</code> <del>{}</del> &rarr; <ins>{}</ins></div>',
        changed,
    )


_MISSING = object()


def _shown(value: Any) -> str:
    if value is _MISSING:
        return "(none)"
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def tasks_panel(instance: Instance) -> SafeString | str:
    """The task journal in write order (a fan-out batch's row is written just before its
    items' `key#index` rows, which show indented under it as `item #index`)."""
    rows = list(
        InstanceTask.objects.filter(instance=instance)
        .defer("response")
        .order_by("-created_at", "-id")[:MAX_ROWS]
    )
    if not rows:
        return "no task run yet"
    rows.reverse()
    body = format_html_join(
        "",
        '<tr class="{}"><td>{}</td><td class="task">{}</td><td>{}</td><td>{}</td><td>{}</td>'
        "<td>{}</td><td>{} ms</td><td>{}</td></tr>",
        (
            (
                row.status,
                when(row.created_at),
                _task_name(row.task_key),
                row.phase,
                row.order,
                row.status,
                row.attempts,
                row.duration_ms,
                f"{row.error_code}: {row.error_message}"[:300] if row.error_code else "",
            )
            for row in rows
        ),
    )
    return format_html(
        '{}<table class="vnext-rows vnext-tasks"><tr><th>When</th><th>Task</th><th>Phase</th>'
        "<th>Order</th><th>Status</th><th>Attempts</th><th>Took</th><th>Error</th></tr>{}"
        "</table>",
        _STYLE,
        body,
    )


def _task_name(key: str) -> SafeString | str:
    _, separator, index = key.rpartition("#")
    if separator and index.isdigit():
        return format_html(
            '<span style="padding-left:1.5em" title="{}">&#8627; item #{}</span>', key, index
        )
    return key


def jobs_panel(instance: Instance) -> SafeString | str:
    """The instance's pending, running and failed jobs, each linking to the job."""
    live = (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.FAILED)
    jobs = jobs_of_instance_list(instance_id=instance.pk, statuses=live, limit=100)
    if not jobs:
        return "none waiting, running or failed"
    rows = format_html_join(
        "",
        '<tr class="{}"><td><a href="{}">{}</a></td><td>{}</td><td>{}</td><td>{}</td>'
        "<td>{}</td><td>{}</td></tr>",
        (
            (
                job.status,
                reverse("admin:instances_job_change", args=[job.pk]),
                job.pk,
                job.kind,
                job.status,
                _due_cell(job),
                job.attempts,
                job.last_error[:200],
            )
            for job in jobs
        ),
    )
    return format_html(
        '{}<table class="vnext-rows vnext-jobs"><tr><th>Job</th><th>Kind</th><th>Status</th>'
        "<th>Due</th><th>Attempts</th><th>Last error</th></tr>{}</table>",
        _STYLE,
        rows,
    )


def _due_cell(job: Any) -> SafeString | str:
    """When the job is due; for a cron timer, also its schedule, zone and the schedule in words
    (the due time is its next occurrence)."""
    due = when(job.run_at)
    if job.kind not in (JobKind.TIMER, JobKind.TIMEOUT):
        return due
    timer = TimerJob.from_json(job.payload or {}) if (job.payload or {}).get("transition") else None
    if timer is None or not timer.cron:
        return due
    schedule = CronSchedule(timer.cron, timer.time_zone or "UTC")
    return format_html(
        '{}<div class="vnext-cron">cron <code>{}</code> ({}): {}</div>',
        due,
        schedule.expression,
        schedule.time_zone,
        cron_describe(schedule),
    )


def locks_panel(instance: Instance) -> SafeString | str:
    """The resource locks the instance holds, with their expiry."""
    locks = list(ResourceLock.objects.filter(owner=instance.pk).order_by("key"))
    if not locks:
        return "none held"
    return format_html_join(
        "",
        "<div><code>{}</code> (by {}, expires {})</div>",
        ((lock.key, lock.transition_key or "-", when(lock.expires_at)) for lock in locks),
    )
