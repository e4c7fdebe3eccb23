"""`GET /metrics` after a few transitions, an async job, a fault and a retry: the series an
operator's dashboard reads are there, with the expected labels and values. Process counters are
cumulative over the test session, so each test compares the scrape before and after."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from instances.job_handlers import jobs_run_due
from tests.instances.operator_fixtures import DIVIDE
from tests.instances.test_retry__api import compute, repairable, retry, started
from tests.instances.workflows import ping_pong, publish

pytestmark = pytest.mark.django_db
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(client: Any) -> Samples:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def grew(before: Samples, after: Samples) -> Callable[..., float]:
    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    return delta


def test_metrics_show_transitions_jobs_faults_and_retries(operator_client, client):
    publish(ping_pong(), repairable(on_execute=[DIVIDE]))
    before = scrape(client)
    pings = "/api/v1/core/workflows/ping-pong/instances"

    # Two sync transitions, one async start run by the job runner.
    instance_id = operator_client.post(f"{pings}/start?sync=true", {}, format="json").json()["id"]
    operator_client.patch(f"{pings}/{instance_id}/transitions/to-pong?sync=true", {}, format="json")
    accepted = operator_client.post(f"{pings}/start", {}, format="json")
    assert accepted.status_code == 202
    assert jobs_run_due() == {"succeeded": 1}
    # A fault (division by zero in a task), then a retry that completes it.
    faulted = started(operator_client)
    compute(operator_client, faulted)
    assert retry(operator_client, faulted, {"attributes": {"divisor": 4}}).status_code == 200

    after = scrape(client)
    delta = grew(before, after)
    transitions = "vnext_transitions_total"
    assert delta(transitions, domain="core", workflow="ping-pong", transition="start",
                 outcome="completed") == 2  # fmt: skip
    assert delta(transitions, domain="core", workflow="ping-pong", transition="to-pong",
                 outcome="completed") == 1  # fmt: skip
    assert delta(transitions, domain="core", workflow="repairable", transition="compute",
                 outcome="faulted") == 1  # fmt: skip
    assert delta(transitions, domain="core", workflow="repairable", transition="compute",
                 outcome="completed") == 1  # fmt: skip
    assert (
        delta("vnext_transition_duration_seconds_count", domain="core", workflow="ping-pong") == 3
    )
    assert delta("vnext_step_duration_seconds_count", step="SetBusyStep") >= 1
    assert delta("vnext_jobs_total", kind="transition", outcome="succeeded") == 1
    assert delta("vnext_job_duration_seconds_count", kind="transition") == 1
    assert delta("vnext_script_calls_total", outcome="ok") >= 1
    assert delta("vnext_http_requests_total", method="PATCH", status="200",
                 route="api/v1/<str:domain>/workflows/<str:workflow>/instances/<str:instance>"
                 "/transitions/<str:transition>") == 2  # fmt: skip
    # Database figures, as of the scrape.
    assert value(after, "vnext_instances", status="A") == 3
    assert value(after, "vnext_incidents_open", error_code="Task:400008") == 0
    assert value(after, "vnext_instances_busy_past_lease") == 0


def test_an_open_incident_and_a_waiting_job_are_counted_from_the_database(operator_client, client):
    publish(ping_pong(), repairable(on_execute=[DIVIDE]))
    compute(operator_client, started(operator_client))
    accepted = operator_client.post("/api/v1/core/workflows/ping-pong/instances/start", {},
                                    format="json")  # fmt: skip
    assert accepted.status_code == 202

    samples = scrape(client)

    assert value(samples, "vnext_incidents_open", error_code="Task:400008") == 1
    assert value(samples, "vnext_instances", status="F") == 1
    assert value(samples, "vnext_instances", status="B") == 1
    assert value(samples, "vnext_job_queue_depth", kind="transition", status="pending") == 1
    assert ("vnext_job_queue_oldest_due_age_seconds", frozenset({("kind", "transition")})) in (
        samples
    )


def test_a_scrape_token_is_required_when_one_is_set(client, settings):
    settings.VNEXT = {**settings.VNEXT, "METRICS_TOKEN": "s3cret"}

    refused = client.get("/metrics")
    wrong = client.get("/metrics", headers={"Authorization": "Bearer nope"})
    allowed = client.get("/metrics", headers={"Authorization": "Bearer s3cret"})

    assert (refused.status_code, refused["WWW-Authenticate"]) == (401, "Bearer")
    assert wrong.status_code == 401
    assert allowed.status_code == 200
    assert b"vnext_transitions_total" in allowed.content or b"vnext_instances" in allowed.content


def test_every_answer_carries_a_request_id_and_keeps_a_sane_one(client):
    mine = client.get("/health", headers={"X-Request-ID": "gateway-7f3a.1"})
    made = client.get("/health")
    refused = client.get("/health", headers={"X-Request-ID": "bad id\nwith a newline"})

    assert mine["X-Request-ID"] == "gateway-7f3a.1"
    assert len(made["X-Request-ID"]) == 32
    assert refused["X-Request-ID"] != "bad id\nwith a newline"


def test_the_grafana_dashboard_is_built_from_its_script_and_reads_only_served_series(client):
    import json
    import re
    from pathlib import Path

    from ops.grafana.build_dashboard import dashboard

    path = Path(__file__).resolve().parents[2] / "ops" / "grafana" / "vnext-dashboard.json"
    committed = json.loads(path.read_text())
    assert committed == dashboard(), "run python ops/grafana/build_dashboard.py"
    text = client.get("/metrics").content.decode()

    def family(name: str) -> str:
        return re.sub(r"_(bucket|count|sum|total)$", "", name)

    served = {family(name) for name in re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE)}
    queried = {
        family(name)
        for panel in committed["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\bvnext_[a-z_]+", target["expr"])
    }
    assert queried
    assert {name for name in queried if name not in served} == set()
