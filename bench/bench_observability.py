"""What observability costs.

(a) Per transition: sync transitions through `instance_transition` (the bench ping-pong with a
    script task, ~20 pipeline steps), with the instrumentation as shipped (metrics, log fields,
    spans off: no exporter) against the same run with the pipeline's hooks replaced by no-ops,
    interleaved in rounds so the machine's noise falls on both alike. Target: <= 1.05x.
(b) One `/metrics` scrape (the process registry plus the database figures) with 10,000
    instances, 2,000 queued jobs and 500 open incidents, against `GET /health` in the same run.
    Target: <= 250 ms (a 15 s scrape interval).
"""

from __future__ import annotations

import statistics
import time
import uuid
from contextlib import ExitStack, nullcontext
from unittest import mock

from django.db import connection
from django.test import Client
from django.utils import timezone

from bench.bench_transitions import EngineDriver, prepare_database
from bench.summary import record
from bench.transition_workflows import DOMAIN, WITH_TASK
from instances.job_table import Job
from instances.models import Incident, Instance

ROUNDS = 7
PER_ROUND = 150


class _NoStep:
    """A step hook that measures nothing."""

    def __init__(self, step: str) -> None:
        pass

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _no_hooks() -> ExitStack:
    stack = ExitStack()
    for name, value in (
        ("timed_step", _NoStep),
        ("transition_done", lambda **_: None),
        ("bound", lambda **_: nullcontext()),
        ("span", lambda *_, **__: nullcontext()),
    ):
        stack.enter_context(mock.patch(f"instances.engine.pipeline.{name}", value))
    return stack


def _rate(driver: EngineDriver) -> float:
    started = time.perf_counter()
    for _ in range(PER_ROUND):
        driver.transition()
    return (time.perf_counter() - started) / PER_ROUND * 1000


def transition_overhead() -> tuple[float, float]:
    """Median ms per transition with and without the hooks."""
    driver = EngineDriver("observed", WITH_TASK)
    for _ in range(30):
        driver.transition()  # warm: scripts compiled, statements prepared
    observed: list[float] = []
    bare: list[float] = []
    for round_number in range(ROUNDS):
        # Alternate which goes first: a trend in the machine's load falls on both.
        if round_number % 2:
            observed.append(_rate(driver))
        with _no_hooks():
            bare.append(_rate(driver))
        if not round_number % 2:
            observed.append(_rate(driver))
    return statistics.median(observed), statistics.median(bare)


def _fill(instances: int, jobs: int, incidents: int) -> None:
    now = timezone.now()
    rows = [
        Instance(
            id=uuid.uuid4(), domain=DOMAIN, workflow_key="bench-metrics", workflow_version="1.0.0",
            status=("A", "B", "C", "F")[i % 4], current_state="s", effective_state="s",
            etag="e", entity_etag="e", busy_since=now if i % 4 == 1 else None,
        )
        for i in range(instances)
    ]  # fmt: skip
    Instance.objects.bulk_create(rows, batch_size=2000)
    Job.objects.bulk_create(
        [
            Job(kind=("transition", "timer", "notification")[i % 3], instance_id=rows[i].id,
                run_at=now, status="pending")
            for i in range(jobs)
        ],
        batch_size=2000,
    )  # fmt: skip
    Incident.objects.bulk_create(
        [
            Incident(instance_id=rows[i].id, error_code=f"Task:Http:{500 + i % 4}", message="m")
            for i in range(incidents)
        ],
        batch_size=2000,
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def _median_ms(client: Client, path: str) -> float:
    client.get(path)
    times = []
    for _ in range(15):
        started = time.perf_counter()
        response = client.get(path)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, path
    return statistics.median(times)


def scrape_cost() -> tuple[float, float]:
    """Median ms of a `/metrics` scrape and of `/health`."""
    _fill(instances=10_000, jobs=2_000, incidents=500)
    client = Client(HTTP_HOST="localhost")
    return _median_ms(client, "/metrics"), _median_ms(client, "/health")


def main() -> None:
    """Measure both and record them."""
    prepare_database()
    observed, bare = transition_overhead()
    ratio = observed / bare
    print(
        f"observability: sync transition with a script task {observed:.2f} ms instrumented, "
        f"{bare:.2f} ms with the hooks removed ({ratio:.3f}x)"
    )
    record(
        "observability: sync transition, instrumented",
        observed,
        "ms",
        baseline="same transitions, hooks removed",
        baseline_value=bare,
        target="<= 1.05x",
        met=ratio <= 1.05,
    )
    scrape, health = scrape_cost()
    print(
        f"observability: /metrics scrape with 10,000 instances, 2,000 jobs, 500 incidents "
        f"{scrape:.1f} ms (GET /health {health:.1f} ms)"
    )
    record(
        "observability: /metrics scrape (10k instances, 2k jobs)",
        scrape,
        "ms",
        baseline="GET /health",
        baseline_value=health,
        target="<= 250 ms",
        met=scrape <= 250,
    )
