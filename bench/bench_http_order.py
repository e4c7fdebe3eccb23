"""The `order` workflow over HTTP (issue 32), served as `make run` serves PostgreSQL.

`manage.py vnext_run` (uvicorn, a2wsgi, HTTP_WORKERS worker processes, the bench database) runs
the published `bench-order` workflow: `POST .../start?sync=true`, `PATCH .../transitions/submit
?sync=true` (writes `amount`), `PATCH .../transitions/approve?sync=true` (writes `decision`, to
the Final state), each answer checked (200, the state the step ends in). In ROUNDS rounds:

- sequential: SEQUENTIAL_WORKFLOWS workflows on one keep-alive connection, a `GET /health` after
  each: the p50/p99 of each step beside the HTTP stack's floor on the same connection;
- load: LOAD_CLIENTS client processes (spawned once) for LOAD_SECONDS asking `GET /health`, then
  as long running `order` workflows one after the other (the order of the two swapped each round):
  workflows/s beside /health/s, the same clients on the same server in the same round.

Latencies of the rounds are merged; rates are their mean. Under each load the server's CPU time
per request is read from `/proc` (every server process; PostgreSQL's aside): a figure a busy
machine moves less than it moves latencies. `BENCH_HTTP_WORKERS` overrides the
worker processes (2: what `make run` starts on a two-CPU machine).
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.pool
import os
import time
from dataclasses import dataclass, field

import httpx
from django.conf import settings
from django.core.management import call_command
from django.db import connection

from bench.database import bench_database_url
from bench.http_load import ORDER_STEPS, drive, drive_orders, order_workflow
from bench.server import BenchServer
from bench.summary import record
from bench.timing import percentile
from bench.transition_workflows import DOMAIN, ORDER, order_document
from instances.models import Instance
from workflows.models import Component
from workflows.services import component_publish

WORKERS = int(os.environ.get("BENCH_HTTP_WORKERS") or 2)
ROUNDS = 3
SEQUENTIAL_WORKFLOWS = 100  # per round, on one keep-alive connection
WARMUP = 20  # workflows before timing: the first requests of a process import and connect
LOAD_CLIENTS = 8
LOAD_SECONDS = 5.0
PATH = f"/api/v1/{DOMAIN}/workflows/{ORDER}/instances"
STEP_P50_MS = 3.0
STEP_P99_MS = 10.0
RATE_RATIO = 0.5


@dataclass
class Figures:
    """What the rounds measured: latencies per step (and /health), rates per round."""

    sequential: dict[str, list[float]] = field(default_factory=dict)
    loaded: dict[str, list[float]] = field(default_factory=dict)
    health_rates: list[float] = field(default_factory=list)
    workflow_rates: list[float] = field(default_factory=list)
    # The server's CPU seconds and the requests answered, under each load.
    health_cpu: list[tuple[float, int]] = field(default_factory=list)
    order_cpu: list[tuple[float, int]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def ms(self, kind: str, fraction: float, *, loaded: bool = False) -> float:
        """A percentile of `kind`'s latencies (a step, "health", or "step": submit and approve
        together), in ms."""
        source = self.loaded if loaded else self.sequential
        if kind == "step":
            values = source.get("submit", []) + source.get("approve", [])
        else:
            values = source.get(kind, [])
        return 1000 * percentile(values or [0.0], fraction)

    def cpu_ms(self, kind: str) -> float:
        """The server's CPU milliseconds per request under the `kind` ("health", "order")
        load: every process of it (the database's aside)."""
        spent = self.health_cpu if kind == "health" else self.order_cpu
        requests = sum(count for _, count in spent)
        return 1000 * sum(seconds for seconds, _ in spent) / requests if requests else 0.0

    @property
    def health_rate(self) -> float:
        """Mean `GET /health` per second with LOAD_CLIENTS clients."""
        return sum(self.health_rates) / max(len(self.health_rates), 1)

    @property
    def workflow_rate(self) -> float:
        """Mean `order` workflows per second with LOAD_CLIENTS clients."""
        return sum(self.workflow_rates) / max(len(self.workflow_rates), 1)


def prepare_database() -> None:
    """Migrate the bench database, empty the instances, publish the `order` workflow."""
    name = str(settings.DATABASES["default"]["NAME"])
    if connection.vendor != "postgresql" or name == "vnext_test":
        raise SystemExit(f"the http_order suite needs its own PostgreSQL database, not {name!r}")
    call_command("migrate", interactive=False, verbosity=0)
    with connection.cursor() as cursor:
        # Our own database: every run starts from the same table sizes.
        cursor.execute(f"TRUNCATE {Instance._meta.db_table} CASCADE")
    Component.objects.filter(domain=DOMAIN, key=ORDER).delete()
    result = component_publish(document=order_document(), published_by="bench")
    if result.status != "published":
        raise RuntimeError(f"{result.ref}: {result.status}")


def sequential(server: BenchServer, token: str, figures: Figures, *, warm_up: bool) -> None:
    """SEQUENTIAL_WORKFLOWS workflows on one keep-alive connection, a `GET /health` after each."""
    headers = {"Authorization": f"Token {token}"}
    with httpx.Client(base_url=server.base_url, headers=headers, timeout=30.0) as client:
        if warm_up:
            for _ in range(WARMUP):
                order_workflow(client, PATH, {})
                client.get("/health")
        for _ in range(SEQUENTIAL_WORKFLOWS):
            failure = order_workflow(client, PATH, figures.sequential)
            if failure is not None:
                figures.failures.append(failure)
            began = time.perf_counter()
            answer = client.get("/health")
            figures.sequential.setdefault("health", []).append(time.perf_counter() - began)
            if answer.status_code != 200:
                figures.failures.append(f"health: {answer.status_code}")


def _health_load(
    server: BenchServer, token: str, clients: multiprocessing.pool.Pool, figures: Figures
) -> float:
    arguments = [(server.base_url, token, PATH, LOAD_SECONDS, False)] * LOAD_CLIENTS
    cpu = server.cpu_seconds()
    outcomes = clients.starmap(drive, arguments)
    completed = sum(outcome.completed for outcome in outcomes)
    figures.health_cpu.append((server.cpu_seconds() - cpu, completed))
    failed = sum(len(outcome.failures) for outcome in outcomes)
    if failed:
        raise RuntimeError(f"GET /health failed {failed} times under load")
    return completed / LOAD_SECONDS


def _order_load(
    server: BenchServer, token: str, clients: multiprocessing.pool.Pool, figures: Figures
) -> float:
    arguments = [(server.base_url, token, PATH, LOAD_SECONDS)] * LOAD_CLIENTS
    cpu = server.cpu_seconds()
    outcomes = clients.starmap(drive_orders, arguments)
    requests = sum(len(values) for outcome in outcomes for values in outcome.steps.values())
    figures.order_cpu.append((server.cpu_seconds() - cpu, requests))
    for outcome in outcomes:
        figures.failures.extend(outcome.failures)
        for step, values in outcome.steps.items():
            figures.loaded.setdefault(step, []).extend(values)
    return sum(outcome.completed for outcome in outcomes) / LOAD_SECONDS


def measure(server: BenchServer, token: str, clients: multiprocessing.pool.Pool) -> Figures:
    """ROUNDS rounds of sequential workflows, then the two loads (their order swapped each
    round)."""
    figures = Figures()
    for number in range(ROUNDS):
        sequential(server, token, figures, warm_up=number == 0)
        if number % 2 == 0:
            health = _health_load(server, token, clients, figures)
            workflows = _order_load(server, token, clients, figures)
        else:
            workflows = _order_load(server, token, clients, figures)
            health = _health_load(server, token, clients, figures)
        figures.health_rates.append(health)
        figures.workflow_rates.append(workflows)
        print(
            f"  round {number + 1}: /health/s {health:>6.0f}  workflows/s {workflows:>5.0f} "
            f"({3 * workflows:.0f} requests/s)  failed so far {len(figures.failures)}"
        )
    return figures


def report(figures: Figures, server: BenchServer, load: tuple[float, float]) -> None:
    """The step table, the rates and their ratio, and the summary rows."""
    print(
        f"\norder over HTTP: vnext_run, {server.workers} worker processes, PostgreSQL; "
        f"{ROUNDS} rounds of {SEQUENTIAL_WORKFLOWS} sequential workflows on one keep-alive "
        f"connection (a GET /health after each), then {LOAD_CLIENTS} client processes x "
        f"{LOAD_SECONDS:g} s on /health and on workflows"
    )
    print(f"{'request':<34} {'N':>5} {'p50 ms':>8} {'p99 ms':>8} {'loaded p50':>10} {'p99':>8}")
    for step, *_ in ORDER_STEPS:
        loaded_p50, loaded_p99 = (figures.ms(step, f, loaded=True) for f in (0.5, 0.99))
        print(
            f"{step + ' ?sync=true':<34} {len(figures.sequential.get(step, [])):>5} "
            f"{figures.ms(step, 0.5):>8.2f} {figures.ms(step, 0.99):>8.2f} "
            f"{loaded_p50:>10.2f} {loaded_p99:>8.2f}"
        )
    print(
        f"{'GET /health (same connection)':<34} {len(figures.sequential.get('health', [])):>5} "
        f"{figures.ms('health', 0.5):>8.2f} {figures.ms('health', 0.99):>8.2f}"
    )
    ratio = figures.workflow_rate / figures.health_rate if figures.health_rate else 0.0
    print(
        f"  {LOAD_CLIENTS} clients: {figures.workflow_rate:.0f} workflows/s "
        f"({3 * figures.workflow_rate:.0f} requests/s) against {figures.health_rate:.0f} "
        f"GET /health/s: {ratio:.2f}x (requests {3 * ratio:.2f}x); failed {len(figures.failures)}"
    )
    print(
        f"  server CPU per request under load (every server process, PostgreSQL aside): "
        f"order {figures.cpu_ms('order'):.2f} ms, GET /health {figures.cpu_ms('health'):.2f} ms"
    )
    for failure in figures.failures[:3]:
        print(f"    failure: {failure}")
    print(
        f"  load average (1 min) {load[0]:.2f} before, {load[1]:.2f} after, {os.cpu_count()} CPUs"
    )
    health_p50 = figures.ms("health", 0.5)
    for kind in ("start", "step"):
        for label, fraction, limit in (("p50", 0.5, STEP_P50_MS), ("p99", 0.99, STEP_P99_MS)):
            value = figures.ms(kind, fraction)
            record(
                f"HTTP order {kind} {label}",
                value,
                "ms",
                baseline="GET /health p50, same connection",
                baseline_value=health_p50,
                target=f"<= {limit:g} ms",
                met=value <= limit,
            )
    record(
        f"HTTP order workflows/s, {LOAD_CLIENTS} clients",
        figures.workflow_rate,
        "/s",
        baseline=f"GET /health/s, {LOAD_CLIENTS} clients",
        baseline_value=figures.health_rate,
        target=f">= {RATE_RATIO:g}x, 0 failed",
        met=ratio >= RATE_RATIO and not figures.failures,
    )


def main() -> None:
    """Publish, start the server, measure in rounds, report."""
    from rest_framework.authtoken.models import Token

    logging.getLogger("httpx").setLevel(logging.WARNING)
    print(f"database {settings.DATABASES['default']['NAME']} (PostgreSQL, own bench database)")
    prepare_database()
    server = BenchServer(bench_database_url(), workers=WORKERS)
    # Spawned once for every load run: spawning 8 clients takes seconds on a busy machine.
    clients = multiprocessing.get_context("spawn").Pool(LOAD_CLIENTS)
    try:
        server.start()
        token = Token.objects.get(user__username=server.username).key
        load_before = os.getloadavg()[0]
        figures = measure(server, token, clients)
        load = (load_before, os.getloadavg()[0])
    finally:
        clients.close()
        clients.join()
        exit_code = server.stop()
    report(figures, server, load)
    print(f"  server stopped with SIGTERM, exit status {exit_code}")
