"""The outbox relay for real: `manage.py outbox_relay` as a subprocess on the test database,
publishing to the RabbitMQ and Redis on this machine, SIGKILLed in the middle and started again.
Every event of every instance arrives (a consumer here counts them by CloudEvent id), and the
first arrivals of each instance's events keep the order its changes committed in; duplicates
(the batch a killed relay had published but not yet marked) are allowed, counted and reported.
A second relay started beside the first stands by (the advisory lock) and takes over when the
first is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import kombu
import pytest
import redis
from django.db import connection

from instances.models import OutboxEvent
from instances.services import RequestInfo, instance_start, instance_transition
from tests.engine.builders import state, transition, workflow
from tests.instances.workflows import publish

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]
ROOT = Path(__file__).resolve().parents[2]
AMQP_URL = os.environ.get("VNEXT_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
REDIS_URL = os.environ.get("VNEXT_TEST_OUTBOX_REDIS_URL", "redis://127.0.0.1:6379/13")
INFO = RequestInfo(actor="relay-test")
FLOW = "relayed"
# Each instance's life: started, state-entered draft, submitted, approved, completed.
EVENTS_PER_INSTANCE = 5
PREFIX = "io.vnext.instance."


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class RelayProcess:
    """`manage.py outbox_relay` on the test database, its output in `log`."""

    def __init__(self, log: Path, targets: dict[str, Any], batch_size: int) -> None:
        self.log = log
        self.targets = targets
        self.batch_size = batch_size
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> RelayProcess:
        database = "postgres://{USER}@{HOST}:{PORT}/{NAME}".format(
            **{k: connection.settings_dict[k] or "" for k in ("USER", "HOST", "PORT", "NAME")}
        )
        env = {
            **os.environ,
            "DATABASE_URL": database,
            "VNEXT_OUTBOX_TARGETS": json.dumps(self.targets),
            "VNEXT_OUTBOX_BATCH_SIZE": str(self.batch_size),
            "VNEXT_OUTBOX_POLL_SECONDS": "0.05",
            "PYTHONUNBUFFERED": "1",
        }
        env.pop("DJANGO_SETTINGS_MODULE", None)
        handle = self.log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "outbox_relay"],
            cwd=ROOT,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
        return self

    def says(self, text: str) -> bool:
        return self.log.exists() and text.encode() in self.log.read_bytes()

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> int | None:
        """SIGTERM, as a supervisor stops it: the exit code (None if it had to be killed)."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.terminate()
        try:
            return self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return None


@pytest.fixture
def relays(tmp_path: Path) -> Iterator[list[RelayProcess]]:
    started: list[RelayProcess] = []
    yield started
    for relay in started:
        relay.stop()


def subscribe(settings: Any, target: str) -> None:
    publish(
        workflow(
            [
                state("draft", 1, [transition("submit", "submitted")]),
                state("submitted", 2, [transition("approve", "approved")]),
                state("approved", 3, subType=1),
            ],
            key=FLOW,
        )
    )
    settings.VNEXT = {
        **settings.VNEXT,
        "OUTBOX_SUBSCRIPTIONS": {f"core/{FLOW}": [{"target": target, "types": ["*"]}]},
    }


def lives(count: int, *, between: Callable[[int], None] = lambda _: None) -> list[str]:
    """`count` instances through their whole life, a hop of every instance at a time (so one
    instance's events are spread over the outbox); `between(n)` after each round."""
    ids = [
        str(instance_start(domain="core", workflow=FLOW, body={}, info=INFO).instance.id)
        for _ in range(count)
    ]
    between(0)
    for round_number, name in enumerate(("submit", "approve"), start=1):
        for instance_id in ids:
            instance_transition(
                domain="core",
                workflow=FLOW,
                ref=instance_id,
                transition_key=name,
                body={},
                info=INFO,
            )
        between(round_number)
    return ids


def expected_order(ids: list[str]) -> dict[str, list[str]]:
    """Each instance's event ids in the outbox's (commit) order."""
    order: dict[str, list[str]] = defaultdict(list)
    rows = OutboxEvent.objects.filter(instance_id__in=ids).order_by("id")
    for instance_id, event_id in rows.values_list("instance_id", "event_id"):
        order[str(instance_id)].append(str(event_id))
    return order


def first_arrivals(events: list[dict[str, Any]]) -> tuple[dict[str, list[str]], int]:
    """Each instance's event ids in the order they first arrived, and how many duplicates."""
    seen: set[str] = set()
    arrived: dict[str, list[str]] = defaultdict(list)
    duplicates = 0
    for event in events:
        if event["id"] in seen:
            duplicates += 1
            continue
        seen.add(event["id"])
        arrived[event["instanceid"]].append(event["id"])
    return arrived, duplicates


# --- RabbitMQ --------------------------------------------------------------------------------


@pytest.fixture
def amqp() -> Iterator[tuple[kombu.Connection, kombu.Exchange, kombu.Queue]]:
    suffix = uuid.uuid4().hex[:8]
    conn = kombu.Connection(AMQP_URL)
    exchange = kombu.Exchange(f"vnext.test.events.{suffix}", type="topic", durable=True)
    queue = kombu.Queue(
        f"vnext.test.outbox.{suffix}", exchange=exchange, routing_key="core.#", durable=True
    )
    channel = conn.channel()
    queue(channel).declare()
    yield conn, exchange, queue
    channel = conn.channel()
    queue(channel).delete()
    exchange(channel).delete()
    conn.release()


def drain(conn: kombu.Connection, queue: kombu.Queue, into: list[dict[str, Any]]) -> None:
    """Take every message the queue holds now, in its order."""
    received: list[kombu.Message] = []
    with kombu.Consumer(conn.channel(), queues=[queue], on_message=received.append) as consumer:
        consumer.qos(prefetch_count=500)
        while True:
            try:
                conn.drain_events(timeout=0.5)
            except TimeoutError:
                break
            for message in received:
                assert message.properties["delivery_mode"] == 2  # persistent
                assert message.content_type == "application/cloudevents+json"
                into.append(json.loads(cast(bytes, message.body)))
                message.ack()
            received.clear()


def test_500_instances_events_arrive_in_order_across_a_relay_sigkill(
    settings, amqp, relays, tmp_path: Path
):
    conn, exchange, queue = amqp
    targets = {
        "bus": {
            "broker": "rabbitmq",
            "url": AMQP_URL,
            "exchange": exchange.name,
            "exchange_type": "topic",
        }
    }
    subscribe(settings, "bus")
    first = RelayProcess(tmp_path / "first.log", targets, batch_size=100).start()
    relays.append(first)
    wait_for(lambda: first.says("outbox relay: publishing bus"), 20, "the relay to start")
    published_before_kill: list[int] = []

    def kill_in_the_middle(round_number: int) -> None:
        if round_number == 1:
            wait_for(
                lambda: OutboxEvent.objects.filter(published_at__isnull=False).count() >= 400,
                15,
                "a part of the events published",
            )
            first.kill()
            published_before_kill.append(
                OutboxEvent.objects.filter(published_at__isnull=False).count()
            )

    ids = lives(500, between=kill_in_the_middle)
    total = 500 * EVENTS_PER_INSTANCE
    assert OutboxEvent.objects.count() == total
    assert published_before_kill[0] < total  # killed with events still to go
    second = RelayProcess(tmp_path / "second.log", targets, batch_size=100).start()
    relays.append(second)
    wait_for(
        lambda: not OutboxEvent.objects.filter(published_at__isnull=True).exists(),
        25,
        "every event published after the restart",
    )
    events: list[dict[str, Any]] = []
    drain(conn, queue, events)

    arrived, duplicates = first_arrivals(events)
    expected = expected_order(ids)
    print(f"rabbitmq: {len(events)} messages, {duplicates} duplicate(s), {total} events")
    assert sum(len(found) for found in arrived.values()) == total  # none lost
    assert len(events) == total + duplicates
    assert arrived == expected  # per-instance order of the first arrivals
    # The kinds of the first instance's events as they first arrived (a redelivery after the
    # kill may repeat some of them).
    first_of = {event["id"]: event for event in reversed(events)}
    kinds = [first_of[event_id]["type"].removeprefix(PREFIX) for event_id in arrived[ids[0]]]
    assert kinds == ["started", "state-entered", "state-entered", "state-entered", "completed"]
    sample = next(event for event in events if event["type"].endswith("completed"))
    assert sample["specversion"] == "1.0"
    assert sample["source"] == f"/core/workflows/{FLOW}/instances/{sample['instanceid']}"
    assert sample["data"]["status"] == "Completed"
    assert second.stop() == 0  # SIGTERM: a graceful stop
    assert second.says("outbox relay stopped")


# --- Redis Streams ---------------------------------------------------------------------------


@pytest.fixture
def stream() -> Iterator[tuple[redis.Redis, str]]:
    client = redis.Redis.from_url(REDIS_URL)
    name = f"vnext.test.outbox.{uuid.uuid4().hex[:8]}"
    yield client, name
    client.delete(name)


def test_a_standby_relay_takes_over_a_redis_stream_when_the_active_one_is_killed(
    settings, stream, relays, tmp_path: Path
):
    client, name = stream
    targets = {"stream": {"broker": "redis", "url": REDIS_URL, "stream": name, "maxlen": 100_000}}
    subscribe(settings, "stream")
    active = RelayProcess(tmp_path / "active.log", targets, batch_size=20).start()
    relays.append(active)
    wait_for(lambda: active.says("outbox relay: publishing stream"), 20, "the relay to start")
    standby = RelayProcess(tmp_path / "standby.log", targets, batch_size=20).start()
    relays.append(standby)
    wait_for(lambda: standby.says("standing by"), 20, "the second relay to stand by")

    def kill_the_active_one(round_number: int) -> None:
        if round_number == 1:
            wait_for(lambda: client.xlen(name) >= 100, 15, "a part of the events in the stream")
            active.kill()

    ids = lives(100, between=kill_the_active_one)
    total = 100 * EVENTS_PER_INSTANCE
    wait_for(
        lambda: not OutboxEvent.objects.filter(published_at__isnull=True).exists(),
        25,
        "every event published by the standby",
    )
    assert standby.says("outbox relay: publishing stream")
    entries = cast(list[tuple[bytes, dict[bytes, bytes]]], client.xrange(name))
    events = [json.loads(fields[b"data"]) for _, fields in entries]
    assert all(fields[b"id"].decode() == json.loads(fields[b"data"])["id"] for _, fields in entries)

    arrived, duplicates = first_arrivals(events)
    print(f"redis: {len(events)} entries, {duplicates} duplicate(s), {total} events")
    assert sum(len(found) for found in arrived.values()) == total
    assert arrived == expected_order(ids)
