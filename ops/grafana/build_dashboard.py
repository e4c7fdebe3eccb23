"""Writes `vnext-dashboard.json` (Grafana 10+, a Prometheus data source chosen at import) from
the panel list below: `python ops/grafana/build_dashboard.py`. The JSON is committed; this
script is how it is kept in step with the series `/metrics` serves (tests/site check both)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

# (title, unit, [(PromQL, legend)], description)
PANELS: list[tuple[str, str, list[tuple[str, str]], str]] = [
    ("Transitions per second by outcome", "ops",
     [('sum by (outcome) (rate(vnext_transitions_total{workflow=~"$workflow"}[5m]))',
       "{{outcome}}")],
     "Each hop of an automatic chain counts; faulted and rejected are the ones to watch."),
    ("Transitions per second by workflow", "ops",
     [('sum by (workflow, transition) (rate(vnext_transitions_total{workflow=~"$workflow"}[5m]))',
       "{{workflow}} {{transition}}")], ""),
    ("Transition duration p50 / p95 / p99", "s",
     [(f'histogram_quantile({q}, sum by (le) (rate(vnext_transition_duration_seconds_bucket'
       f'{{workflow=~"$workflow"}}[5m])))', f"p{int(q * 100)}") for q in (0.5, 0.95, 0.99)],
     "A hop's wall time, its tasks included."),
    ("Slowest pipeline steps (p95)", "s",
     [('topk(8, histogram_quantile(0.95, sum by (le, step) '
       '(rate(vnext_step_duration_seconds_bucket[5m]))))', "{{step}}")], ""),
    ("Job queue depth by kind", "short",
     [("sum by (kind) (vnext_job_queue_depth)", "{{kind}}")],
     "Pending and running jobs (read from the database at scrape time)."),
    ("Oldest due job waiting", "s",
     [("max by (kind) (vnext_job_queue_oldest_due_age_seconds)", "{{kind}}")],
     "Above a few seconds: workers are missing or saturated."),
    ("Job outcomes per second", "ops",
     [("sum by (kind, outcome) (rate(vnext_jobs_total[5m]))", "{{kind}} {{outcome}}")], ""),
    ("Jobs failed for good", "short",
     [("sum by (kind) (vnext_jobs_failed)", "{{kind}}")],
     "Each needs an operator: replay from the admin's Jobs page or `manage.py jobs_replay`."),
    ("Timer lateness p95", "s",
     [('histogram_quantile(0.95, sum by (le, kind) (rate(vnext_timer_lateness_seconds_bucket'
       '[5m])))', "{{kind}}")], "How long after its due time a timer or timeout started."),
    ("Instances by status", "short",
     [("sum by (status) (vnext_instances)", "{{status}}")],
     "A active, B busy, C completed, F faulted, S suspended, P passive."),
    ("Busy past their lease", "short",
     [("vnext_instances_busy_past_lease", "busy past lease")],
     "Should be 0: the reaper faults them with an incident."),
    ("Open incidents by error code", "short",
     [("sum by (error_code) (vnext_incidents_open)", "{{error_code}}")], ""),
    ("Script calls per second by outcome", "ops",
     [("sum by (outcome) (rate(vnext_script_calls_total[5m]))", "{{outcome}}")],
     "timeout and resource_limit kill a worker; unavailable means the pool is too small."),
    ("Script worker restarts", "ops",
     [("sum by (reason) (rate(vnext_script_worker_restarts_total[5m]))", "{{reason}}")], ""),
    ("Fan-out items per second", "ops",
     [("sum by (outcome) (rate(vnext_fan_out_items_total[5m]))", "{{outcome}}")],
     "Batches that waited for the process-wide limit show in the next panel."),
    ("Fan-out batches and bulkhead waits", "ops",
     [("sum by (outcome) (rate(vnext_fan_out_batches_total[5m]))", "batches {{outcome}}"),
      ("rate(vnext_fan_out_bulkhead_saturated_total[5m])", "bulkhead saturated")], ""),
    ("Long-polls held / outcomes", "short",
     [("sum(vnext_long_polls_waiting)", "held now"),
      ("sum by (outcome) (rate(vnext_long_polls_total[5m]))", "{{outcome}} /s")], ""),
    ("HTTP requests per second by status", "ops",
     [("sum by (status) (rate(vnext_http_requests_total[5m]))", "{{status}}")], ""),
    ("HTTP p95 by route", "s",
     [('topk(8, histogram_quantile(0.95, sum by (le, route) '
       '(rate(vnext_http_request_duration_seconds_bucket[5m]))))', "{{route}}")], ""),
]  # fmt: skip


def panel(index: int, title: str, unit: str, queries: list[tuple[str, str]], text: str) -> dict:
    """One time-series panel, two per row."""
    return {
        "id": index + 1,
        "type": "timeseries",
        "title": title,
        "description": text,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": 12, "x": (index % 2) * 12, "y": (index // 2) * 8},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [
            {
                "refId": chr(ord("A") + n),
                "expr": expr,
                "legendFormat": legend,
                "datasource": DATASOURCE,
            }
            for n, (expr, legend) in enumerate(queries)
        ],
    }


def dashboard() -> dict[str, Any]:
    """The whole dashboard."""
    return {
        "title": "vNext workflow runtime",
        "uid": "vnext-runtime",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "tags": ["vnext"],
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": "prometheus",
                    "label": "Prometheus",
                },
                {
                    "name": "workflow",
                    "type": "query",
                    "datasource": DATASOURCE,
                    "query": "label_values(vnext_transitions_total, workflow)",
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {"text": "All", "value": "$__all"},
                },
            ]
        },
        "panels": [panel(i, *spec) for i, spec in enumerate(PANELS)],
    }


if __name__ == "__main__":
    (HERE / "vnext-dashboard.json").write_text(json.dumps(dashboard(), indent=2) + "\n")
