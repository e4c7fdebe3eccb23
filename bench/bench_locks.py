"""Resource locks: acquire + release round trip in-process, and what the lock step adds to a
transition, each beside a same-run baseline."""

from __future__ import annotations

import time
import uuid

import psycopg
from django.db import connection

from bench.bench_transitions import INFO, prepare_database, start_instance
from bench.database import libpq_url
from bench.summary import record
from bench.transition_workflows import DOMAIN
from instances.services import instance_transition
from locks.store import OrmLocks
from workflows.services import component_publish

ROUNDS = 1000
TRANSITIONS = 600


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _url() -> str:
    settings = connection.settings_dict
    return libpq_url(
        f"postgresql://{settings['USER']}@{settings['HOST']}:{settings['PORT']}/{settings['NAME']}"
    )


def round_trip() -> None:
    """Acquire then release one key, ROUNDS times."""
    locks = OrmLocks()
    owner = uuid.uuid4()
    times = []
    for n in range(ROUNDS):
        started = time.perf_counter()
        assert locks.acquire(f"bench:{n % 10}", owner, "bench", 60)
        locks.release(f"bench:{n % 10}", owner)
        times.append((time.perf_counter() - started) * 1000)
    with psycopg.connect(_url(), autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_raw_lock")
        conn.execute("CREATE TABLE bench_raw_lock (key text PRIMARY KEY, owner uuid)")
        floor = []
        for n in range(ROUNDS):
            started = time.perf_counter()
            conn.execute(
                "INSERT INTO bench_raw_lock VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (f"bench:{n % 10}", owner),
            )
            conn.execute("DELETE FROM bench_raw_lock WHERE key = %s", (f"bench:{n % 10}",))
            floor.append((time.perf_counter() - started) * 1000)
    print(f"acquire + release round trip ({ROUNDS} rounds)")
    print(
        f"  OrmLocks      p50 {_percentile(times, 0.5):6.2f} ms  "
        f"p99 {_percentile(times, 0.99):6.2f} ms"
    )
    print(
        f"  raw SQL floor p50 {_percentile(floor, 0.5):6.2f} ms  p99 "
        f"{_percentile(floor, 0.99):6.2f} ms   ratio p50 "
        f"{_percentile(times, 0.5) / _percentile(floor, 0.5):.1f}x"
    )
    record(
        "lock acquire + release p50",
        _percentile(times, 0.5),
        "ms",
        baseline="raw SQL floor p50",
        baseline_value=_percentile(floor, 0.5),
        target="<= 2x floor",
        met=_percentile(times, 0.5) <= 2 * _percentile(floor, 0.5),
    )


def _locking_workflow() -> dict:
    from bench.transition_workflows import workflow_document

    document = workflow_document(with_task=False)
    document["key"] = "bench-locked"
    key_script = {
        "location": "./src/BenchLockKey.py",
        "code": 'def handler(context):\n    return f"bench-lock:{context.instance.id}"\n',
        "encoding": "NAT",
    }
    states = document["attributes"]["states"]
    states[0]["transitions"][0]["resourceLock"] = {
        "keyExpression": key_script,
        "action": "Acquire",
        "ttlSeconds": 60,
    }
    states[1]["transitions"][0]["resourceLock"] = {
        "keyExpression": dict(key_script),
        "action": "Release",
    }
    return document


def step_overhead() -> None:
    """Ping-pong with Acquire on one leg and Release on the other, against plain ping-pong."""
    component_publish(document=_locking_workflow(), published_by="bench")

    def per_transition(workflow: str) -> float:
        instance_id = start_instance(workflow)
        keys = ["to-pong", "to-ping"]
        started = time.perf_counter()
        for n in range(TRANSITIONS):
            instance_transition(
                domain=DOMAIN,
                workflow=workflow,
                ref=instance_id,
                transition_key=keys[n % 2],
                body={},
                info=INFO,
            )
        return (time.perf_counter() - started) / TRANSITIONS * 1000

    plain, locked = [], []
    for _ in range(3):  # interleaved rounds: the machine is noisy
        plain.append(per_transition("bench-ping-pong"))
        locked.append(per_transition("bench-locked"))
    best_plain, best_locked = min(plain), min(locked)
    print(f"lock step in a transition ({TRANSITIONS} transitions x 3 rounds, best round)")
    print(f"  plain transition        {best_plain:6.2f} ms")
    print(
        f"  with Acquire/Release    {best_locked:6.2f} ms   "
        f"added {best_locked - best_plain:+.2f} ms"
    )


def main() -> None:
    """Run the lock benchmarks on the bench database."""
    prepare_database()
    round_trip()
    step_overhead()
