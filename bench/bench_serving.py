"""Serving topologies side by side: the same project, the same bench database, three servers.

1. uvicorn + Django's ASGI handler (`bench/asgi_django.py`): Django runs the sync part of each
   request in a thread made for that request; connections come from psycopg's pool (8 a process).
2. uvicorn + a2wsgi: `manage.py vnext_run`, what `make run` serves today: Django's WSGI handler
   on a pool of VNEXT_HTTP_THREADS long-lived threads a process (the hop from the event loop to
   one of them on every request), each thread keeping its connection (vnext_run's default).
3. gunicorn gthread (`bench/wsgi_django.py`): WSGI worker processes x THREADS threads, each thread
   keeping its own connection (CONN_MAX_AGE, health-checked before reuse), no pool, no hop.

Every server runs the cores' number of worker processes (as `vnext_run` does on PostgreSQL). All
three are up at once, each on its own port (an idle server costs memory, not CPU), and measured in
PASSES passes, the order reversed each pass, because the machine is shared and noisy. Per server
and pass: `GET /health` and sync `PATCH` ping-pong interleaved on one keep-alive connection, then
LOAD_CLIENTS client processes for LOAD_SECONDS asking `GET /health`, then driving sync
transitions on disjoint instances (the transitions suite's `_load`, on one pool of client
processes spawned once). Latencies of the passes are merged; rates are their mean.
No server writes an access log (`vnext_run`'s default, VNEXT_HTTP_ACCESS_LOG=false; gunicorn's
default), except topology 2b, `vnext_run` with it on, to show what one costs.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.pool
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
from django.conf import settings

from bench.bench_transitions import LOAD_CLIENTS, LOAD_SECONDS, _load, prepare_database
from bench.database import bench_database_url
from bench.server import BenchServer
from bench.summary import record
from bench.timing import percentile
from bench.transition_workflows import DOMAIN, NO_TASK

PASSES = 2
HEALTH_CALLS = 250  # per pass (500 in all), on one keep-alive connection
PATCH_CALLS = 150  # per pass (300 in all), spread among the health calls
WARMUP = 20  # requests of each kind before timing: the first ones import and connect
INSTANCES = 4  # the sequential PATCHes round-robin over these (one pass, one server)
THREADS = 4  # gunicorn threads per worker process
NEXT_KEY = {"ping": "to-pong", "pong": "to-ping"}
PATH = f"/api/v1/{DOMAIN}/workflows/{NO_TASK}/instances"


@dataclass
class Topology:
    """One serving topology, its server and what was measured on it over the passes."""

    label: str
    short: str
    server: BenchServer
    startup: float = 0.0
    health: list[float] = field(default_factory=list)
    patch: list[float] = field(default_factory=list)
    health_rates: list[float] = field(default_factory=list)
    patch_rates: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    load_failed: int = 0
    exit_code: int | None = None

    @property
    def failed(self) -> int:
        """Requests that failed: non-2xx answers and transport errors, sequential and load."""
        return len(self.failures) + self.load_failed

    @property
    def server_errors(self) -> int:
        """5xx answers among the sequential failures (load clients report only a count)."""
        return sum(1 for failure in self.failures if failure[:1] == "5")

    def ms(self, kind: str, fraction: float) -> float:
        """A percentile of the sequential `kind` ("health" or "patch") latencies, in ms."""
        values = self.health if kind == "health" else self.patch
        return 1000 * percentile(values or [0.0], fraction)

    @property
    def health_rate(self) -> float:
        """Mean `GET /health` per second with LOAD_CLIENTS clients, over the passes."""
        return sum(self.health_rates) / max(len(self.health_rates), 1)

    @property
    def patch_rate(self) -> float:
        """Mean sync transitions per second with LOAD_CLIENTS clients, over the passes."""
        return sum(self.patch_rates) / max(len(self.patch_rates), 1)


def _uvicorn_asgi(workers: int) -> Callable[[int], list[str]]:
    def command(port: int) -> list[str]:
        # No access log, as `vnext_run` runs uvicorn: only the handler differs from topology 2.
        arguments = (
            f"-m uvicorn bench.asgi_django:application --host 127.0.0.1 --port {port} "
            f"--workers {workers} --lifespan off --log-level info --no-access-log"
        )
        return [sys.executable, *arguments.split()]

    return command


def _gunicorn(workers: int) -> Callable[[int], list[str]]:
    def command(port: int) -> list[str]:
        # No --access-logfile: gunicorn writes no access log.
        arguments = (
            f"-m gunicorn bench.wsgi_django:application --worker-class gthread "
            f"--workers {workers} --threads {THREADS} --bind 127.0.0.1:{port} --log-level warning"
        )
        return [sys.executable, *arguments.split()]

    return command


def topologies() -> list[Topology]:
    """The three servers (not started), `vnext_run`'s first: it sizes the others."""
    url = bench_database_url()
    today = BenchServer(url)
    workers = today.workers
    # No pool: each gthread thread keeps one connection, checked before reuse, as vnext_run
    # configures PostgreSQL when no pool is set.
    persistent = {
        "DATABASE_POOL_MAX_SIZE": None,
        "DATABASE_CONN_MAX_AGE": "300",
        "DATABASE_CONN_HEALTH_CHECKS": "true",
    }
    return [
        Topology(
            f"uvicorn + Django ASGI handler ({workers} proc)",
            "uvicorn+Django ASGI",
            # Django's ASGI handler runs each request in a new thread: without a pool, every
            # request would open a connection.
            BenchServer(url, command=_uvicorn_asgi(workers), env={"DATABASE_POOL_MAX_SIZE": "8"}),
        ),
        Topology(
            f"uvicorn + a2wsgi, access log ({workers} proc)",
            "uvicorn+a2wsgi+log",
            BenchServer(url, env={"VNEXT_HTTP_ACCESS_LOG": "true"}),
        ),
        Topology(f"uvicorn + a2wsgi, make run ({workers} proc)", "uvicorn+a2wsgi", today),
        Topology(
            f"gunicorn gthread ({workers} proc x {THREADS} threads)",
            "gunicorn gthread",
            BenchServer(url, command=_gunicorn(workers), env=persistent),
        ),
    ]


# --- measuring ----------------------------------------------------------------------------------


def sequential(topology: Topology, token: str) -> None:
    """`GET /health` and sync PATCH ping-pong interleaved on one keep-alive connection."""
    headers = {"Authorization": f"Token {token}"}
    base_url = topology.server.base_url
    with httpx.Client(base_url=base_url, headers=headers, timeout=30.0) as client:
        refs, states = [], []
        for _ in range(INSTANCES):
            answer = client.post(f"{PATH}/start?sync=true", json={"attributes": {}})
            answer.raise_for_status()
            refs.append(answer.json()["id"])
            states.append("ping")

        def call(method: str, url: str) -> float | None:
            began = time.perf_counter()
            try:
                answer = client.request(method, url, json={} if method == "PATCH" else None)
            except httpx.TransportError as exc:
                topology.failures.append(f"{method} {url}: {type(exc).__name__} {exc}")
                return None
            elapsed = time.perf_counter() - began
            if answer.status_code >= 300:
                topology.failures.append(f"{answer.status_code} {method} {answer.text[:200]}")
                return None
            return elapsed

        def patch(number: int) -> float | None:
            index = number % INSTANCES
            url = f"{PATH}/{refs[index]}/transitions/{NEXT_KEY[states[index]]}?sync=true"
            elapsed = call("PATCH", url)
            if elapsed is not None:
                states[index] = "pong" if states[index] == "ping" else "ping"
            return elapsed

        for number in range(WARMUP):
            call("GET", "/health")
            patch(number)
        patched = 0
        for number in range(HEALTH_CALLS):
            elapsed = call("GET", "/health")
            if elapsed is not None:
                topology.health.append(elapsed)
            # Spreads PATCH_CALLS patches evenly among the HEALTH_CALLS health calls.
            if (number * PATCH_CALLS) % HEALTH_CALLS < PATCH_CALLS:
                elapsed = patch(patched)
                patched += 1
                if elapsed is not None:
                    topology.patch.append(elapsed)


def concurrent(
    topology: Topology, token: str, clients: multiprocessing.pool.Pool
) -> tuple[float, float]:
    """LOAD_CLIENTS client processes on `/health`, then on sync transitions: the two rates."""
    base_url = topology.server.base_url
    _, health_failed, _, health_rate = _load(base_url, token, PATH, transitions=False, pool=clients)
    _, patch_failed, _, patch_rate = _load(base_url, token, PATH, transitions=True, pool=clients)
    topology.health_rates.append(health_rate)
    topology.patch_rates.append(patch_rate)
    topology.load_failed += health_failed + patch_failed
    return health_rate, patch_rate


# --- reporting ----------------------------------------------------------------------------------


def _ratio(value: float, baseline: float) -> str:
    return f"{value / baseline:.2f}x" if baseline else "-"


def report(results: list[Topology], load: tuple[float, float]) -> None:
    """The side-by-side table, the ratios against gunicorn, and the summary rows."""
    gunicorn = results[-1]
    print(
        f"\nserving topologies, {PASSES} passes (order reversed each pass); sequential: "
        f"{PASSES * HEALTH_CALLS} GET /health + {PASSES * PATCH_CALLS} sync PATCH on one "
        f"keep-alive connection; load: {LOAD_CLIENTS} client processes x {LOAD_SECONDS:g} s "
        "per pass (transitions on disjoint instances)"
    )
    print(
        f"{'topology':<40} {'health p50':>10} {'p99':>6} {'PATCH p50':>9} {'p99':>6} "
        f"{'/health':>7} {'health/s':>8} {'trans/s':>7} {'/health':>7} {'failed':>6} {'5xx':>4}"
    )
    for item in results:
        print(
            f"{item.label:<40} {item.ms('health', 0.5):>10.2f} {item.ms('health', 0.99):>6.2f} "
            f"{item.ms('patch', 0.5):>9.2f} {item.ms('patch', 0.99):>6.2f} "
            f"{_ratio(item.ms('patch', 0.5), item.ms('health', 0.5)):>7} "
            f"{item.health_rate:>8.0f} {item.patch_rate:>7.0f} "
            f"{_ratio(item.patch_rate, item.health_rate):>7} {item.failed:>6} "
            f"{item.server_errors:>4}"
        )
    print(
        "  ms; PATCH p50 /health = PATCH p50 over health p50 of the same server; trans/s /health "
        "= trans/s over health/s of the same server"
    )
    print(f"\nratios against {gunicorn.label}")
    print(
        f"{'topology':<40} {'health p50':>10} {'health p99':>10} {'PATCH p50':>9} "
        f"{'PATCH p99':>9} {'health/s':>8} {'trans/s':>7}"
    )
    for item in results:
        print(
            f"{item.label:<40} "
            f"{_ratio(item.ms('health', 0.5), gunicorn.ms('health', 0.5)):>10} "
            f"{_ratio(item.ms('health', 0.99), gunicorn.ms('health', 0.99)):>10} "
            f"{_ratio(item.ms('patch', 0.5), gunicorn.ms('patch', 0.5)):>9} "
            f"{_ratio(item.ms('patch', 0.99), gunicorn.ms('patch', 0.99)):>9} "
            f"{_ratio(item.health_rate, gunicorn.health_rate):>8} "
            f"{_ratio(item.patch_rate, gunicorn.patch_rate):>7}"
        )
    print("  latency ratios < 1 and rate ratios > 1 are better than gunicorn")
    for item in results:
        rates = ", ".join(
            f"{health:.0f}/{patch:.0f}"
            for health, patch in zip(item.health_rates, item.patch_rates, strict=True)
        )
        print(
            f"  {item.short}: up in {item.startup:.1f}s, health/s / trans/s per pass {rates}, "
            f"exit status {item.exit_code}"
        )
        for failure in item.failures[:3]:
            print(f"    failure: {failure}")
    cpus = os.cpu_count() or 1
    print(f"  load average (1 min) {load[0]:.2f} before, {load[1]:.2f} after, {cpus} CPUs")
    for item in results:
        own = item is gunicorn
        record(
            f"serve {item.short} PATCH p50",
            item.ms("patch", 0.5),
            "ms",
            baseline="GET /health p50, same server" if own else "gunicorn gthread PATCH p50",
            baseline_value=item.ms("health", 0.5) if own else gunicorn.ms("patch", 0.5),
        )
        record(
            f"serve {item.short} trans/s x{LOAD_CLIENTS}",
            item.patch_rate,
            "/s",
            baseline="GET /health/s, same server" if own else "gunicorn gthread trans/s",
            baseline_value=item.health_rate if own else gunicorn.patch_rate,
        )
        record(
            f"serve {item.short} /health/s x{LOAD_CLIENTS}",
            item.health_rate,
            "/s",
            baseline="" if own else "gunicorn gthread /health/s",
            baseline_value=None if own else gunicorn.health_rate,
        )
        record(
            f"serve {item.short} failed requests",
            item.failed,
            "",
            target="0 failed",
            met=item.failed == 0,
        )


def main() -> None:
    """Start the three servers, measure them in interleaved passes, print and record."""
    from rest_framework.authtoken.models import Token

    logging.getLogger("httpx").setLevel(logging.WARNING)
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(label: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[label] = timings.get(label, 0.0) + now - clock
        clock = now

    print(f"database {settings.DATABASES['default']['NAME']} (PostgreSQL, own bench database)")
    prepare_database()
    results = topologies()
    # Spawned once for every load run: spawning 8 clients takes seconds on a busy machine.
    clients = multiprocessing.get_context("spawn").Pool(LOAD_CLIENTS)
    try:
        # The non-vnext_run servers neither migrate nor create the operator: do it once here.
        results[0].server.prepare()
        token = Token.objects.get(user__username=results[0].server.username).key
        lap("setup")
        for item in results:
            item.server.start()
            lap(f"start {item.short}")
            item.startup = timings[f"start {item.short}"]
        load_before = os.getloadavg()[0]
        for number in range(PASSES):
            order = results if number % 2 == 0 else results[::-1]
            for item in order:
                sequential(item, token)
                lap("sequential")
                health_rate, patch_rate = concurrent(item, token, clients)
                lap("load")
                print(
                    f"  pass {number + 1}: {item.short:<20} health/s {health_rate:>6.0f}  "
                    f"trans/s {patch_rate:>5.0f}  failed so far {item.failed}"
                )
        load = (load_before, os.getloadavg()[0])
    finally:
        clients.close()
        clients.join()
        for item in results:
            item.exit_code = item.server.stop()
        lap("stop")
    report(results, load)
    spent = ", ".join(f"{label} {seconds:.1f}s" for label, seconds in timings.items())
    print(f"\nserving suite: {sum(timings.values()):.0f}s ({spent})")
