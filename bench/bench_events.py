"""Events into transitions: from RabbitMQ through `manage.py events_consume`, beside the same
events posted over HTTP (`POST .../instances/events?action=transition`) in the same run.

The workflow is the intake tests' (`tests/integration/intake_support.py`): an event transition
`bump` moves the instance its mapping names by key (the mapping runs in the script pool). EVENTS
instances per path wait in `open`, their rows written directly (the point is the event).

- HTTP: `manage.py vnext_run` (HTTP_WORKERS processes), HTTP_CLIENTS threads posting one
  CloudEvent each per request on keep-alive connections, until every event is answered.
- RabbitMQ: the EVENTS CloudEvents published to a queue first, then `events_consume` started
  (CONSUMER_THREADS threads); timed from its "consuming" line to the last receipt committed.

Each event's accepted work is the same on both paths: the receipt and the transition's job in
one transaction. The jobs themselves (the transitions) then run here, `jobs_run_due` in one
thread, timed apart; so neither intake process spends CPU on them while it is timed, both hand
the jobs to a Celery broker nobody consumes (a Redis database of their own, flushed after).
Every instance is checked in `bumped` with its `bumped` data at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import redis
from django.db import connection
from kombu import Connection, Producer, Queue
from rest_framework.authtoken.models import Token

from bench.bench_transitions import prepare_database
from bench.database import bench_database_url
from bench.server import ROOT, BenchServer
from bench.summary import record
from instances.intake.rabbitmq import dead_letter_queue, queues_declare, retry_queue
from instances.job_handlers import jobs_run_due
from instances.job_table import Job
from instances.models import Instance
from instances.status import JobStatus
from tests.instances.workflows import publish
from tests.integration.intake_support import intake_workflow

EVENTS = int(os.environ.get("BENCH_EVENTS") or 2000)
HTTP_WORKERS = 2
HTTP_CLIENTS = 4
CONSUMER_THREADS = 2
WORKFLOW = "bench-intake"
AMQP_URL = os.environ.get("BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
# The Celery broker both intake processes hand the accepted jobs to (nobody consumes it).
JOBS_BROKER_URL = "redis://127.0.0.1:6379/13"
ROUTE_LOG_LINE = b"consuming R"


def _instances(prefix: str) -> None:
    """EVENTS Active instances in `open`, keyed `{prefix}{n}`."""
    Instance.objects.bulk_create(
        (
            Instance(
                domain="core",
                workflow_key=WORKFLOW,
                workflow_version="1.0.0",
                key=f"{prefix}{n}",
                current_state="open",
                effective_state="open",
                status="A",
                stage=prefix,
            )
            for n in range(EVENTS)
        ),
        batch_size=2000,
    )


def _cloud_event(prefix: str, n: int) -> dict:
    return {
        "specversion": "1.0",
        "id": f"{prefix}-{n}-{uuid.uuid4().hex[:8]}",
        "type": "order.bumped",
        "source": "/bench",
        "data": {"order": f"{prefix}{n}", "n": n},
    }


def _receipt_count() -> int:
    return Job.objects.filter(kind="event").count()


def _run_transitions() -> float:
    """Run every pending job here (one thread); their rate per second."""
    started = time.perf_counter()
    done = 0
    while True:
        counts = jobs_run_due(limit=500)
        done += sum(counts.values())
        if not counts and not Job.objects.filter(status=JobStatus.PENDING).exists():
            break
    return done / max(time.perf_counter() - started, 1e-9)


def _check_moved(prefix: str) -> None:
    moved = Instance.objects.filter(stage=prefix, current_state="bumped").count()
    assert moved == EVENTS, f"{prefix}: {moved} of {EVENTS} instances moved"


def _over_http() -> float:
    """Post the events through the API; events accepted per second."""
    environment = {
        "VNEXT_JOB_DISPATCH": "celery",
        "CELERY_BROKER_URL": JOBS_BROKER_URL,
    }
    with BenchServer(bench_database_url(), workers=HTTP_WORKERS, env=environment) as server:
        server.start()
        token = Token.objects.get(user__username=server.username).key
        path = f"/api/v1/core/workflows/{WORKFLOW}/instances/events"
        params = {"action": "transition", "transitionKey": "bump"}
        chunks = [range(c, EVENTS, HTTP_CLIENTS) for c in range(HTTP_CLIENTS)]

        def post(numbers: range) -> int:
            headers = {"Authorization": f"Token {token}"}
            with httpx.Client(base_url=server.base_url, headers=headers, timeout=30) as client:
                for n in numbers:
                    answer = client.post(path, params=params, json=_cloud_event("h", n))
                    assert answer.status_code in (200, 202), answer.text
                    assert answer.json()["matched"] == 1, answer.text
            return len(numbers)

        # Warm the server's processes (imports, connections, the script pool) off the clock.
        with httpx.Client(base_url=server.base_url, timeout=30) as client:
            for _ in range(2 * HTTP_WORKERS):
                client.get("/health")
        started = time.perf_counter()
        with ThreadPoolExecutor(HTTP_CLIENTS) as pool:
            assert sum(pool.map(post, chunks)) == EVENTS
        return EVENTS / (time.perf_counter() - started)


def _from_rabbitmq() -> float:
    """Publish the events to a queue, then consume them; events accepted per second."""
    queue = f"bench-intake-{uuid.uuid4().hex[:8]}"
    routes = [
        {
            "source": "rabbitmq",
            "queue": queue,
            "domain": "core",
            "workflow": WORKFLOW,
            "action": "transition",
            "transitionKey": "bump",
        }
    ]
    with Connection(AMQP_URL) as amqp:
        queues_declare(amqp.default_channel, queue)
        producer = Producer(amqp.default_channel)
        for n in range(EVENTS):
            producer.publish(
                json.dumps(_cloud_event("r", n)).encode(),
                routing_key=queue,
                content_type="application/cloudevents+json",
                content_encoding="utf-8",
                delivery_mode=2,
            )
    environment = {
        **os.environ,
        "DATABASE_URL": bench_database_url(),
        "VNEXT_EVENT_ROUTES": json.dumps(routes),
        "VNEXT_JOB_DISPATCH": "celery",
        "CELERY_BROKER_URL": JOBS_BROKER_URL,
        "LOG_FORMAT": "plain",
        "PYTHONUNBUFFERED": "1",
    }
    environment.pop("DJANGO_SETTINGS_MODULE", None)
    before = _receipt_count()
    with tempfile.NamedTemporaryFile(prefix="bench-consume-", suffix=".log") as log:
        consumer = subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "events_consume",
                "--concurrency",
                str(CONSUMER_THREADS),
            ],
            cwd=ROOT,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while Path(log.name).read_bytes().count(ROUTE_LOG_LINE) < CONSUMER_THREADS:
                assert consumer.poll() is None, Path(log.name).read_text()[-3000:]
                assert time.monotonic() < deadline, "events_consume did not start"
                time.sleep(0.01)
            started = time.perf_counter()
            deadline = time.monotonic() + 600
            while _receipt_count() - before < EVENTS:
                assert consumer.poll() is None, Path(log.name).read_text()[-3000:]
                assert time.monotonic() < deadline, "the consumer stalled"
                time.sleep(0.02)
            rate = EVENTS / (time.perf_counter() - started)
        finally:
            consumer.terminate()
            consumer.wait(timeout=30)
    with Connection(AMQP_URL) as amqp:
        # kombu's stubs type it as StdChannel; py-amqp's channel has queue_declare.
        channel: Any = amqp.channel()
        dead = channel.queue_declare(queue=dead_letter_queue(queue), passive=True).message_count
        for name in (queue, dead_letter_queue(queue), retry_queue(queue)):
            Queue(name, channel=channel).delete()
    assert dead == 0, f"{dead} events dead-lettered"
    return rate


def main() -> None:
    """Measure both paths; record RabbitMQ's events/s against HTTP's."""
    prepare_database()
    publish(intake_workflow(WORKFLOW))
    _instances("h")
    _instances("r")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE instances_instance")
    redis.Redis.from_url(JOBS_BROKER_URL).flushdb()
    try:
        http_rate = _over_http()
        http_jobs = _run_transitions()
        _check_moved("h")
        broker_rate = _from_rabbitmq()
        broker_jobs = _run_transitions()
        _check_moved("r")
    finally:
        redis.Redis.from_url(JOBS_BROKER_URL).flushdb()
    print(
        f"{EVENTS} events into transitions: RabbitMQ via events_consume ({CONSUMER_THREADS} "
        f"threads) {broker_rate:.0f}/s accepted, POST .../events ({HTTP_CLIENTS} clients, "
        f"{HTTP_WORKERS} server processes) {http_rate:.0f}/s; their transitions then ran at "
        f"{broker_jobs:.0f}/s and {http_jobs:.0f}/s (one job thread)"
    )
    record(
        f"events from RabbitMQ, {EVENTS}, accepted",
        broker_rate,
        "/s",
        baseline="POST .../events over HTTP",
        baseline_value=http_rate,
        target="report",
    )
