"""Fault-injection soak: `python -m bench soak [--transitions N] [--clients C] [--minutes M]
[--kill-every S] [--no-pg-restart] [--drain-seconds D] [--redis-db N]`.

It runs the production topology against its own PostgreSQL database (`vnext_soak`, dropped and
created afresh; `SOAK_DATABASE_URL` overrides it) with Celery as the job runner: `manage.py
vnext_run --serve-only` (`make serve`), two `celery -A vnext worker` (`make worker`) and `celery
beat` with the database scheduler (`make beat`: the sweeps), the broker being a Redis database
nobody else uses (`--redis-db`, default 9; refused when it holds keys that are not the soak's).

C client processes (`bench.soak_client`) drive instances of the soak workflow
(`bench.soak_workflows`) over HTTP until N transitions were accepted, each logging every
transition the API accepted (with a marker placed in its body) and every request whose answer was
lost. Meanwhile, every S seconds a random worker is SIGKILLed (the whole worker with its pool
children, or one prefork child) and a whole one is replaced, and once in the middle PostgreSQL is
restarted (`pg_ctlcluster ... restart`): the server and the workers must reconnect by themselves.

After a bounded drain (every job settled, no instance Busy) it checks, from the database against
the client logs: every accepted transition applied exactly once (its history row), every lost
answer at most once, nothing applied that no client had accepted; each instance's history a
continuous path (no automatic or scheduled transition applied twice) and its `works` counter equal
to its `work` rows; no instance Busy or Faulted unexpectedly; every job terminal and none failed;
each resource lock held by exactly the instances in `locked`; each lock probe refused. It prints
a report, writes it to `var/soak-report.json` and exits 1 on FAIL. Logs: `var/soak/`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from bench.database import libpq_url
from bench.server import free_port
from bench.soak_client import ClientConfig
from bench.soak_client import run as client_run
from bench.timing import percentile

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/vnext_soak"
LOG_DIR = ROOT / "var" / "soak"
REPORT_PATH = ROOT / "var" / "soak-report.json"
REDIS_OWNER_KEY = "vnext-soak:owner"
WORKERS = 2
# Of the kills, this share hits one prefork child instead of the whole worker.
CHILD_KILL_SHARE = 0.35
OPERATOR = "soak-operator"
PROTECTED_DATABASES = ("postgres", "vnext_test", "vnext_bench", "template0", "template1")


def parse(argv: list[str]) -> argparse.Namespace:
    """The soak's options."""
    parser = argparse.ArgumentParser(
        prog="python -m bench soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--transitions", type=int, default=20000, help="accepted transitions")
    parser.add_argument("--clients", type=int, default=8, help="client processes")
    parser.add_argument("--minutes", type=float, default=60.0, help="cap on the driving phase")
    parser.add_argument("--kill-every", type=float, default=10.0, help="seconds; 0: no kills")
    parser.add_argument("--no-pg-restart", action="store_true", help="do not restart PostgreSQL")
    parser.add_argument("--drain-seconds", type=float, default=240.0, help="cap on the drain")
    parser.add_argument("--redis-db", type=int, default=9, help="Redis database of the broker")
    parser.add_argument("--instances", type=int, default=6, help="live instances per client")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: time)")
    return parser.parse_args(argv)


# --- processes -----------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    """Direct children of `pid` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry))
    return found


class Managed:
    """A subprocess in its own session (so its whole group can be killed), logging to a file."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.command = command
        self.env = env
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.ready_at: float | None = None
        self.expected_exit = False

    def start(self) -> None:
        """Start it (appending to its log)."""
        handle = self.log.open("ab")
        self.process = subprocess.Popen(
            self.command,
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        handle.close()
        self.started_at = time.monotonic()

    @property
    def pid(self) -> int:
        """The main process' id."""
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        """Still running."""
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group (a crash of the machine running it)."""
        self.expected_exit = True
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM the group, then SIGKILL what is left after `grace` seconds."""
        self.expected_exit = True
        if self.process is None:
            return
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
            except ProcessLookupError:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)  # stragglers of the group
        self.process.wait(timeout=30)

    def ready(self, marker: bytes) -> bool:
        """`marker` appeared near the start of its log (remembered once seen)."""
        if self.ready_at is None:
            try:
                with self.log.open("rb") as handle:
                    head = handle.read(256 * 1024)
            except OSError:
                return False
            if marker in head:
                self.ready_at = time.monotonic()
        return self.ready_at is not None


@dataclass
class Faults:
    """What the soak did to the topology, and what died on its own."""

    whole_kills: int = 0
    child_kills: int = 0
    replacements: int = 0
    # Rounds that found no worker ready to kill (all of them still starting).
    skipped_rounds: int = 0
    kill_log: list[dict[str, Any]] = field(default_factory=list)
    pg_restart: dict[str, Any] | None = None
    unexpected_exits: list[str] = field(default_factory=list)


class Topology:
    """The server, the beat and the workers of one soak."""

    def __init__(self, database_url: str, broker_url: str) -> None:
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "CELERY_BROKER_URL": broker_url,
            "DJANGO_SETTINGS_MODULE": "vnext.settings",
            "PYTHONUNBUFFERED": "1",
        }
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        python = sys.executable
        self.server = Managed(
            "server",
            [python, "manage.py", "vnext_run", "--serve-only", "--host", "127.0.0.1",
             "--port", str(self.port)],
            self.env,
            LOG_DIR / "server.log",
        )  # fmt: skip
        self.beat = Managed(
            "beat",
            [python, "-m", "celery", "-A", "vnext", "beat", "--loglevel=INFO",
             "--scheduler", "django_celery_beat.schedulers:DatabaseScheduler"],
            self.env,
            LOG_DIR / "beat.log",
        )  # fmt: skip
        self.workers: list[Managed] = []
        self.retired: list[Managed] = []
        self.worker_count = 0

    def new_worker(self) -> Managed:
        """Start one more `celery -A vnext worker` (as `make worker`, with its own node name)."""
        self.worker_count += 1
        number = self.worker_count
        worker = Managed(
            f"worker-{number}",
            [sys.executable, "-m", "celery", "-A", "vnext", "worker", "--loglevel=INFO",
             "-n", f"soak{number}@%h"],
            self.env,
            LOG_DIR / f"worker-{number}.log",
        )  # fmt: skip
        worker.start()
        self.workers.append(worker)
        return worker

    def start(self) -> None:
        """Start everything and wait until the server answers and the workers are ready."""
        self.server.start()
        self.beat.start()
        for _ in range(WORKERS):
            self.new_worker()
        deadline = time.monotonic() + 180
        with httpx.Client(base_url=self.base_url, timeout=2.0) as client:
            while True:
                if not self.server.alive():
                    raise RuntimeError(f"the server exited; see {self.server.log}")
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the server is not healthy; see {self.server.log}")
                time.sleep(0.3)
        while not all(worker.ready(b"ready.") for worker in self.workers):
            for worker in self.workers:
                if not worker.alive():
                    raise RuntimeError(f"{worker.name} exited; see {worker.log}")
            if time.monotonic() > deadline:
                raise RuntimeError("the Celery workers are not ready; see var/soak/worker-*.log")
            time.sleep(0.3)

    def kill_one(self, rng: random.Random, faults: Faults) -> None:
        """SIGKILL a random ready worker, whole (and start a replacement) or one of its prefork
        children (Celery forks a new one).

        The whole worker only while another one is ready: on a loaded 2-core machine a worker
        needs 10-20 s to come up, so killing the last ready one every 10 s would only measure
        start-up time, never recovery. A child is killed only once its worker has been ready for
        a few seconds (a pool child dying during start-up makes Celery give up)."""
        now = time.monotonic()
        ready = [
            worker
            for worker in self.workers
            if worker.alive() and worker.ready(b"ready.") and now - (worker.ready_at or now) >= 3
        ]
        if not ready:
            faults.skipped_rounds += 1
            return
        victim = rng.choice(ready)
        children = _children(victim.pid)
        at = round(time.time(), 3)
        if children and (len(ready) < 2 or rng.random() < CHILD_KILL_SHARE):
            child = rng.choice(children)
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                return
            faults.child_kills += 1
            faults.kill_log.append({"t": at, "worker": victim.name, "child": child})
            return
        victim.kill()
        self.workers.remove(victim)
        self.retired.append(victim)
        faults.whole_kills += 1
        replacement = self.new_worker()
        faults.replacements += 1
        faults.kill_log.append({"t": at, "worker": victim.name, "replacement": replacement.name})

    def ready_workers(self) -> int:
        """Workers up and ready now."""
        return sum(worker.alive() and worker.ready(b"ready.") for worker in self.workers)

    def check_alive(self, faults: Faults) -> None:
        """Record (once) any process that exited without the soak killing it; a worker is
        replaced, as its supervisor would."""
        for process in [self.server, self.beat, *self.workers]:
            if not process.alive() and not process.expected_exit:
                process.expected_exit = True
                code = process.process.returncode if process.process else None
                faults.unexpected_exits.append(f"{process.name} exited ({code})")
                print(f"!! {process.name} exited on its own ({code}); see {process.log}")
                if process in self.workers:
                    self.workers.remove(process)
                    self.retired.append(process)
                    self.new_worker()

    def stop(self) -> None:
        """Workers first (warm shutdown), then beat and the server."""
        for worker in self.workers:
            worker.stop()
        self.beat.stop()
        self.server.stop()


# --- the database --------------------------------------------------------------------------------


def database_url() -> str:
    """`SOAK_DATABASE_URL`, or `vnext_soak` on the local server."""
    return os.environ.get("SOAK_DATABASE_URL") or DEFAULT_DATABASE_URL


def recreate_database(url: str) -> None:
    """Drop and create the soak's own database (refusing any database others use)."""
    import psycopg
    from psycopg import sql

    name = urlsplit(url).path.lstrip("/")
    if not name or name in PROTECTED_DATABASES or "soak" not in name:
        raise SystemExit(f"refusing to soak in database {name!r}: its name must contain 'soak'")
    with psycopg.connect(libpq_url(url, "postgres"), autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def prepare(url: str) -> str:
    """Create, migrate, publish the soak workflow, create the operator; its API token."""
    recreate_database(url)
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "vnext.settings"
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connections
    from rest_framework.authtoken.models import Token

    from bench.soak_workflows import documents
    from workflows.services import component_publish

    call_command("migrate", interactive=False, verbosity=0)
    for document in documents():
        result = component_publish(document=document, published_by="soak")
        if result.status != "published":
            raise RuntimeError(f"{result.ref}: {result.status}")
    user = get_user_model().objects.create_superuser(username=OPERATOR, password=None)
    token = Token.objects.create(user=user).key
    # The driving phase restarts PostgreSQL: hold no connection through it.
    connections.close_all()
    return str(token)


def claim_redis(db: int) -> str:
    """The broker URL on Redis database `db`, emptied; refused when someone else's keys are
    there."""
    import redis

    url = f"redis://127.0.0.1:6379/{db}"
    client = redis.Redis.from_url(url)
    if client.dbsize() and not client.exists(REDIS_OWNER_KEY):
        raise SystemExit(f"Redis database {db} holds keys that are not the soak's: pick --redis-db")
    client.flushdb()
    client.set(REDIS_OWNER_KEY, "python -m bench soak")
    return url


def postgres_version() -> str:
    """The cluster version directory under /etc/postgresql (one cluster on this machine)."""
    versions = sorted(os.listdir("/etc/postgresql"))
    if not versions:
        raise SystemExit("no PostgreSQL cluster under /etc/postgresql")
    return versions[-1]


def _probe_once(url: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(libpq_url(url), connect_timeout=1) as probe:
            probe.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


def restart_postgres(url: str) -> dict[str, Any]:
    """`pg_ctlcluster ... restart` while a thread probes the database every 50 ms on a fresh
    connection; the timings, and how long the database refused work."""
    began = time.time()
    outage: list[float] = []  # the first failed probe, then the first success after it
    finished = threading.Event()

    def probe() -> None:
        while not finished.is_set() or len(outage) == 1:
            ok = _probe_once(url)
            now = time.time()
            if not ok and not outage:
                outage.append(now)
            elif ok and len(outage) == 1:
                outage.append(now)
                return
            if now - began > 120:
                return
            time.sleep(0.05)

    prober = threading.Thread(target=probe, name="pg-probe", daemon=True)
    prober.start()
    done = subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", postgres_version(), "main", "restart"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    command_done = time.time()
    finished.set()
    prober.join(timeout=125)
    return {
        "began": began,
        "command_seconds": round(command_done - began, 3),
        "unavailable_from_s": round(outage[0] - began, 3) if outage else None,
        "unavailable_seconds": round(outage[1] - outage[0], 3) if len(outage) == 2 else None,
        "returncode": done.returncode,
        "output": (done.stdout + done.stderr).strip()[-500:],
    }


def settle_counts(url: str) -> tuple[int, int]:
    """(live jobs, Busy instances) right now, on a fresh connection."""
    import psycopg

    with psycopg.connect(libpq_url(url), connect_timeout=5) as db:
        jobs = db.execute(
            "SELECT count(*) FROM instances_job WHERE status IN ('pending', 'running')"
        ).fetchone()
        busy = db.execute("SELECT count(*) FROM instances_instance WHERE status = 'B'").fetchone()
    return int(jobs[0] if jobs else 0), int(busy[0] if busy else 0)


def drain(url: str, seconds: float) -> dict[str, Any]:
    """Wait (at most `seconds`) until no job is pending or running and no instance is Busy."""
    began = time.monotonic()
    jobs = busy = -1
    while time.monotonic() - began < seconds:
        try:
            jobs, busy = settle_counts(url)
        except Exception as exc:  # the database may be coming back
            print(f"   drain: {exc}")
            time.sleep(1)
            continue
        if jobs == 0 and busy == 0:
            break
        time.sleep(1)
    return {
        "seconds": round(time.monotonic() - began, 1),
        "settled": jobs == 0 and busy == 0,
        "live_jobs": jobs,
        "busy_instances": busy,
    }


# --- the checks ----------------------------------------------------------------------------------


def read_client_logs(clients: int) -> dict[str, Any]:
    """Every client's JSON lines and summary."""
    records: list[dict[str, Any]] = []
    summaries: list[dict[str, Any]] = []
    for index in range(clients):
        log = LOG_DIR / f"client-{index}.jsonl"
        if log.exists():
            for line in log.read_text().splitlines():
                if line.strip():
                    records.append(json.loads(line))
        summary = LOG_DIR / f"client-{index}.summary.json"
        if summary.exists():
            summaries.append(json.loads(summary.read_text()))
        else:
            summaries.append({"index": index, "missing": True})
    return {"records": records, "summaries": summaries}


def _rows(sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return list(cursor.fetchall())


def check(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Compare the database with what the clients were told; every finding, by kind."""
    from django.db import connections

    connections.close_all()  # whatever was opened before the restart is gone
    accepted = {r["marker"]: r for r in records if r["k"] == "accepted"}
    unknown = {r["marker"]: r for r in records if r["k"] == "unknown"}
    probes = [r for r in records if r["k"] == "probe"]
    probe_markers = {r["marker"] for r in probes}
    probe_instances = {r["instance"] for r in probes}

    history = _rows(
        "SELECT id, instance_id::text, transition_key, from_state, to_state, status, error_code, "
        "body -> 'attributes' ->> 'marker', started_at, finished_at, chain_depth "
        "FROM instances_instancetransition ORDER BY instance_id, started_at, chain_depth"
    )
    completed: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    any_row: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    by_instance: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    running_rows = []
    for row in history:
        marker = row[7]
        if marker:
            any_row[marker].append(row)
            if row[5] == "completed":
                completed[marker].append(row)
        if row[5] == "completed":
            by_instance[row[1]].append(row)
        elif row[5] == "running":
            running_rows.append(row)

    findings: dict[str, list[Any]] = defaultdict(list)
    notes: dict[str, list[Any]] = defaultdict(list)
    # Every accepted transition applied exactly once, on the instance and transition it named.
    for marker, record in accepted.items():
        if marker in probe_markers:
            continue
        rows = completed.get(marker, [])
        if not rows:
            findings["lost"].append(_brief(record, any_row.get(marker, [])))
        elif len(rows) > 1:
            findings["duplicated"].append(_brief(record, rows))
        elif record["instance"] and (
            rows[0][1] != record["instance"] or rows[0][2] != record["transition"]
        ):
            findings["misapplied"].append(_brief(record, rows))
    # A lost answer applied at most once.
    unknown_applied = 0
    for marker, record in unknown.items():
        rows = completed.get(marker, [])
        unknown_applied += bool(rows)
        if len(rows) > 1:
            findings["duplicated"].append(_brief(record, rows))
    # Nothing applied that no client was told was accepted (or lost the answer of).
    for marker, rows in completed.items():
        if marker not in accepted and marker not in unknown:
            findings["phantom"].append({"marker": marker, "rows": [_row(r) for r in rows]})

    # Each instance's history is one continuous path from its start.
    works_rows: Counter[str] = Counter()
    for instance_id, rows in by_instance.items():
        previous = None
        for row in rows:
            if row[2] == "work":
                works_rows[instance_id] += 1
            expected_from = "" if previous is None else previous[4]
            if row[3] != expected_from:
                findings["discontinuous_history"].append(
                    {"instance": instance_id, "row": _row(row),
                     "previous": _row(previous) if previous else None}
                )  # fmt: skip
            previous = row
    for row in running_rows:
        findings["history_rows_left_running"].append(_row(row))

    instances = _rows(
        "SELECT id::text, status, current_state, busy_owner, busy_since, "
        "(data ->> 'works')::int, data ->> 'lockKey', now() - busy_since FROM instances_instance"
    )
    for instance_id, status, state, owner, _since, works, _, age in instances:
        if (works or 0) != works_rows.get(instance_id, 0):
            findings["works_mismatch"].append(
                {
                    "instance": instance_id,
                    "data_works": works,
                    "work_rows": works_rows.get(instance_id, 0),
                }
            )
        if status == "B":
            live = _rows(
                "SELECT id, kind, status, lease_until FROM instances_job WHERE instance_id = %s "
                "AND status IN ('pending', 'running')",
                [instance_id],
            )
            findings["stranded_busy"].append(
                {"instance": instance_id, "state": state, "owner": owner,
                 "busy_seconds": age.total_seconds() if age else None,
                 "live_jobs": [list(map(str, job)) for job in live]}
            )  # fmt: skip
    incidents = defaultdict(list)
    for instance_id, code, message, resolved in _rows(
        "SELECT instance_id::text, error_code, message, resolved FROM instances_incident"
    ):
        incidents[instance_id].append(
            {"code": code, "message": message[:300], "resolved": resolved}
        )
    for instance_id, status, state, *_ in instances:
        if status == "F" and instance_id not in probe_instances:
            findings["unexpected_faults"].append(
                {"instance": instance_id, "state": state, "incidents": incidents.get(instance_id)}
            )
    status_of = {row[0]: (row[1], row[2], row[6]) for row in instances}

    # The lock probes were refused: their instance Faulted with the conflict, nothing applied.
    probe_outcomes: Counter[str] = Counter()
    for probe in probes:
        probe_outcomes[probe["outcome"]] += 1
        status, state, _ = status_of.get(probe["instance"], ("?", "?", None))
        codes = [i["code"] for i in incidents.get(probe["instance"], [])]
        refused = probe["outcome"] in ("conflict-409", "accepted-async")
        if not refused and probe["outcome"] != "unknown":
            findings["probe_not_refused"].append({**probe, "status": status, "state": state})
        elif completed.get(probe["marker"]):
            findings["probe_applied"].append({**probe, "rows": len(completed[probe["marker"]])})
        elif refused and (status != "F" or "ResourceLockConflict" not in codes):
            findings["probe_not_faulted"].append(
                {**probe, "status": status, "state": state, "incident_codes": codes}
            )

    # Locks: held by exactly the Active instances in `locked`, each under its own key.
    locks = _rows("SELECT key, owner::text, expires_at > now() FROM locks_resourcelock")
    held_by: dict[str, list[str]] = defaultdict(list)
    for key, owner, unexpired in locks:
        held_by[owner].append(key)
        status, state, lock_key = status_of.get(owner, ("gone", "", None))
        if status in ("C", "F", "gone"):
            findings["lock_held_by_finished"].append(
                {"key": key, "owner": owner, "status": status, "state": state}
            )
        elif state != "locked" or key != lock_key:
            findings["lock_held_outside_locked"].append(
                {"key": key, "owner": owner, "status": status, "state": state}
            )
        if not unexpired:
            findings["lock_expired_unswept"].append({"key": key, "owner": owner})
    for instance_id, (status, state, lock_key) in status_of.items():
        if status == "A" and state == "locked" and lock_key not in held_by.get(instance_id, []):
            findings["lock_missing"].append({"instance": instance_id, "key": lock_key})

    # Jobs: all terminal, none failed; each accepted async request ran by exactly one job.
    jobs_by_status = dict(_rows("SELECT status, count(*) FROM instances_job GROUP BY status"))
    jobs_by_kind = {
        f"{kind}/{status}": count
        for kind, status, count in _rows(
            "SELECT kind, status, count(*) FROM instances_job GROUP BY kind, status ORDER BY 1, 2"
        )
    }
    for job in _rows(
        "SELECT id, kind, instance_id::text, attempts, status, last_error, state "
        "FROM instances_job "
        "WHERE status NOT IN ('succeeded', 'skipped', 'instance_faulted', 'cancelled')"
    ):
        job_id, kind, instance_id, attempts, status, error, state = job
        now = status_of.get(instance_id or "", ("gone", "", None))
        findings["failed_jobs" if status == "failed" else "unsettled_jobs"].append(
            {"job": job_id, "kind": kind, "instance": instance_id, "attempts": attempts,
             "status": status, "error": error[:400], "timer_state": state,
             "instance_now": f"{now[0]} {now[1]}"}
        )  # fmt: skip
    async_jobs: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for marker, job_id, status, attempts in _rows(
        "SELECT payload -> 'body' -> 'attributes' ->> 'marker', id, status, attempts "
        "FROM instances_job WHERE kind = 'transition'"
    ):
        if marker:
            async_jobs[marker].append((job_id, status, attempts))
    async_outcomes: Counter[str] = Counter()
    attempts_histogram: Counter[int] = Counter()
    for marker, record in accepted.items():
        if record["mode"] != "async":
            continue
        jobs = async_jobs.get(marker, [])
        if len(jobs) != 1:
            findings["async_job_count"].append({"marker": marker, "jobs": jobs})
            continue
        _, status, attempts = jobs[0]
        async_outcomes[status] += 1
        attempts_histogram[attempts] += 1
        expected = "instance_faulted" if marker in probe_markers else "succeeded"
        if status == expected:
            continue
        item = {"marker": marker, "job": jobs[0], "expected": expected, "record": record}
        if status == "skipped" and len(completed.get(marker, [])) == 1:
            # Applied once by an attempt whose worker died before recording it; the re-claim
            # found the reservation spent. Exactly-once held: a note, not a failure.
            notes["applied_but_job_recorded_skipped"].append(item)
        else:
            findings["async_job_outcome"].append(item)

    instance_statuses = Counter(status for _, status, *_ in instances)
    return {
        "history_rows": len(history),
        "instances_by_status": dict(instance_statuses),
        "unknown_outcomes": len(unknown),
        "unknown_applied": unknown_applied,
        "jobs_by_status": jobs_by_status,
        "jobs_by_kind": jobs_by_kind,
        "async_job_outcomes": dict(async_outcomes),
        "async_job_attempts": {str(k): v for k, v in sorted(attempts_histogram.items())},
        "locks_held": len(locks),
        "probe_outcomes": dict(probe_outcomes),
        "findings": {name: items for name, items in findings.items()},
        "notes": {name: items for name, items in notes.items()},
    }


def _row(row: tuple[Any, ...] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {
        "instance": row[1], "transition": row[2], "from": row[3], "to": row[4],
        "status": row[5], "error": row[6], "marker": row[7],
        "started_at": row[8].isoformat() if row[8] else None, "depth": row[10],
    }  # fmt: skip


def _brief(record: dict[str, Any], rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    return {"record": record, "rows": [_row(row) for row in rows]}


# --- the run -------------------------------------------------------------------------------------


def _latencies(records: list[dict[str, Any]], mode: str) -> dict[str, float | int]:
    values = [
        r["lat"]
        for r in records
        if r["k"] == "accepted" and r["op"] == "transition" and r["mode"] == mode
    ]
    if not values:
        return {"count": 0}
    return {
        "count": len(values),
        "p50_ms": round(percentile(values, 0.5) * 1000, 1),
        "p95_ms": round(percentile(values, 0.95) * 1000, 1),
        "max_ms": round(max(values) * 1000, 1),
    }


def _error_window(
    summaries: list[dict[str, Any]], restart: dict[str, Any] | None
) -> dict[str, Any]:
    times = sorted(t for s in summaries for t in s.get("error_times", []))
    result: dict[str, Any] = {"client_errors_total": len(times)}
    if restart is None:
        return result
    began = restart["began"]
    around = [t for t in times if began - 2 <= t <= began + restart["command_seconds"] + 120]
    result["client_errors_around_restart"] = len(around)
    if around:
        result["first_error_after_restart_s"] = round(around[0] - began, 2)
        result["last_error_after_restart_s"] = round(around[-1] - began, 2)
        result["clients_saw_errors_for_s"] = round(around[-1] - around[0], 2)
    result["client_errors_elsewhere"] = len(times) - len(around)
    return result


def main(argv: list[str]) -> None:
    """Run the soak; exit 1 on FAIL."""
    args = parse(argv)
    # SIGTERM as Ctrl-C: the topology and the clients are stopped on the way out.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    url = database_url()
    if LOG_DIR.exists():
        shutil.rmtree(LOG_DIR)
    LOG_DIR.mkdir(parents=True)
    print(f"== soak: {args.transitions} transitions, {args.clients} clients, kill every "
          f"{args.kill_every}s, PG restart: {not args.no_pg_restart}, seed {seed}")  # fmt: skip
    broker = claim_redis(args.redis_db)
    token = prepare(url)
    topology = Topology(url, broker)
    faults = Faults()
    report: dict[str, Any] = {
        "options": vars(args),
        "seed": seed,
        "database": url,
        "broker": broker,
    }
    clients: list[Any] = []
    try:
        started = time.monotonic()
        topology.start()
        print(f"   topology up in {time.monotonic() - started:.1f}s: server {topology.base_url}, "
              f"beat, {WORKERS} workers")  # fmt: skip
        context = multiprocessing.get_context("spawn")
        progress = context.Value("q", 0)
        stop = context.Event()
        deadline = time.time() + args.minutes * 60
        quotas = [args.transitions // args.clients] * args.clients
        for index in range(args.transitions % args.clients):
            quotas[index] += 1
        for index in range(args.clients):
            config = ClientConfig(
                index=index,
                base_url=topology.base_url,
                token=token,
                quota=quotas[index],
                deadline=deadline,
                log_path=str(LOG_DIR / f"client-{index}.jsonl"),
                summary_path=str(LOG_DIR / f"client-{index}.summary.json"),
                instances=args.instances,
                seed=seed * 100 + index,
            )
            process = context.Process(target=client_run, args=(config, progress, stop))
            process.start()
            clients.append(process)
        run_began = time.time()
        restart_due = not args.no_pg_restart
        next_kill = time.monotonic() + args.kill_every if args.kill_every > 0 else float("inf")
        next_print = time.monotonic() + 15
        while any(process.is_alive() for process in clients):
            time.sleep(0.25)
            topology.check_alive(faults)
            if not topology.server.alive():
                print("!! the server is gone: stopping the clients")
                stop.set()
                break
            now = time.monotonic()
            if now >= next_kill:
                topology.kill_one(rng, faults)
                next_kill = now + args.kill_every
            halfway = progress.value >= args.transitions / 2 or (
                time.time() - run_began >= args.minutes * 30
            )
            if restart_due and halfway:
                restart_due = False
                print(f"   restarting PostgreSQL at {progress.value} accepted transitions")
                accepted_before = progress.value
                faults.pg_restart = restart_postgres(url)
                faults.pg_restart["accepted_before"] = accepted_before
                print(f"   PostgreSQL restarted: {faults.pg_restart}")
            if now >= next_print:
                next_print = now + 15
                elapsed = time.time() - run_began
                print(f"   {elapsed:6.0f}s  {progress.value:6d} accepted  "
                      f"{progress.value / max(elapsed, 1e-9):6.1f}/s  kills {faults.whole_kills}"
                      f"+{faults.child_kills}  ready workers "
                      f"{topology.ready_workers()}")  # fmt: skip
        for process in clients:
            process.join(timeout=120)
        run_seconds = time.time() - run_began
        print(f"   clients done: {progress.value} accepted in {run_seconds:.0f}s; draining")
        settled = drain(url, args.drain_seconds)
        print(f"   drain: {settled}")
        topology.check_alive(faults)
        logs = read_client_logs(args.clients)
        results = check(logs["records"])
    finally:
        for process in clients:
            if process.is_alive():
                process.terminate()
        topology.stop()

    records, summaries = logs["records"], logs["summaries"]
    transitions = [r for r in records if r["k"] == "accepted" and r["op"] == "transition"]
    refusals: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for summary in summaries:
        refusals.update(summary.get("refusals", {}))
        errors.update(summary.get("errors", {}))
    findings = results.pop("findings")
    failures = {name: len(items) for name, items in findings.items() if items}
    # A worker that dies on its own is replaced (and reported); the server or beat may not.
    failures.update(
        {f"process:{gone}": 1 for gone in faults.unexpected_exits if not gone.startswith("worker")}
    )
    if not settled["settled"]:
        failures["drain_not_settled"] = 1
    if any(summary.get("missing") for summary in summaries):
        failures["client_crashed"] = 1
    report.update(
        {
            "passed": not failures,
            "failures": failures,
            "accepted": {
                "transitions": len(transitions),
                "sync": sum(r["mode"] == "sync" for r in transitions),
                "async": sum(r["mode"] == "async" for r in transitions),
                "starts": sum(1 for r in records if r["k"] == "accepted" and r["op"] == "start"),
            },
            "run_seconds": round(run_seconds, 1),
            "throughput_per_second": round(len(transitions) / max(run_seconds, 1e-9), 1),
            "latency": {"sync": _latencies(records, "sync"), "async": _latencies(records, "async")},
            "faults": {
                "whole_worker_kills": faults.whole_kills,
                "child_kills": faults.child_kills,
                "replacements": faults.replacements,
                "rounds_without_a_ready_worker": faults.skipped_rounds,
                "pg_restart": faults.pg_restart,
                "unexpected_exits": faults.unexpected_exits,
                "kill_log": faults.kill_log,
            },
            "client_errors": {
                **_error_window(summaries, faults.pg_restart),
                "by_kind": dict(errors),
            },
            "refusals": dict(refusals.most_common()),
            "drain": settled,
            **results,
            "counts": {
                "lost": len(findings.get("lost", [])),
                "duplicated": len(findings.get("duplicated", [])),
                "phantom": len(findings.get("phantom", [])),
                "stranded_busy": len(findings.get("stranded_busy", [])),
                "unexpected_faults": len(findings.get("unexpected_faults", [])),
                "failed_jobs": len(findings.get("failed_jobs", [])),
            },
            "findings": findings,
        }
    )
    REPORT_PATH.write_text(json.dumps(report, indent=2, default=str))
    print_report(report)
    sys.exit(0 if report["passed"] else 1)


def print_report(report: dict[str, Any]) -> None:
    """The human-readable report."""
    accepted = report["accepted"]
    latency = report["latency"]
    faults = report["faults"]
    restart = faults["pg_restart"]
    errors = report["client_errors"]
    counts = report["counts"]
    print("\n== soak report ==")
    print(f"accepted transitions   {accepted['transitions']} (sync {accepted['sync']}, async "
          f"{accepted['async']}), starts {accepted['starts']}")  # fmt: skip
    print(
        f"throughput             {report['throughput_per_second']}/s over {report['run_seconds']}s"
    )
    for mode in ("sync", "async"):
        figures = latency[mode]
        if figures.get("count"):
            print(f"latency {mode:<6}         p50 {figures['p50_ms']} ms  "
                  f"p95 {figures['p95_ms']} ms  max {figures['max_ms']} ms")  # fmt: skip
    print(f"kills                  {faults['whole_worker_kills']} whole workers (replaced), "
          f"{faults['child_kills']} prefork children; "
          f"{faults['rounds_without_a_ready_worker']} rounds found none ready")  # fmt: skip
    if faults["unexpected_exits"]:
        print(f"exited on their own    {faults['unexpected_exits']}")
    if restart:
        print(f"PostgreSQL restart     refused connections for {restart['unavailable_seconds']}s "
              f"(from +{restart['unavailable_from_s']}s; pg_ctlcluster took "
              f"{restart['command_seconds']}s) at {restart['accepted_before']} "
              "accepted")  # fmt: skip
        if "clients_saw_errors_for_s" in errors:
            print(f"client errors          {errors['client_errors_around_restart']} around the "
                  f"restart, from +{errors['first_error_after_restart_s']}s to "
                  f"+{errors['last_error_after_restart_s']}s "
                  f"({errors['clients_saw_errors_for_s']}s); {errors['client_errors_elsewhere']} "
                  "elsewhere")  # fmt: skip
        else:
            print(
                "client errors          none around the restart; "
                f"{errors['client_errors_total']} in all"
            )
    else:
        print(f"client errors          {errors['client_errors_total']} (no PostgreSQL restart)")
    print(
        f"lost answers           {report['unknown_outcomes']} ({report['unknown_applied']} applied)"
    )
    print(f"lost / duplicated      {counts['lost']} / {counts['duplicated']}  phantom "
          f"{counts['phantom']}  stranded Busy {counts['stranded_busy']}  unexpected faults "
          f"{counts['unexpected_faults']}")  # fmt: skip
    print(f"jobs by status         {report['jobs_by_status']}")
    print(f"async job attempts     {report['async_job_attempts']}")
    print(f"instances by status    {report['instances_by_status']}")
    print(f"lock probes            {report['probe_outcomes']}; locks held {report['locks_held']}")
    print(f"drain                  {report['drain']}")
    top = dict(list(report["refusals"].items())[:6])
    print(f"refusals (top)         {top}")
    for name, items in report["findings"].items():
        if items:
            print(f"-- {name}: {len(items)}")
            for item in items[:5]:
                print(f"   {json.dumps(item, default=str)[:600]}")
    for name, items in report["notes"].items():
        print(f"-- note, {name}: {len(items)}")
        for item in items[:3]:
            print(f"   {json.dumps(item, default=str)[:600]}")
    verdict = "PASS" if report["passed"] else f"FAIL {report['failures']}"
    print(f"\nresult                 {verdict}\nreport                 {REPORT_PATH}")
