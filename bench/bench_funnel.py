"""The instance-data write funnel: updateData throughput on ONE instance with 8 concurrent
clients (every write serialised, each reading what the previous one committed) beside 8 clients
on 8 instances (no contention), in the same run, with the mechanisms it was chosen among:

- `lane`: what the API runs (a ticket per update in the instance's write lane, applied in ticket
  order, each flush guarded by the data version it read);
- `cas`: the data-version compare-and-set alone (a conflicting flush derives its mapping again),
  no lane: no acceptance order, and retries under contention;
- `advisory`: a PostgreSQL advisory lock around each whole update (`pg_advisory_xact_lock` in one
  transaction that also runs the mapping);
- `sql floor`: the same read-modify-write as one `UPDATE ... SET data = jsonb_set(...)` per update
  (psycopg, autocommit: PostgreSQL's row lock serialises it), no history, no data version.

Every contender's final count is checked: a lost update fails the run. Rounds interleave the
contenders so machine drift hits them alike.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from django.db import connection, connections, transaction

from bench.bench_transitions import INFO, prepare_database
from bench.database import libpq_url
from bench.summary import record
from bench.timing import percentile
from bench.transition_workflows import DOMAIN
from instances.engine.outcomes import Rejected
from instances.lane_lock import lane_lock_key
from instances.models import Instance
from instances.services import instance_start, instance_transition
from instances.sync_transitions import instance_transition_run
from workflows.services import component_publish

CLIENTS = 8
PER_CLIENT = 60  # updates per client per round
ROUNDS = 3
WORKFLOW = "funnel-tally"
BUMP = (
    "def handler(context):\n    return {'count': (context.instance.data.get('count') or 0) + 1}\n"
)
LABELS = [{"label": "x", "language": "en"}]


def _document() -> dict[str, Any]:
    return {
        "key": WORKFLOW,
        "domain": DOMAIN,
        "version": "1.0.0",
        "flow": "sys-flows",
        "flowVersion": "1.0.0",
        "tags": ["bench"],
        "attributes": {
            "type": "F",
            "labels": LABELS,
            "startTransition": {
                "key": "start",
                "target": "open",
                "triggerType": 0,
                "versionStrategy": "Minor",
                "labels": LABELS,
            },
            "states": [
                {
                    "key": "open",
                    "stateType": 1,
                    "versionStrategy": "None",
                    "labels": LABELS,
                    "transitions": [],
                }
            ],
            "updateData": {
                "key": "update-data",
                "target": "$self",
                "triggerType": 0,
                "versionStrategy": "Patch",
                "labels": LABELS,
                "mapping": {"location": "./src/Bump.py", "code": BUMP, "encoding": "NAT"},
            },
        },
    }


def _new_instance() -> str:
    outcome = instance_start(domain=DOMAIN, workflow=WORKFLOW, body={"attributes": {}}, info=INFO)
    return str(outcome.instance.id)


def _lane(instance_id: str) -> None:
    instance_transition_run(
        domain=DOMAIN,
        workflow=WORKFLOW,
        ref=instance_id,
        transition_key="update-data",
        body={"attributes": {}},
        info=INFO,
    )


# The data-version CAS alone gives up after MAX_DATA_REDERIVES conflicts in a row (409): a
# client sends the update again; how often that happened is part of its figure.
CAS_GIVE_UPS = [0]


def _cas(instance_id: str) -> None:
    # The engine's data-version CAS with no lane in front: a conflict derives the mapping again.
    while True:
        try:
            instance_transition(
                domain=DOMAIN,
                workflow=WORKFLOW,
                ref=instance_id,
                transition_key="update-data",
                body={"attributes": {}},
                info=INFO,
            )
            return
        except Rejected:
            CAS_GIVE_UPS[0] += 1


def _advisory(instance_id: str) -> None:
    import uuid

    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(%s)", [lane_lock_key(uuid.UUID(instance_id))]
            )
        _cas(instance_id)


def _floor_writer() -> Callable[[str], None]:
    settings = connection.settings_dict
    url = libpq_url(
        f"postgresql://{settings['USER']}@{settings['HOST']}:{settings['PORT']}/{settings['NAME']}"
    )
    local = threading.local()

    def write(instance_id: str) -> None:
        if not hasattr(local, "conn"):
            local.conn = psycopg.connect(url, autocommit=True)
        local.conn.execute(
            "UPDATE instances_instance SET data = jsonb_set(data, '{count}', "
            "to_jsonb(COALESCE((data->>'count')::int, 0) + 1)) WHERE id = %s",
            (instance_id,),
        )

    return write


def _drive(write: Callable[[str], None], targets: list[str]) -> tuple[float, list[float]]:
    """CLIENTS threads, client n writing PER_CLIENT times to targets[n % len]: (seconds, ms)."""
    barrier = threading.Barrier(CLIENTS + 1)
    latencies: list[float] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def client(index: int) -> None:
        target = targets[index % len(targets)]
        mine = []
        try:
            barrier.wait(timeout=60)
            for _ in range(PER_CLIENT):
                started = time.perf_counter()
                write(target)
                mine.append((time.perf_counter() - started) * 1000)
        except BaseException as exc:  # reported after the join
            errors.append(exc)
        finally:
            with lock:
                latencies.extend(mine)
            connections.close_all()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    barrier.wait(timeout=60)
    started = time.perf_counter()
    for thread in threads:
        thread.join(timeout=600)
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"{len(errors)} client(s) failed: {errors[0]!r}") from errors[0]
    return elapsed, latencies


def main() -> None:
    """Run the funnel suite and record its figures."""
    prepare_database()
    component_publish(document=_document())
    contenders: dict[str, Callable[[str], None]] = {
        "lane": _lane,
        "cas": _cas,
        "advisory": _advisory,
        "sql floor": _floor_writer(),
    }
    layouts = {"1 instance": 1, "8 instances": CLIENTS}
    seconds: dict[tuple[str, str], float] = {}
    latencies: dict[tuple[str, str], list[float]] = {}
    for _ in range(ROUNDS):
        for layout, count in layouts.items():
            for name, write in contenders.items():
                targets = [_new_instance() for _ in range(count)]
                elapsed, times = _drive(write, targets)
                expected = CLIENTS * PER_CLIENT // count
                counts = [Instance.objects.get(pk=target).data.get("count") for target in targets]
                if counts != [expected] * count:
                    raise RuntimeError(f"{name} on {layout} lost updates: {counts}, not {expected}")
                key = (name, layout)
                seconds[key] = seconds.get(key, 0.0) + elapsed
                latencies.setdefault(key, []).extend(times)
    total = ROUNDS * CLIENTS * PER_CLIENT
    print(f"updateData, {CLIENTS} clients x {PER_CLIENT} updates x {ROUNDS} rounds per cell")
    print(f"  {'mechanism':<10} {'layout':<12} {'updates/s':>10} {'p50 ms':>8} {'p95 ms':>8}")
    rates: dict[tuple[str, str], float] = {}
    for (name, layout), spent in seconds.items():
        rates[(name, layout)] = rate = total / spent
        times = latencies[(name, layout)]
        print(
            f"  {name:<10} {layout:<12} {rate:10.0f} {percentile(times, 0.5):8.2f} "
            f"{percentile(times, 0.95):8.2f}"
        )
    print(f"  cas: {CAS_GIVE_UPS[0]} update(s) gave up (409) and were sent again")
    one, eight = rates[("lane", "1 instance")], rates[("lane", "8 instances")]
    print(f"  lane: one instance runs at {one / eight:.2f}x the 8-instance rate")
    record(
        "updateData, 8 clients on 1 instance (lane)",
        one,
        "updates/s",
        baseline="same, 8 instances",
        baseline_value=eight,
    )
    record(
        "updateData, 8 clients on 1 instance (lane)",
        one,
        "updates/s",
        baseline="SQL floor, 1 row",
        baseline_value=rates[("sql floor", "1 instance")],
    )
    record(
        "updateData, 8 clients on 1 instance (lane)",
        one,
        "updates/s",
        baseline="data CAS alone (no order)",
        baseline_value=rates[("cas", "1 instance")],
    )
    record(
        "updateData, 8 clients on 1 instance (lane)",
        one,
        "updates/s",
        baseline="advisory lock",
        baseline_value=rates[("advisory", "1 instance")],
    )
    record(
        "updateData, 8 clients on 8 instances (lane)",
        eight,
        "updates/s",
        baseline="SQL floor, 8 rows",
        baseline_value=rates[("sql floor", "8 instances")],
    )
