"""Manual transition cost: the engine in-process and over HTTP, 200 racing callers, and what
running scripts in worker processes adds to a transition.

Runs against its own database (`vnext_bench`, see `bench/database.py`); every figure is printed
beside a baseline measured in the same run, as a ratio, because the machine is shared and noisy.

(a) In-process throughput: ping-pong `instance_transition` on a few instances, no-task and
    script-task variants, against a django-fsm-2 style baseline (SELECT, optimistic UPDATE, history
    INSERT in `transaction.atomic()` through Django's connection) and a raw SQL floor (psycopg,
    autocommit, one CAS UPDATE per transition). Rounds are interleaved so drift hits all alike.
(b) HTTP: the real server (`manage.py vnext_run`) in a subprocess; sequential `PATCH ?sync=true`
    ping-pong on one persistent httpx client, beside `GET /health` on the same server. The 500
    calls use `Authorization: Token` (the operator's token): Basic auth runs Django's PBKDF2 hash
    (1,000,000 iterations) on every request, ~0.6 s here, so it gets a 5-call sample only.
(c) Races: 200 calls of the same transition on one Active instance from 32 worker threads; then a
    gated race where all 32 callers have loaded the instance before any UPDATE may commit.
(d) Script isolation: the script-task transition (the mapping's input and output handlers, one
    worker exchange: a `FollowUp`) with the engine on the script worker pool vs the same engine
    running its scripts in this process (`InProcessExecutor`, the "before"), interleaved rounds,
    per-transition timings.
    Target (from the issue): at most 0.5 ms slower per transition than before.

`BENCH_PROFILE=1` adds a cProfile of 500 no-task transitions (top 15 by cumulative time).
"""

from __future__ import annotations

import cProfile
import logging
import multiprocessing
import multiprocessing.pool
import os
import pstats
import queue
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any
from unittest import mock

import httpx
import psycopg
from django.conf import settings
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from bench.database import bench_database_url, libpq_url
from bench.http_load import Burst, burst, drive
from bench.in_process import InProcessExecutor
from bench.server import BenchServer
from bench.summary import record
from bench.timing import percentile
from bench.transition_workflows import DOMAIN, NO_TASK, WITH_TASK, documents
from instances import services
from instances.engine.errors import Codes, VNextError
from instances.engine.pipeline import Engine
from instances.engine.script_pool import ScriptCall, ScriptReply, script_pool
from instances.engine.script_runner import ScriptExecutor
from instances.models import Incident, Instance, InstanceTransition
from instances.services import RequestInfo, instance_start, instance_transition
from workflows.models import Component
from workflows.services import component_publish

ROUNDS = 4
PER_ROUND = 500  # ROUNDS * PER_ROUND = 2000 transitions per contender
WARMUP = 50
INSTANCES = 4
HTTP_CALLS = 500
HEALTH_EVERY = 2  # one GET /health after every 2nd PATCH: 250 floor samples, interleaved
BASIC_AUTH_SAMPLE = 5
RACE_CALLS = 200
RACE_WORKERS = 32
GATE_TIMEOUT = 15.0
PROFILE_CALLS = 500
ISOLATION_ROUNDS = 10
ISOLATION_PER_ROUND = 200  # 2,000 timed script-task transitions per executor
# Worker exchanges per transition: the mapping's input_handler, with its output_handler as the
# follow-up in the same exchange (a script task has no I/O between them).
ISOLATION_SCRIPT_CALLS = 1
ISOLATION_TARGET_MS = 0.5
BUSY_LOAD_PER_CPU = 0.75  # above this 1-minute load average per CPU, say the figures are noisy

INFO = RequestInfo(actor="bench")
BUSY = Codes.INSTANCE_BUSY.code
NOT_AVAILABLE = Codes.TRANSITION_NOT_AVAILABLE.code
NEXT_KEY = {"ping": "to-pong", "pong": "to-ping"}


# --- setup --------------------------------------------------------------------------------------


def prepare_database() -> None:
    """Migrate the bench database, empty its instances, create the baseline tables, publish."""
    name = str(settings.DATABASES["default"]["NAME"])
    if connection.vendor != "postgresql" or name == "vnext_test":
        raise SystemExit(f"the transitions suite needs its own PostgreSQL database, not {name!r}")
    call_command("migrate", interactive=False, verbosity=0)
    with connection.cursor() as cursor:
        # Our own database: start every run from the same table sizes.
        cursor.execute(f"TRUNCATE {Instance._meta.db_table} CASCADE")
        cursor.execute("DROP TABLE IF EXISTS bench_fsm_order, bench_fsm_history, bench_raw_cas")
        cursor.execute(
            "CREATE TABLE bench_fsm_order (id serial PRIMARY KEY, "
            "state text NOT NULL, version integer NOT NULL DEFAULT 0)"
        )
        cursor.execute(
            "CREATE TABLE bench_fsm_history (id bigserial PRIMARY KEY, "
            "order_id integer NOT NULL, from_state text NOT NULL, to_state text NOT NULL, "
            "actor text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"
        )
        cursor.execute(
            "CREATE TABLE bench_raw_cas (id integer PRIMARY KEY, status char(1) NOT NULL)"
        )
        cursor.execute("DROP TABLE IF EXISTS bench_fsmlib_history, bench_fsmlib_order")
    from bench.fsm_library.models import FsmOrder, FsmOrderHistory

    with connection.schema_editor() as editor:
        editor.create_model(FsmOrder)
        editor.create_model(FsmOrderHistory)
    # Republished every run (our database, our domain): proves the documents still publish.
    Component.objects.filter(domain=DOMAIN).delete()
    for document in documents():
        result = component_publish(document=document, published_by="bench")
        if result.status != "published":
            raise RuntimeError(f"{result.ref}: {result.status}")


def start_instance(workflow: str) -> str:
    """A new instance of a bench workflow (Active, in `ping`); its id."""
    outcome = instance_start(domain=DOMAIN, workflow=workflow, body={"attributes": {}}, info=INFO)
    instance = outcome.instance
    if instance.status != "A" or instance.current_state != "ping":
        raise RuntimeError(f"{workflow} started as {instance.status}/{instance.current_state}")
    return str(instance.id)


# --- (a) drivers: each `transition()` runs one transition ---------------------------------------


class EngineDriver:
    """Ping-pong through `instance_transition`, round-robin over a few instances."""

    def __init__(self, name: str, workflow: str) -> None:
        self.name = name
        self.workflow = workflow
        self.refs = [start_instance(workflow) for _ in range(INSTANCES)]
        self.states = ["ping"] * INSTANCES
        self.turn = 0

    def transition(self) -> None:
        """One manual transition on the next instance."""
        index = self.turn % INSTANCES
        self.turn += 1
        outcome = instance_transition(
            domain=DOMAIN,
            workflow=self.workflow,
            ref=self.refs[index],
            transition_key=NEXT_KEY[self.states[index]],
            body={},
            info=INFO,
        )
        state = outcome.instance.current_state
        if outcome.instance.status != "A" or state == self.states[index]:
            raise RuntimeError(f"{self.name}: ended {outcome.instance.status}/{state}")
        self.states[index] = state


class FsmDriver:
    """django-fsm-2 style, through Django's connection: in `transaction.atomic()`, SELECT the
    row, `UPDATE ... WHERE id AND state` (optimistic check), INSERT one history row."""

    name = "django-fsm-2 style (Django conn, atomic)"

    def __init__(self) -> None:
        with connection.cursor() as cursor:
            self.ids = []
            for _ in range(INSTANCES):
                cursor.execute("INSERT INTO bench_fsm_order (state) VALUES ('ping') RETURNING id")
                self.ids.append(cursor.fetchone()[0])
        self.turn = 0

    def transition(self) -> None:
        """One guarded state change with its history row."""
        order_id = self.ids[self.turn % INSTANCES]
        self.turn += 1
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, state, version FROM bench_fsm_order WHERE id = %s", [order_id]
            )
            _, state, _ = cursor.fetchone()
            target = "pong" if state == "ping" else "ping"
            cursor.execute(
                "UPDATE bench_fsm_order SET state = %s, version = version + 1 "
                "WHERE id = %s AND state = %s",
                [target, order_id, state],
            )
            if cursor.rowcount != 1:
                raise RuntimeError("fsm baseline: concurrent change")
            cursor.execute(
                "INSERT INTO bench_fsm_history (order_id, from_state, to_state, actor) "
                "VALUES (%s, %s, %s, %s)",
                [order_id, state, target, "bench"],
            )


class FsmLibraryDriver:
    """The real django-fsm-2 library, used as its documentation shows: load the model, call
    the `@transition` method, `save()` (ConcurrentTransitionMixin: the UPDATE checks the state
    it was loaded in), create the history row; in `transaction.atomic()`."""

    name = "django-fsm-2 library (ORM, atomic)"

    def __init__(self) -> None:
        from bench.fsm_library.models import FsmOrder, FsmOrderHistory

        # Any: the type checker's Django settings do not install this bench-only app.
        self.model: Any = FsmOrder
        self.history: Any = FsmOrderHistory
        self.ids = [FsmOrder.objects.create().pk for _ in range(INSTANCES)]
        self.turn = 0

    def transition(self) -> None:
        """One transition through the library, with its history row."""
        order_id = self.ids[self.turn % INSTANCES]
        self.turn += 1
        with transaction.atomic():
            order = self.model.objects.get(pk=order_id)
            source = order.state
            if source == "ping":
                order.to_pong()
            else:
                order.to_ping()
            order.save()
            self.history.objects.create(
                order=order, from_state=source, to_state=order.state, actor="bench"
            )


class RawDriver:
    """The floor: psycopg (not Django), autocommit, one CAS UPDATE per transition:
    `status='A' -> 'B'` then `'B' -> 'A'`."""

    name = "raw SQL floor (psycopg CAS, autocommit)"

    def __init__(self) -> None:
        self.conn = psycopg.connect(libpq_url(bench_database_url()), autocommit=True)
        for row_id in range(1, INSTANCES + 1):
            self.conn.execute("INSERT INTO bench_raw_cas VALUES (%s, 'A')", (row_id,))
        self.states = ["A"] * INSTANCES
        self.turn = 0

    def transition(self) -> None:
        """One compare-and-set."""
        index = self.turn % INSTANCES
        self.turn += 1
        source = self.states[index]
        target = "B" if source == "A" else "A"
        cursor = self.conn.execute(
            "UPDATE bench_raw_cas SET status = %s WHERE id = %s AND status = %s",
            (target, index + 1, source),
        )
        if cursor.rowcount != 1:
            raise RuntimeError("raw baseline: CAS failed")
        self.states[index] = target

    def close(self) -> None:
        """Close the psycopg connection."""
        self.conn.close()


@dataclass
class Throughput:
    """Seconds per round of PER_ROUND transitions; time and count of Django `cursor.execute`s."""

    name: str
    rounds: list[float] = field(default_factory=list)
    execute_seconds: float = 0.0
    statements: int = 0

    def __call__(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        """A Django execute wrapper: times the statement (COMMIT is not a cursor.execute)."""
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.execute_seconds += time.perf_counter() - started
            self.statements += 1

    @property
    def count(self) -> int:
        """Transitions measured."""
        return PER_ROUND * len(self.rounds)

    @property
    def rate(self) -> float:
        """Transitions per second over every round."""
        return self.count / sum(self.rounds)

    @property
    def mean_ms(self) -> float:
        """Mean milliseconds per transition."""
        return 1000 * sum(self.rounds) / self.count


def throughput() -> dict[str, Throughput]:
    """(a): interleaved rounds of every driver; figures keyed by driver name."""
    raw = RawDriver()
    drivers: list[Any] = [
        raw,
        FsmDriver(),
        FsmLibraryDriver(),
        EngineDriver("engine, no task (instance_transition)", NO_TASK),
        EngineDriver("engine, script task (1 worker exchange)", WITH_TASK),
    ]
    try:
        for driver in drivers:
            for _ in range(WARMUP):
                driver.transition()
        results = {driver.name: Throughput(driver.name) for driver in drivers}
        for round_number in range(ROUNDS):
            shift = round_number % len(drivers)
            for driver in drivers[shift:] + drivers[:shift]:
                result = results[driver.name]
                with connection.execute_wrapper(result):
                    started = time.perf_counter()
                    for _ in range(PER_ROUND):
                        driver.transition()
                    result.rounds.append(time.perf_counter() - started)
    finally:
        raw.close()
    return results


def print_throughput(results: dict[str, Throughput]) -> None:
    """The (a) table; ratios against the fsm baseline."""
    fsm = results[FsmDriver.name]
    print(
        f"\n(a) in-process manual transitions, {ROUNDS} interleaved rounds x {PER_ROUND}, "
        f"{INSTANCES} instances each"
    )
    print(
        f"{'contender':<42} {'N':>5} {'trans/s':>8} {'ms/trans':>8} {'round min..max /s':>17}"
        f" {'vs fsm':>7} {'stmts':>5} {'ms exec':>7} {'ms rest':>7}"
    )
    for item in results.values():
        rates = [PER_ROUND / seconds for seconds in item.rounds]
        spread = f"{min(rates):.0f}..{max(rates):.0f}"
        if item.statements:
            exec_ms = 1000 * item.execute_seconds / item.count
            rest_ms = item.mean_ms - exec_ms
            split = f"{item.statements / item.count:>5.1f} {exec_ms:>7.2f} {rest_ms:>7.2f}"
        else:
            split = f"{'1':>5} {'-':>7} {'-':>7}"
        print(
            f"{item.name:<42} {item.count:>5} {item.rate:>8.0f} {item.mean_ms:>8.2f} "
            f"{spread:>17} {item.rate / fsm.rate:>6.2f}x {split}"
        )
    print(
        "  stmts = Django cursor.execute calls per transition; ms exec = time inside them;"
        " ms rest = Python + COMMIT"
    )
    targets = {"engine, no task": 1.2, "engine, script task": 0.8}
    for item in results.values():
        if item.name.startswith("engine"):
            print(
                f"  engine/fsm  {item.name}: throughput ratio {item.rate / fsm.rate:.2f} "
                f"(each transition {item.mean_ms / fsm.mean_ms:.1f}x the fsm baseline's time)"
            )
            wanted = next(v for k, v in targets.items() if item.name.startswith(k))
            library = results[FsmLibraryDriver.name]
            print(
                f"  engine/django-fsm-2 library  {item.name}: throughput ratio "
                f"{item.rate / library.rate:.2f}"
            )
            record(
                f"in-process {item.name.removeprefix('engine, ').split(' (')[0]} vs library",
                item.rate,
                "/s",
                baseline="django-fsm-2 library (ORM, atomic)",
                baseline_value=library.rate,
            )
            record(
                f"in-process {item.name.removeprefix('engine, ').split(' (')[0]} trans/s",
                item.rate,
                "/s",
                baseline="django-fsm-2 style (Django, atomic)",
                baseline_value=fsm.rate,
                target=f">= {wanted}x",
                met=item.rate / fsm.rate >= wanted,
            )


# --- statements on the hot path -----------------------------------------------------------------


def _brief(sql: str) -> str:
    sql = " ".join(sql.split())
    verb = sql.split(" ", 1)[0].upper()
    table = re.search(r'(?:FROM|INTO|UPDATE)\s+"?(\w+)"?', sql, re.IGNORECASE)
    marks = [
        mark
        for mark in ("WHERE", "ON CONFLICT", "RETURNING", "ORDER BY", "LIMIT")
        if mark in sql.upper()
    ]
    where = re.search(r"WHERE (.*?)(?: RETURNING| ORDER BY| LIMIT|$)", sql, re.IGNORECASE)
    guard = f"  [where {where.group(1)[:70]}]" if where and verb == "UPDATE" else ""
    return f"{verb} {table.group(1) if table else ''} {' / '.join(marks)}{guard}".strip()


def print_statements() -> None:
    """How many SQL statements one transition runs (caches warm), and which (both variants)."""
    for label, workflow in (("no task", NO_TASK), ("script task", WITH_TASK)):
        ref = start_instance(workflow)
        for key in ("to-pong", "to-ping"):  # the first one warms the caches
            with CaptureQueriesContext(connection) as captured:
                instance_transition(
                    domain=DOMAIN,
                    workflow=workflow,
                    ref=ref,
                    transition_key=key,
                    body={},
                    info=INFO,
                )
        statements = [query["sql"] for query in captured.captured_queries]
        real = [s for s in statements if s.strip().upper() not in ("BEGIN", "COMMIT")]
        print(
            f"\nSQL statements in one {label} transition: {len(statements)} "
            f"({len(real)} without BEGIN/COMMIT, "
            f"{sum(1 for s in statements if s.strip().upper() == 'COMMIT')} transaction(s))"
        )
        for number, sql in enumerate(statements, 1):
            print(f"  {number:>2}. {_brief(sql)}")


# --- (b) HTTP -----------------------------------------------------------------------------------


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def _ms(values: list[float]) -> str:
    return f"{1000 * _percentile(values, 0.5):>8.2f} {1000 * _percentile(values, 0.99):>8.2f}"


def _sessions() -> int:
    """Sessions ever opened on the bench database (PostgreSQL 14+)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


LOAD_CLIENTS = 8
LOAD_SECONDS = 5.0


RACE_CALLS = 200


def _print_race(health_burst: Burst, patch_burst: Burst, final: dict[str, Any]) -> None:
    """(b3): the same transition on one instance, `RACE_CALLS` requests at once, beside as many
    `GET /health` at once: one winner, the rest 409 (or 400 once the winner moved it), no 5xx."""
    statuses = Counter(patch_burst.statuses)
    won = statuses.get(200, 0)
    server_errors = sum(count for status, count in statuses.items() if status >= 500)
    # Losers: 409 (lost the compare-and-set or found it Busy), 400 (read it after the winner
    # moved it to pong, where to-pong is not available).
    losers = patch_burst.latencies.get(409, []) + patch_burst.latencies.get(400, [])
    health = [value for values in health_burst.latencies.values() for value in values]
    print(
        f"\n(b3) {RACE_CALLS} sync PATCH to-pong on one instance at once, beside {RACE_CALLS} "
        "GET /health at once"
    )
    print(
        f"  statuses {dict(sorted(statuses.items()))}; final {final['currentState']}/"
        f"{final['status']}"
    )
    print(f"  losers p50/p99 ms {_ms(losers or [0.0])};  /health p50/p99 ms {_ms(health)}")
    loser_p50 = 1000 * _percentile(losers or [0.0], 0.5)
    health_p50 = 1000 * _percentile(health, 0.5)
    fair = won == 1 and server_errors == 0 and final["currentState"] == "pong"
    record(
        f"HTTP race of {RACE_CALLS}: losers' p50",
        loser_p50,
        "ms",
        baseline=f"GET /health p50, {RACE_CALLS} at once",
        baseline_value=health_p50,
        target="1 winner, 0 5xx, <= 1.5x",
        met=fair and loser_p50 <= 1.5 * health_p50,
    )


def _record_http(
    patch_times: list[float],
    health_times: list[float],
    concurrent: dict[str, tuple[int, int, list[float], float]],
) -> None:
    """The issue-11 targets of (b) and (b2), for the closing table."""
    health_p50 = 1000 * _percentile(health_times, 0.5)
    for label, fraction, limit in (("p50", 0.5, 5.0), ("p99", 0.99, 20.0)):
        value = 1000 * _percentile(patch_times, fraction)
        record(
            f"HTTP sync transition {label}",
            value,
            "ms",
            baseline="GET /health p50, same server",
            baseline_value=health_p50,
            target=f"<= {limit:g} ms",
            met=value <= limit,
        )
    _, patch_failed, _, patch_rate = concurrent["PATCH"]
    _, health_failed, _, health_rate = concurrent["health"]
    record(
        f"HTTP transitions/s, {LOAD_CLIENTS} clients",
        patch_rate,
        "/s",
        baseline=f"GET /health/s, {LOAD_CLIENTS} clients",
        baseline_value=health_rate,
        target=">= 600/s, 0 failed",
        met=patch_rate >= 600 and patch_failed == 0,
    )
    record(
        f"HTTP GET /health/s, {LOAD_CLIENTS} clients",
        health_rate,
        "/s",
        target=">= 1500/s",
        met=health_rate >= 1500 and health_failed == 0,
    )


def _load(
    base_url: str,
    token: str,
    path: str,
    *,
    transitions: bool,
    pool: multiprocessing.pool.Pool | None = None,
) -> tuple[int, int, list[float], float]:
    """(b2): `LOAD_CLIENTS` spawned client processes at once: completed, failed, latencies,
    and completed requests per second over the wall-clock time. `pool`: `LOAD_CLIENTS` client
    processes spawned already, reused (spawning them takes seconds on a busy machine)."""
    arguments = [(base_url, token, path, LOAD_SECONDS, transitions)] * LOAD_CLIENTS
    if pool is not None:
        outcomes = pool.starmap(drive, arguments)
    else:
        with multiprocessing.get_context("spawn").Pool(LOAD_CLIENTS) as clients:
            outcomes = clients.starmap(drive, arguments)
    done = sum(outcome.completed for outcome in outcomes)
    failed = sum(len(outcome.failures) for outcome in outcomes)
    latencies = [value for outcome in outcomes for value in outcome.latencies]
    for outcome in outcomes:
        for failure in outcome.failures[:3]:
            print(f"  load failure: {failure}")
    # Each client runs for LOAD_SECONDS once it is up (spawning them is not counted).
    return done, failed, latencies or [0.0], done / LOAD_SECONDS


def http(results: dict[str, Throughput]) -> None:
    """(b): the real server; sequential sync PATCH ping-pong beside GET /health."""
    from rest_framework.authtoken.models import Token

    server = BenchServer(bench_database_url())
    exit_code: int | None = None
    sessions = 0
    try:
        started = time.perf_counter()
        server.start()
        startup = time.perf_counter() - started
        token = Token.objects.get(user__username=server.username).key
        base = f"/api/v1/{DOMAIN}/workflows/{NO_TASK}/instances"
        patch_times: list[float] = []
        health_times: list[float] = []
        basic_times: list[float] = []
        headers = {"Authorization": f"Token {token}"}
        with httpx.Client(base_url=server.base_url, headers=headers, timeout=30.0) as client:
            refs, states = [], []
            for _ in range(INSTANCES):
                answer = client.post(f"{base}/start?sync=true", json={"attributes": {}})
                answer.raise_for_status()
                refs.append(answer.json()["id"])
                states.append("ping")

            def patch(index: int, auth: httpx.Auth | None = None) -> float:
                url = f"{base}/{refs[index]}/transitions/{NEXT_KEY[states[index]]}?sync=true"
                began = time.perf_counter()
                if auth is None:
                    answer = client.patch(url, json={})
                else:
                    answer = client.request("PATCH", url, json={}, auth=auth)
                elapsed = time.perf_counter() - began
                if answer.status_code != 200:
                    raise RuntimeError(f"PATCH {url}: {answer.status_code} {answer.text[:300]}")
                states[index] = "pong" if states[index] == "ping" else "ping"
                return elapsed

            def health() -> float:
                began = time.perf_counter()
                answer = client.get("/health")
                elapsed = time.perf_counter() - began
                answer.raise_for_status()
                return elapsed

            for number in range(10):  # warm-up: first requests import and connect
                patch(number % INSTANCES)
                health()
            sessions_before = _sessions()
            for number in range(HTTP_CALLS):
                patch_times.append(patch(number % INSTANCES))
                if number % HEALTH_EVERY == 0:
                    health_times.append(health())
            time.sleep(0.5)  # the last request's backend reports its session when it exits
            sessions = _sessions() - sessions_before
            concurrent = {
                "PATCH": _load(server.base_url, token, base, transitions=True),
                "health": _load(server.base_url, token, base, transitions=False),
            }
            race = client.post(f"{base}/start?sync=true", json={"attributes": {}})
            race.raise_for_status()
            racing = f"{base}/{race.json()['id']}/transitions/to-pong?sync=true"
            health_burst = burst(server.base_url, token, [("GET", "/health")] * RACE_CALLS)
            patch_burst = burst(server.base_url, token, [("PATCH", racing)] * RACE_CALLS)
            final = client.get(f"{base}/{race.json()['id']}").json()["metadata"]
            # Basic auth hashes the password on every request (PBKDF2): a small sample only.
            basic = httpx.BasicAuth(server.username, server.password)
            client.headers.pop("Authorization")
            for number in range(BASIC_AUTH_SAMPLE):
                basic_times.append(patch(number % INSTANCES, auth=basic))
    finally:
        exit_code = server.stop()

    in_process = results["engine, no task (instance_transition)"]
    _record_http(patch_times, health_times, concurrent)
    _print_race(health_burst, patch_burst, final)
    print(
        f"\n(b2) {LOAD_CLIENTS} client processes for {LOAD_SECONDS:g} s each, same server "
        f"({server.workers} worker process(es)); transitions on disjoint instances"
    )
    print(f"{'load':<44} {'done':>6} {'failed':>6} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>7}")
    for label, (done, failed, latencies, rate) in concurrent.items():
        name = "PATCH transition ?sync=true" if label == "PATCH" else "GET /health"
        print(f"{name:<44} {done:>6} {failed:>6} {_ms(latencies)} {rate:>7.0f}")
    patch_p50 = _percentile(patch_times, 0.5)
    health_p50 = _percentile(health_times, 0.5)
    print(
        f"\n(b) HTTP, real server (vnext_run, uvicorn) on 127.0.0.1:{server.port}, "
        f"up in {startup:.1f}s"
    )
    print(f"{'request':<44} {'N':>5} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>7}")
    rows = [
        ("PATCH transition ?sync=true (Token auth)", patch_times),
        ("GET /health (HTTP stack floor, same server)", health_times),
        ("PATCH transition ?sync=true (Basic auth)", basic_times),
    ]
    for label, values in rows:
        print(f"{label:<44} {len(values):>5} {_ms(values)} {len(values) / sum(values):>7.1f}")
    print(
        f"{'in-process engine, no task (from (a))':<44} {in_process.count:>5} "
        f"{in_process.mean_ms:>8.2f} {'(mean)':>8} {in_process.rate:>7.0f}"
    )
    print(
        f"  PATCH p50 / health p50 = {patch_p50 / health_p50:.1f}x;  "
        f"PATCH p50 / in-process mean = {1000 * patch_p50 / in_process.mean_ms:.1f}x;  "
        f"HTTP+auth+view overhead ~ {1000 * patch_p50 - in_process.mean_ms:.1f} ms per call"
    )
    print(
        f"  Basic auth p50 / Token auth p50 = "
        f"{_percentile(basic_times, 0.5) / patch_p50:.0f}x (password hash on every request)"
    )
    print(
        f"  PostgreSQL sessions the server opened for those {len(patch_times) + len(health_times)}"
        f" requests: {sessions} (pg_stat_database.sessions)"
    )
    print(f"  server stopped with SIGTERM, exit status {exit_code}")


# --- (c) races ----------------------------------------------------------------------------------


@dataclass
class Race:
    """What one race produced: (outcome, seconds) per call, and the instance afterwards."""

    label: str
    calls: list[tuple[str, float]]
    final: str = ""
    problems: list[str] = field(default_factory=list)

    def count(self, outcome: str) -> int:
        """Calls that ended with `outcome` ("won", an error code, or an exception name)."""
        return sum(1 for kind, _ in self.calls if kind == outcome)

    def seconds(self, outcome: str) -> list[float]:
        """The latencies of the calls that ended with `outcome`."""
        return [elapsed for kind, elapsed in self.calls if kind == outcome]


def _race(workflow: str, calls: int, *, gate: bool) -> Race:
    """`calls` calls of `to-pong` on one new instance from RACE_WORKERS threads released together.

    With `gate`, a separate connection holds the instance row (`FOR UPDATE`) until every worker
    waits on that lock: all of them have loaded the instance and passed admission, so only the
    guarded UPDATEs decide who wins."""
    ref = start_instance(workflow)
    work: queue.SimpleQueue[int] = queue.SimpleQueue()
    for number in range(calls):
        work.put(number)
    workers = min(RACE_WORKERS, calls)
    barrier = threading.Barrier(workers + 1)
    outcomes: list[tuple[str, float]] = []

    def worker() -> None:
        try:
            connection.ensure_connection()
            barrier.wait(timeout=60)
            while True:
                try:
                    work.get_nowait()
                except queue.Empty:
                    return
                began = time.perf_counter()
                try:
                    instance_transition(
                        domain=DOMAIN,
                        workflow=workflow,
                        ref=ref,
                        transition_key="to-pong",
                        body={},
                        info=INFO,
                    )
                    kind = "won"
                except VNextError as exc:
                    kind = exc.code
                except Exception as exc:
                    kind = type(exc).__name__
                outcomes.append((kind, time.perf_counter() - began))
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, name=f"race-{n}") for n in range(workers)]
    holder = watcher = None
    try:
        if gate:
            url = libpq_url(bench_database_url())
            holder = psycopg.connect(url)
            watcher = psycopg.connect(url, autocommit=True)
            holder.execute(
                f"SELECT id FROM {Instance._meta.db_table} WHERE id = %s FOR UPDATE", (ref,)
            )
        for thread in threads:
            thread.start()
        barrier.wait(timeout=60)
        if holder is not None and watcher is not None:
            deadline = time.monotonic() + GATE_TIMEOUT
            waiting = 0
            while time.monotonic() < deadline and waiting < workers:
                waiters = watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND pid <> %s",
                    (holder.info.backend_pid,),
                ).fetchone()
                waiting = int(waiters[0]) if waiters else 0
                time.sleep(0.005)
            holder.rollback()
    finally:
        for thread in threads:
            thread.join(timeout=120)
        for conn in (holder, watcher):
            if conn is not None:
                conn.close()
    race = Race(f"{'gated' if gate else 'open'}", outcomes)
    row = Instance.objects.get(pk=ref)
    busy = "no Busy" if not row.busy_owner and row.busy_since is None else "BUSY LEFT"
    race.final = f"{row.status}/{row.current_state} {busy}"
    if (row.status, row.current_state, row.busy_owner, row.busy_since) != ("A", "pong", "", None):
        race.problems.append(
            f"instance ended {row.status}/{row.current_state} busy_owner={row.busy_owner!r} "
            f"busy_since={row.busy_since}"
        )
    history = InstanceTransition.objects.filter(instance_id=ref).count()
    if history != 2:
        race.problems.append(f"{history} history rows (expected start + 1)")
    if Incident.objects.filter(instance_id=ref).exists():
        race.problems.append("incidents recorded")
    if race.count("won") != 1:
        race.problems.append(f"{race.count('won')} winners")
    if len(outcomes) != calls:
        race.problems.append(f"{len(outcomes)} of {calls} calls returned")
    return race


def races() -> list[Race]:
    """(c): the open race (200 calls) and the gated race (32 calls), for both variants."""
    results = []
    for label, workflow in (("no task", NO_TASK), ("script task", WITH_TASK)):
        for gate, calls in ((False, RACE_CALLS), (True, RACE_WORKERS)):
            race = _race(workflow, calls, gate=gate)
            race.label = f"{label}, {race.label}"
            results.append(race)
    return results


def print_races(results: list[Race]) -> None:
    """The (c) table."""
    print(
        f"\n(c) one Active instance, `to-pong` fired by {RACE_WORKERS} threads released by a "
        f"barrier (open: {RACE_CALLS} calls; gated: every caller loaded before the first commit)"
    )
    print(
        f"{'variant, race':<22} {'calls':>5} {'won':>4} {'409':>4} {'400':>4} {'other':>5} "
        f"{'409 p50 ms':>10} {'409 p99 ms':>10} {'400 p50 ms':>10} {'won ms':>7}  final"
    )
    for race in results:
        others = Counter(kind for kind, _ in race.calls if kind not in ("won", BUSY, NOT_AVAILABLE))
        busy, unavailable, won = (
            race.seconds(BUSY),
            race.seconds(NOT_AVAILABLE),
            race.seconds("won"),
        )
        print(
            f"{race.label:<22} {len(race.calls):>5} {len(won):>4} {len(busy):>4} "
            f"{len(unavailable):>4} {sum(others.values()):>5} "
            f"{_opt_ms(busy, 0.5):>10} {_opt_ms(busy, 0.99):>10} {_opt_ms(unavailable, 0.5):>10} "
            f"{_opt_ms(won, 0.5):>7}  {race.final}, "
            + ("OK" if not race.problems else "PROBLEMS: " + "; ".join(race.problems))
        )
        if others:
            print(f"    other outcomes: {dict(others)}")
    print(
        f"  409 = {BUSY} (lost the compare-and-set, or found the instance Busy); "
        f"400 = {NOT_AVAILABLE} (loaded the instance after the winner committed: it is in pong)"
    )
    print(
        "  latency = one call, from when its worker picked it up; gated latencies include the "
        "time the gate held the row; OK = exactly 1 winner, instance A/pong, no Busy left, "
        "start + 1 history rows, no incident"
    )


def _opt_ms(values: list[float], fraction: float) -> str:
    return f"{1000 * _percentile(values, fraction):.2f}" if values else "-"


# --- (d) script isolation -----------------------------------------------------------------------


class CountingExecutor:
    """Passes script calls on to `inner`, counting them and the nanoseconds they take."""

    def __init__(self, inner: ScriptExecutor) -> None:
        self.inner = inner
        self.samples: list[int] = []

    def run(self, call: ScriptCall) -> ScriptReply:
        """Run `call` on the wrapped executor."""
        started = time.perf_counter_ns()
        try:
            return self.inner.run(call)
        finally:
            self.samples.append(time.perf_counter_ns() - started)

    @property
    def calls(self) -> int:
        """Script calls so far."""
        return len(self.samples)

    @property
    def nanoseconds(self) -> int:
        """Time spent in them."""
        return sum(self.samples)


@dataclass
class Isolation:
    """One executor's engine, its instances and its per-transition nanoseconds."""

    name: str
    engine: Engine
    executor: CountingExecutor
    driver: EngineDriver
    samples: list[int] = field(default_factory=list)

    def run(self, transitions: int, *, keep: bool = True) -> None:
        """`transitions` script-task transitions with `instance_transition` on this engine."""
        clock = time.perf_counter_ns
        with mock.patch.object(services, "engine", self.current_engine):
            for _ in range(transitions):
                started = clock()
                self.driver.transition()
                if keep:
                    self.samples.append(clock() - started)

    def current_engine(self) -> Engine:
        """Stands in for `instances.services.engine` while this contender runs."""
        return self.engine

    def ms(self, fraction: float) -> float:
        """A percentile of the per-transition time, in milliseconds."""
        return percentile(self.samples, fraction) / 1e6

    @property
    def mean_ms(self) -> float:
        """Mean milliseconds per transition."""
        return sum(self.samples) / len(self.samples) / 1e6


def _engine_with(executor: ScriptExecutor) -> Engine:
    # The process-wide engine's store, components, reader and locks; only the executor differs.
    base = services.engine()
    return Engine(
        base.store,
        base.components,
        reader=base.tasks.reader,
        locks=base.locks,
        config=replace(base.config, script_executor=executor),
        clock=base.clock,
    )


def isolation() -> tuple[list[Isolation], tuple[float, float]]:
    """(d): interleaved rounds of the script-task transition on the pool and in-process."""
    contenders = []
    for name, inner in (
        ("worker pool (now)", script_pool()),
        ("in-process (before)", InProcessExecutor()),
    ):
        executor = CountingExecutor(inner)
        driver = EngineDriver(name, WITH_TASK)
        contenders.append(Isolation(name, _engine_with(executor), executor, driver))
    for contender in contenders:
        contender.run(WARMUP, keep=False)
        contender.executor.samples.clear()
    load_before = os.getloadavg()[0]
    for round_number in range(ISOLATION_ROUNDS):
        for contender in contenders if round_number % 2 == 0 else contenders[::-1]:
            contender.run(ISOLATION_PER_ROUND)
    load = (load_before, os.getloadavg()[0])
    for contender in contenders:
        count = len(contender.samples)
        if contender.executor.calls != ISOLATION_SCRIPT_CALLS * count:
            raise RuntimeError(
                f"{contender.name}: {contender.executor.calls} script calls in {count} "
                f"transitions, expected {ISOLATION_SCRIPT_CALLS} each"
            )
    return contenders, load


def print_isolation(run: tuple[list[Isolation], tuple[float, float]]) -> None:
    """The (d) table, the per-transition difference and the target."""
    results, load = run
    pool, before = results
    print(
        f"\n(d) script-task transition (mapping input + output handler in "
        f"{ISOLATION_SCRIPT_CALLS} worker exchange), {ISOLATION_ROUNDS} interleaved rounds "
        f"x {ISOLATION_PER_ROUND}, {INSTANCES} instances each"
    )
    print(
        f"{'scripts run in':<22} {'N':>5} {'p50 ms':>7} {'p99 ms':>7} {'mean ms':>7} "
        f"{'trans/s':>7} {'script ms/trans':>15} {'call p50 us':>11} {'call p99 us':>11}"
    )
    for item in results:
        count = len(item.samples)
        script_ms = item.executor.nanoseconds / count / 1e6
        calls = item.executor.samples
        print(
            f"{item.name:<22} {count:>5} {item.ms(0.5):>7.2f} {item.ms(0.99):>7.2f} "
            f"{item.mean_ms:>7.2f} {1000 / item.mean_ms:>7.0f} {script_ms:>15.3f} "
            f"{percentile(calls, 0.5) / 1e3:>11.1f} {percentile(calls, 0.99) / 1e3:>11.1f}"
        )
    p50_delta = pool.ms(0.5) - before.ms(0.5)
    mean_delta = pool.mean_ms - before.mean_ms
    script_delta = (
        (pool.executor.nanoseconds - before.executor.nanoseconds) / len(pool.samples) / 1e6
    )
    print(
        f"  worker pool - in-process, per transition: p50 {p50_delta:+.3f} ms, "
        f"mean {mean_delta:+.3f} ms, p99 {pool.ms(0.99) - before.ms(0.99):+.3f} ms; "
        f"inside the executor {script_delta:+.3f} ms"
    )
    cpus = os.cpu_count() or 1
    busy = max(load) > BUSY_LOAD_PER_CPU * cpus
    print(
        f"  load average (1 min) {load[0]:.2f} before, {load[1]:.2f} after, {cpus} CPUs"
        + (
            ": the machine was BUSY, figures unreliable (other work delays the worker's "
            "wake-ups, and hides in the p50 when everything queues)"
            if busy
            else ""
        )
    )
    # The larger of the two: under load the p50 hides the pool's cost in the queueing, and a
    # few outliers can inflate the mean.
    delta = max(p50_delta, mean_delta)
    verdict = "target met" if delta <= ISOLATION_TARGET_MS else "target NOT met"
    record(
        "script-task transition, pool p50",
        pool.ms(0.5),
        "ms",
        baseline="scripts in-process p50",
        baseline_value=before.ms(0.5),
        target=f"<= +{ISOLATION_TARGET_MS} ms",
        met=delta <= ISOLATION_TARGET_MS,
    )
    print(
        f"  target: a sync transition with two script handlers at most {ISOLATION_TARGET_MS} ms "
        f"slower than before; difference {delta:+.3f} ms (the larger of p50 and mean): {verdict}"
    )


# --- optional profile ---------------------------------------------------------------------------


def profile() -> None:
    """cProfile of PROFILE_CALLS no-task transitions, top 15 by cumulative time."""
    driver = EngineDriver("profiled", NO_TASK)
    for _ in range(WARMUP):
        driver.transition()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(PROFILE_CALLS):
        driver.transition()
    profiler.disable()
    print(f"\ncProfile of {PROFILE_CALLS} no-task in-process transitions (top 15 by cumtime)")
    pstats.Stats(profiler).strip_dirs().sort_stats("cumulative").print_stats(15)


def _timed(timings: dict[str, float], label: str, action: Callable[[], Any]) -> Any:
    started = time.perf_counter()
    try:
        return action()
    finally:
        timings[label] = time.perf_counter() - started


def main() -> None:
    """Run (a), (b), (c), (d) and print them with their baselines."""
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("vnext.pipeline").setLevel(logging.WARNING)
    timings: dict[str, float] = {}
    print(f"database {settings.DATABASES['default']['NAME']} (PostgreSQL, own bench database)")
    _timed(timings, "setup", prepare_database)
    print_statements()
    results = _timed(timings, "(a)", throughput)
    print_throughput(results)
    _timed(timings, "(b)", lambda: http(results))
    race_results = _timed(timings, "(c)", races)
    print_races(race_results)
    print_isolation(_timed(timings, "(d)", isolation))
    if os.environ.get("BENCH_PROFILE"):
        _timed(timings, "profile", profile)
    spent = ", ".join(f"{label} {seconds:.1f}s" for label, seconds in timings.items())
    print(f"\ntransitions suite: {sum(timings.values()):.0f}s ({spent})")
    failed = [race for race in race_results if race.problems]
    if failed:
        raise SystemExit(f"race checks failed: {[race.label for race in failed]}")
