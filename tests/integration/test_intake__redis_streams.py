"""`events_consume` on a real Redis stream: 100 CloudEvents (structured and binary mode) start
100 instances; the consumer is SIGKILLed with entries read and not acknowledged, and started
again under another consumer name, which takes those entries over (XAUTOCLAIM) once they are
idle: every event applied exactly once, the poison entry in `<stream>:dead`."""

from __future__ import annotations

import json
import socket
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from instances.intake.redis_streams import dead_letter_stream
from instances.models import Instance
from tests.instances.workflows import publish
from tests.integration.intake_support import (
    ConsumerProcess,
    intake_workflow,
    receipts,
    run_jobs_until_settled,
    wait_for,
)

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.concurrency,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]
REDIS_URL = "redis://127.0.0.1:6379/0"
EVENTS = 100
GROUP = "vnext-test"


@pytest.fixture
def stream() -> Iterator[str]:
    name = f"intake-test-{uuid.uuid4().hex[:10]}"
    yield name
    redis.Redis.from_url(REDIS_URL).delete(name, dead_letter_stream(name))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def pending_of(client: redis.Redis, stream: str, consumer: str) -> int:
    summary: Any = client.xpending(stream, GROUP)
    return sum(
        int(row["pending"]) for row in summary["consumers"] if row["name"].decode() == consumer
    )


def test_a_killed_consumers_entries_are_taken_over_and_applied_once(stream, tmp_path: Path):
    publish(intake_workflow())
    client = redis.Redis.from_url(REDIS_URL)
    for n in range(1, EVENTS + 1):
        if n % 2:
            cloud_event = {"specversion": "1.0", "id": f"r-{n}", "type": "t", "data": {"n": n}}
            client.xadd(stream, {"data": json.dumps(cloud_event)})
        else:
            binary: dict[Any, Any] = {"ce-specversion": "1.0", "ce-id": f"r-{n}", "ce-type": "t"}
            client.xadd(stream, {**binary, "data": json.dumps({"n": n})})
        if n == EVENTS // 2:
            client.xadd(stream, {"data": "not json at all", "ce-id": "poison"})
    routes = [{"source": "redis", "stream": stream, "workflow": "intake-start", "action": "start"}]
    env = {
        "VNEXT_EVENT_REDIS_URL": REDIS_URL,
        "VNEXT_EVENT_REDIS_GROUP": GROUP,
        "VNEXT_EVENT_REDIS_CLAIM_IDLE_SECONDS": "1",
    }
    consumer = ConsumerProcess(tmp_path / "consumer.log", routes, 1, **env)
    consumer.start("--consumer-name", "first", "--prefetch", "10")
    # Killed holding entries it read and did not acknowledge.
    wait_for(
        lambda: receipts() >= 30 and pending_of(client, stream, "first-0") >= 3,
        30,
        "30 events applied, entries in hand",
    )
    consumer.kill()
    held = pending_of(client, stream, "first-0")
    applied_at_kill = receipts()
    assert held > 0
    assert applied_at_kill < EVENTS

    port = free_port()
    consumer.start("--consumer-name", "second", "--prefetch", "10", "--metrics-port", str(port))
    wait_for(lambda: receipts() == EVENTS, 30, "every event applied")
    wait_for(lambda: client.xlen(dead_letter_stream(stream)) == 1, 10, "the poison dead")
    wait_for(lambda: client.xpending(stream, GROUP)["pending"] == 0, 10, "all acknowledged")
    # The second process's own figures: the events it applied (the rest were the first's).
    scraped = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    labels = 'route="core/intake-start:start",source="redis"'
    assert f"vnext_events_consumed_total{{{labels}}} {float(EVENTS - applied_at_kill)}" in scraped
    assert consumer.stop() == 0
    assert pending_of(client, stream, "first-0") == 0  # taken over, then acknowledged

    started = Instance.objects.filter(workflow_key="intake-start")
    assert started.count() == EVENTS  # keyless starts: a second application is a second one
    assert set(started.values_list("created_by", flat=True)) == {f"broker:redis:{stream}"}
    run_jobs_until_settled()
    assert Counter(instance.data.get("n") for instance in started) == Counter(range(1, EVENTS + 1))

    entries: Any = client.xrange(dead_letter_stream(stream))
    [(_entry_id, fields)] = entries
    dead = {key.decode(): value.decode() for key, value in fields.items()}
    assert dead["data"] == "not json at all"
    assert dead["vnext-reason"] == "undecodable"
    assert "not JSON" in dead["vnext-error"]
