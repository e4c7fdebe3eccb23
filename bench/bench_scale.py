"""Every read at 2,000 and at N instances (`python -m bench scale [--instances N]`, default
1,000,000): the same requests, through the real server (`manage.py vnext_run`, the `make run`
topology), against one workflow holding 2,000 instances, then N, with `GET /health` as the
same-run floor. A read whose time grows with the table is a bug (issue 29: each must stay within
1.5x of its 2,000-instance figure). Then the archive: completed instances archived and deleted
while 8 clients drive transitions on other instances, beside the same clients without it.

The instances are inserted in SQL (generate_series, in chunks), with a realistic spread: most
completed over the last 180 days, the rest live in every state, a few faulted; three history rows
and three data versions each; data with an indexed customer id (`x-indexed`), an indexed amount,
a region and an unindexed note. `indexes_apply` builds the workflow's indexes, as an operator
would. The database is `vnext_bench` (bench/database.py); its size is printed before and after.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from django.core.management import call_command, get_commands
from django.db import connection

from bench.bench_transitions import prepare_database
from bench.database import bench_database_url
from bench.server import BenchServer
from bench.summary import record
from bench.timing import percentile
from workflows.services import component_publish

DOMAIN, FLOW = "core", "scale-order"
BASE = f"/api/v1/{DOMAIN}/workflows/{FLOW}/instances"
SMALL = 2_000
CHUNK = 50_000
SAMPLES = 15
TARGET_RATIO = 1.5
LOAD_CLIENTS = 8
LABELS = [{"label": "x", "language": "en"}]

MASTER = {
    "key": f"{FLOW}-master",
    "domain": DOMAIN,
    "version": "1.0.0",
    "flow": "sys-schemas",
    "flowVersion": "1.0.0",
    "tags": ["bench"],
    "attributes": {
        "type": "schema",
        "schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "customerId": {"type": "string", "x-indexed": True},
                "amount": {"type": "number", "x-indexed": True, "x-sortable": True},
                "region": {"type": "string"},
                "note": {"type": "string"},
            },
        },
    },
}


def _transition(key: str, target: str) -> dict[str, Any]:
    return {
        "key": key,
        "target": target,
        "triggerType": 0,
        "versionStrategy": "Minor",
        "labels": LABELS,
    }


def _state(key: str, state_type: int, transitions: list[dict[str, Any]], **extra: Any) -> Any:
    return {
        "key": key,
        "stateType": state_type,
        "versionStrategy": "None",
        "labels": LABELS,
        "transitions": transitions,
        **extra,
    }


WORKFLOW = {
    "key": FLOW,
    "domain": DOMAIN,
    "version": "1.0.0",
    "flow": "sys-flows",
    "flowVersion": "1.0.0",
    "tags": ["bench"],
    "attributes": {
        "type": "F",
        "labels": LABELS,
        "schema": {
            "key": MASTER["key"],
            "domain": DOMAIN,
            "version": "1.0.0",
            "flow": "sys-schemas",
        },
        "startTransition": {**_transition("start", "draft"), "triggerType": 0},
        "states": [
            _state("draft", 1, [_transition("submit", "review")]),
            _state("review", 2, [_transition("approve", "approved"), _transition("back", "draft")]),
            _state("approved", 3, [], subType=1),
        ],
    },
}

# Statuses and states of the generated instances, by n % 20: 14 completed, 5 live, 1 faulted.
_SPREAD = """
CASE WHEN n %% 20 < 14 THEN 'C' WHEN n %% 20 < 19 THEN 'A' ELSE 'F' END
"""
_STATE = """
CASE WHEN n %% 20 < 14 THEN 'approved' WHEN n %% 20 < 17 THEN 'draft' ELSE 'review' END
"""


def grow(total: int) -> None:
    """Insert instances (with their history and data versions) until the workflow has `total`."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM instances_instance WHERE workflow_key = %s", [FLOW])
        have = int(cursor.fetchone()[0])
    while have < total:
        upto = min(have + CHUNK, total)
        with connection.cursor() as cursor:
            cursor.execute(_INSERT_CHUNK, {"first": have + 1, "last": upto, "flow": FLOW})
        have = upto
        print(f"  {have:,} instances", end="\r", flush=True)
    print()
    # VACUUM too: autovacuum waking on the freshly loaded tables during the measurements would
    # slow every request at N, those that read no instance too (start, /metrics).
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE) instances_instance")
        cursor.execute("VACUUM (ANALYZE) instances_instancetransition")
        cursor.execute("VACUUM (ANALYZE) instances_instancedataversion")
    _grow_human_tasks()


# An open human task (type 5) for every instance in `review` that has none, assigned to one of
# 50 roles, and one in 50 also to the bench operator, whose inbox the probes read.
_HUMAN_TASKS = """
WITH made AS (
  INSERT INTO instances_humantask (id, instance_id, domain, workflow_key, state, task_key,
    title, instructions, roles, users, status, claimed_by, completed_by, created_at)
  SELECT gen_random_uuid(), i.id, i.domain, i.workflow_key, 'review', 'approve', 'Approve', '',
    jsonb_build_array('r' || (abs(hashtext(i.id::text)) %% 50)),
    CASE WHEN abs(hashtext(i.id::text || 'u')) %% 50 = 0 THEN '["bench-operator"]'::jsonb
      ELSE '[]'::jsonb END,
    'open', '', '', i.created_at
  FROM instances_instance i
  WHERE i.workflow_key = %(flow)s AND i.current_state = 'review' AND i.status <> 'C'
    AND NOT EXISTS (SELECT 1 FROM instances_humantask h WHERE h.instance_id = i.id)
  RETURNING id, domain, created_at, roles, users
)
INSERT INTO instances_humantaskassignee (task_id, domain, assignee, created_at)
SELECT id, domain, 'role:' || (roles ->> 0), created_at FROM made
UNION ALL
SELECT id, domain, 'user:bench-operator', created_at FROM made WHERE users <> '[]'::jsonb
"""


def _grow_human_tasks() -> None:
    with connection.cursor() as cursor:
        cursor.execute(_HUMAN_TASKS, {"flow": FLOW})
        cursor.execute("VACUUM (ANALYZE) instances_humantask")
        cursor.execute("VACUUM (ANALYZE) instances_humantaskassignee")


_INSERT_CHUNK = f"""
WITH made AS (
  INSERT INTO instances_instance (id, domain, workflow_key, workflow_version, key, status,
    current_state, effective_state, effective_state_type, effective_state_subtype, data,
    data_version_major, data_version_minor, data_version_patch, etag, entity_etag,
    state_version, busy_owner, busy_since, tags, stage, extra, created_by, modified_by,
    created_at, updated_at, completed_at)
  SELECT gen_random_uuid(), '{DOMAIN}', %(flow)s, '1.0.0', 'ORD-' || lpad(n::text, 8, '0'),
    {_SPREAD}, {_STATE}, {_STATE}, CASE WHEN n %% 20 < 14 THEN 'final' ELSE 'intermediate' END,
    CASE WHEN n %% 20 < 14 THEN 'success' ELSE 'none' END,
    jsonb_build_object('customerId', 'C-' || (n %% 50000), 'amount', (n::bigint * 7919) %% 10000,
      'region', 'R' || (n %% 8), 'note', 'n-' || n),
    1, 2, 0, md5(n::text), md5('e' || n), 2, '', NULL, '[]'::jsonb, '', '{{}}'::jsonb,
    'bench', 'bench',
    now() - ((n %% 180) || ' days')::interval - ((n %% 86400) || ' seconds')::interval,
    now() - ((n %% 180) || ' days')::interval,
    CASE WHEN n %% 20 < 14 THEN now() - ((n %% 180) || ' days')::interval END
  FROM generate_series(%(first)s::int, %(last)s::int) AS n
  RETURNING id, created_at, data
), history AS (
  INSERT INTO instances_instancetransition (id, instance_id, transition_key, from_state,
    to_state, trigger_type, body, actor, status, error_code, error_message, effective_state,
    effective_state_type, effective_state_subtype, stage, chain_depth, started_at, finished_at)
  SELECT gen_random_uuid(), made.id, step.key, step.source, step.target, 0, '{{}}'::jsonb,
    'bench', 'completed', '', '', step.target, '', '', '', 0,
    made.created_at + step.at * interval '1 minute', made.created_at + step.at * interval '1 minute'
  FROM made CROSS JOIN (VALUES ('start', '', 'draft', 0), ('submit', 'draft', 'review', 1),
    ('approve', 'review', 'approved', 2)) AS step(key, source, target, at)
  RETURNING instance_id
)
INSERT INTO instances_instancedataversion (instance_id, transition_id, version, patch, data,
  created_at)
SELECT made.id, NULL, v.version, '{{}}'::jsonb, made.data, made.created_at
FROM made CROSS JOIN (VALUES ('1.0.0'), ('1.1.0'), ('1.2.0')) AS v(version)
"""


@dataclass
class Probe:
    """One request of the table: its name and how to make it (a path, or a callable)."""

    name: str
    path: str | Callable[[], str]
    method: str = "GET"
    admin: bool = False
    held: bool = True  # held to the 1.5x target (the unindexed filter only has to answer)


def _probes() -> list[Probe]:
    # Keys are fixed-width, as business keys usually are: a search matches as many instances at
    # 2,000 as at N (with `ORD-<n>`, a prefix such as ORD-4242 matches 111 keys at 1M, none at 2k).
    completed = "ORD-00000021"  # n % 20 == 1: completed
    customer = '{"attributes":{"customerId":{"eq":"C-4242"}}}'
    unindexed = '{"attributes":{"note":{"eq":"n-4242"}}}'
    return [
        Probe("GET /health", "/health"),
        Probe("list, pageSize 20", f"{BASE}?pageSize=20"),
        Probe("filter status", f"{BASE}?pageSize=20&filter=" + '{"status":{"eq":"Active"}}'),
        Probe("filter on one data field, selective", f"{BASE}?pageSize=20&filter={customer}"),
        Probe("sort by a data field", f"{BASE}?pageSize=20&sort=-attributes.amount"),
        Probe("instance by business key (completed)", f"{BASE}/{completed}"),
        Probe(
            "filter on an unindexed data field",
            f"{BASE}?pageSize=20&filter={unindexed}",
            held=False,
        ),
        Probe("admin instance list", "/admin/instances/instance/", admin=True),
        Probe("admin search by key", "/admin/instances/instance/?q=ORD-00001234", admin=True),
        Probe("admin search by key prefix", "/admin/instances/instance/?q=ORD-0000123", admin=True),
        Probe("admin dashboard", "/admin/", admin=True),
        Probe("GET /metrics", "/metrics"),
        # The human-task inbox (task type 5): the operator's open tasks, one index range.
        Probe("human-task inbox", f"/api/v1/{DOMAIN}/functions/human-task?pageSize=20"),
        Probe(
            # Every task is of FLOW: this times the filters' join, not a selective filter.
            "human-task inbox, unclaimed, workflow filter",
            f"/api/v1/{DOMAIN}/functions/human-task?pageSize=20&claimed=false&workflow={FLOW}",
        ),
    ]


def _admin_session(server: BenchServer) -> httpx.Client:
    client = httpx.Client(base_url=server.base_url, timeout=120.0)
    page = client.get("/admin/login/")
    token = page.text.split('name="csrfmiddlewaretoken" value="', 1)[1].split('"', 1)[0]
    client.post(
        "/admin/login/?next=/admin/",
        data={
            "username": server.username,
            "password": server.password,
            "csrfmiddlewaretoken": token,
        },
        headers={"Referer": f"{server.base_url}/admin/login/"},
    )
    return client


def _median_ms(call: Callable[[], httpx.Response]) -> float:
    call()  # warm
    times = []
    for _ in range(SAMPLES):
        started = time.perf_counter()
        response = call()
        times.append((time.perf_counter() - started) * 1000)
        if response.status_code >= 400:
            raise RuntimeError(f"{response.request.url} answered {response.status_code}")
    return statistics.median(times)


def _measure(server: BenchServer, api: httpx.Client, admin: httpx.Client) -> dict[str, float]:
    figures = {}
    for probe in _probes():
        client = admin if probe.admin else api
        path = probe.path if isinstance(probe.path, str) else probe.path()
        figures[probe.name] = _median_ms(functools.partial(client.get, path))
    figures.update(_writes(api))
    return figures


def _writes(api: httpx.Client) -> dict[str, float]:
    """Start, transition, state function, history: each on its own fresh instance."""
    starts, transitions, states, histories = [], [], [], []
    for _ in range(SAMPLES):
        began = time.perf_counter()
        created = api.post(f"{BASE}/start?sync=true", json={"attributes": {"customerId": "C-1"}})
        starts.append((time.perf_counter() - began) * 1000)
        instance_id = created.json()["id"]
        began = time.perf_counter()
        api.patch(f"{BASE}/{instance_id}/transitions/submit?sync=true", json={})
        transitions.append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        api.get(f"{BASE}/{instance_id}/functions/state")
        states.append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        api.get(f"{BASE}/{instance_id}/history")
        histories.append((time.perf_counter() - began) * 1000)
    return {
        "start": statistics.median(starts),
        "transition": statistics.median(transitions),
        "state function": statistics.median(states),
        "history": statistics.median(histories),
    }


def _database_size() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_size_pretty(pg_database_size(current_database()))")
        return str(cursor.fetchone()[0])


def _apply_indexes() -> None:
    if "indexes_apply" in get_commands():
        call_command("indexes_apply", verbosity=0)
    else:
        print("  (no indexes_apply command: the data-field filters run unindexed)")


def _archive_under_load(server: BenchServer, token: str, limit: int) -> None:
    """Archive up to `limit` completed instances while LOAD_CLIENTS clients drive transitions
    on live instances; the same clients alone first. Prints both p99s and the throughput."""
    from instances.archive import FolderArchive, archive_verify, instances_archive

    # The generated instances completed over the last 180 days: those older than 30 are due.
    store = FolderArchive(tempfile.mkdtemp(prefix="vnext-bench-archive-"))

    def drive(stop: threading.Event, times: list[float], errors: list[str]) -> None:
        with httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Token {token}"}, timeout=60
        ) as client:
            while not stop.is_set():
                created = client.post(f"{BASE}/start?sync=true", json={"attributes": {}})
                instance_id = created.json().get("id")
                for key in ("submit", "back"):
                    began = time.perf_counter()
                    answer = client.patch(
                        f"{BASE}/{instance_id}/transitions/{key}?sync=true", json={}
                    )
                    times.append((time.perf_counter() - began) * 1000)
                    if answer.status_code != 200:
                        errors.append(f"{answer.status_code} {answer.text[:200]}")

    def loaded(
        seconds: float | None, work: Callable[[], Any] | None
    ) -> tuple[list[float], list[str], Any]:
        stop, times, errors = threading.Event(), [], []  # type: ignore[var-annotated]
        threads = [
            threading.Thread(target=drive, args=(stop, times, errors)) for _ in range(LOAD_CLIENTS)
        ]
        for thread in threads:
            thread.start()
        result = None
        if work is not None:
            result = work()
        else:
            time.sleep(seconds or 0)
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
        return times, errors, result

    began = time.perf_counter()
    with_archive, errors, report = loaded(
        None, lambda: instances_archive(limit=limit, older_than_days=30, archive=store)
    )
    spent = time.perf_counter() - began
    alone, alone_errors, _ = loaded(spent, None)
    archived = report.archived
    verified = archive_verify(archive=store)
    restorable = _restore_one(report, store)
    print(
        f"archive files: {verified.checked} verified, {len(verified.problems)} with problems; "
        f"{len(report.errors)} batch errors; one restored and archived again: {restorable}"
    )
    shutil.rmtree(store.root, ignore_errors=True)
    p99, p99_alone = percentile(with_archive, 0.99), percentile(alone, 0.99)
    print(
        f"archive: {archived:,} instances in {spent:.1f} s ({archived / spent:,.0f}/s) while "
        f"{LOAD_CLIENTS} clients drove {len(with_archive):,} transitions, {len(errors)} errors; "
        f"transition p99 {p99:.1f} ms vs {p99_alone:.1f} ms alone ({len(alone_errors)} errors)"
    )
    record(
        "archive: transition p99 while archiving",
        p99,
        "ms",
        baseline="same clients, no archive",
        baseline_value=p99_alone,
        target=f"<= {TARGET_RATIO}x",
        met=p99 <= TARGET_RATIO * p99_alone and not errors,
    )
    record("archive throughput", archived / spent, "instances/s")


def _restore_one(report: Any, store: Any) -> bool:
    """Restore the first archived instance and archive it again: the archive is readable back."""
    from instances.archive import instance_restore, instances_archive
    from instances.models import ArchivedInstance

    tombstone = ArchivedInstance.objects.filter(location__in=report.files[:1]).first()
    if tombstone is None:
        return False
    instance_restore(instance_id=tombstone.instance_id, archive=store)
    again = instances_archive(limit=1, older_than_days=30, workflow=FLOW, archive=store)
    return again.archived == 1


def main(argv: list[str] | None = None) -> None:
    """Measure at 2,000 and at --instances; then archive under load."""
    parser = argparse.ArgumentParser(prog="python -m bench scale")
    parser.add_argument("--instances", type=int, default=1_000_000)
    parser.add_argument(
        "--archive", type=int, default=100_000, help="instances to archive (0: no archive phase)"
    )
    options = parser.parse_args(argv or [])
    from rest_framework.authtoken.models import Token

    prepare_database()
    component_publish(document=MASTER)
    component_publish(document=WORKFLOW)
    grow(SMALL)
    _apply_indexes()
    server = BenchServer(bench_database_url())
    phases: dict[int, dict[str, float]] = {}
    sizes: dict[int, str] = {}
    try:
        server.start()
        token = Token.objects.get(user__username=server.username).key
        api = httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Token {token}"}, timeout=300
        )
        admin = _admin_session(server)
        for size in (SMALL, options.instances):
            if size > SMALL:
                print(f"growing to {size:,} instances ...")
                grow(size)
                _apply_indexes()
            sizes[size] = _database_size()
            phases[size] = _measure(server, api, admin)
        _explain_inbox(options.instances)
        _print(phases, sizes, options.instances)
        if options.archive > 0:
            _archive_under_load(server, token, options.archive)
            print(f"database size after the archive: {_database_size()}")
    finally:
        server.stop()


def _explain_inbox(size: int) -> None:
    """The inbox's read at `size` instances, as `EXPLAIN (ANALYZE)` plans it: one limited
    `human_task_inbox` range per assignee name, no sequential scan (recorded as met or not)."""
    from instances.human_tasks import InboxFilter, inbox_query

    names = ["role:r7", "role:r8", "user:bench-operator"]
    plans = []
    for where in (InboxFilter(), InboxFilter(workflow=FLOW, claimed=False)):
        sql, params = inbox_query(DOMAIN, names, where, 21).query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", params)
            plans.append("\n".join(row[0] for row in cursor.fetchall()))
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM instances_humantaskassignee")
        [assignees] = cursor.fetchone()
    print(f"human-task inbox at {size:,} instances ({assignees:,} assignee rows):")
    for text in plans:
        print("  " + text.replace("\n", "\n  "))
    indexed = all(
        "Seq Scan" not in text and text.count("human_task_inbox") >= len(names) for text in plans
    )
    record(
        f"inbox EXPLAIN at {size:,}: index ranges, no scan",
        float(indexed),
        "",
        target="1 (index)",
        met=indexed,
    )


def _print(phases: dict[int, dict[str, float]], sizes: dict[int, str], big: int) -> None:
    small, large = phases[SMALL], phases[big]
    health = large["GET /health"]
    print(f"{'request':<42} {'2k ms':>8} {big // 1000:>6}k ms {'ratio':>7}")
    held = {probe.name: probe.held for probe in _probes()}
    for name, at_small in small.items():
        at_large = large[name]
        ratio = at_large / at_small if at_small else 0.0
        print(f"{name:<42} {at_small:8.1f} {at_large:9.1f} {ratio:6.2f}x")
        if name != "GET /health":
            record(
                f"scale: {name} at {big:,}",
                at_large,
                "ms",
                baseline="same at 2,000",
                baseline_value=at_small,
                target=f"<= {TARGET_RATIO}x" if held.get(name, True) else "",
                met=ratio <= TARGET_RATIO if held.get(name, True) else None,
            )
    print(f"GET /health at {big:,}: {health:.1f} ms; database {sizes[SMALL]} -> {sizes[big]}")
