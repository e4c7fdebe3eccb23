"""Trace spans: a transition is a `transition <key>` span whose steps are child spans, a job
is a `job <kind>` span around its transition; with `OTEL_EXPORTER_OTLP_ENDPOINT` set, a process
exports its spans over OTLP/HTTP (checked against a local collector stand-in); without it the
API stays a no-op."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from instances.engine.telemetry import set_tracing
from instances.job_handlers import jobs_run_due
from tests.instances.workflows import ping_pong, publish

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    set_tracing(True)
    yield exporter
    # The global provider cannot be replaced or removed: no span is made for the rest of the
    # session (a span ended on a shut-down provider would log a warning each time).
    set_tracing(False)
    provider.shutdown()


@pytest.mark.django_db
def test_a_transition_is_a_span_with_its_steps_as_children(operator_client, spans):
    publish(ping_pong())
    base = "/api/v1/core/workflows/ping-pong/instances"
    instance_id = operator_client.post(f"{base}/start?sync=true", {}, format="json").json()["id"]
    spans.clear()

    operator_client.patch(f"{base}/{instance_id}/transitions/to-pong?sync=true", {}, format="json")

    finished = spans.get_finished_spans()
    [hop] = [span for span in finished if span.name == "transition to-pong"]
    assert hop.attributes["vnext.instance_id"] == instance_id
    assert hop.attributes["vnext.workflow"] == "ping-pong"
    steps = [
        span for span in finished if span.parent and span.parent.span_id == hop.context.span_id
    ]
    assert {span.name for span in steps} >= {"step SetBusyStep", "step ChangeStateStep"}


@pytest.mark.django_db
def test_a_job_span_holds_its_transition(operator_client, spans):
    publish(ping_pong())
    accepted = operator_client.post("/api/v1/core/workflows/ping-pong/instances/start", {},
                                    format="json")  # fmt: skip
    assert accepted.status_code == 202
    spans.clear()

    jobs_run_due()

    finished = spans.get_finished_spans()
    [job] = [span for span in finished if span.name == "job transition"]
    [hop] = [span for span in finished if span.name == "transition start"]
    assert hop.parent is not None
    assert hop.parent.span_id == job.context.span_id
    assert hop.context.trace_id == job.context.trace_id


class Collector(ThreadingHTTPServer):
    daemon_threads = True
    posts: list[tuple[str, bytes]]


class CollectorHandler(BaseHTTPRequestHandler):
    server: Collector

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.server.posts.append((self.path, self.rfile.read(length)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()


PROBE = """
import django
django.setup()
from opentelemetry import trace
from instances.engine.telemetry import span
with span("transition probe-transition", workflow="probe"):
    pass
provider = trace.get_tracer_provider()
print(type(provider).__name__)
if hasattr(provider, "force_flush"):
    provider.force_flush()
"""


def run_probe(extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("OTEL_") and key != "PYTEST_CURRENT_TEST"
    }
    env.update({"DJANGO_SETTINGS_MODULE": "vnext.settings", **extra_env})
    return subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


def test_spans_are_exported_over_otlp_http_when_an_endpoint_is_set():
    collector = Collector(("127.0.0.1", 0), CollectorHandler)
    collector.posts = []
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{collector.server_address[1]}"
        done = run_probe({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SERVICE_NAME": "probe"})
    finally:
        collector.shutdown()
        collector.server_close()

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "TracerProvider"
    [(path, body)] = collector.posts
    assert path == "/v1/traces"
    assert b"transition probe-transition" in body
    assert b"probe" in body


def test_without_an_endpoint_nothing_is_exported():
    done = run_probe({})

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ProxyTracerProvider"
