"""`events_consume` on a real RabbitMQ: 1,000 CloudEvents (half structured, half binary mode)
start 1,000 instances while the consumer process is SIGKILLed twice mid-stream and started
again; every event is applied exactly once, and the two poison messages (not JSON; refused by
the mapping) are in the dead-letter queue with their reasons. A SIGTERM stops it cleanly. An
event that comes before its instance is retried through `<queue>.retry` until it applies, or is
dead-lettered when its attempts run out."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection, Producer, Queue

from instances.intake.rabbitmq import dead_letter_queue, queues_declare, retry_queue
from instances.job_table import Job
from instances.models import Instance
from instances.services import RequestInfo, instance_start
from instances.status import JobKind
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
AMQP_URL = "amqp://guest:guest@127.0.0.1:5672//"
EVENTS = 1000
THREADS = 2
NOT_JSON = b'{"specversion": "1.0", "id": "poison-1", "data": {'


@pytest.fixture
def queue() -> Iterator[str]:
    name = f"intake-test-{uuid.uuid4().hex[:10]}"
    yield name
    with Connection(AMQP_URL) as connection:
        channel = connection.channel()
        for each in (name, dead_letter_queue(name), retry_queue(name)):
            Queue(each, channel=channel).delete()


def ready_count(connection: Connection, name: str) -> int:
    """Messages ready in `name` (not those a consumer holds)."""
    channel: Any = connection.default_channel  # py-amqp's channel
    declared = channel.queue_declare(queue=name, passive=True)
    return int(declared.message_count)


def publish_events(connection: Connection, queue: str) -> None:
    producer = Producer(connection.default_channel)
    for n in range(1, EVENTS + 1):
        event_id = f"evt-{n}"
        if n % 2:  # structured mode: the whole CloudEvent is the body
            body: Any = {
                "specversion": "1.0",
                "id": event_id,
                "type": "loan.requested",
                "source": "/loans",
                "data": {"n": n},
            }
            producer.publish(
                json.dumps(body).encode(),
                routing_key=queue,
                content_type="application/cloudevents+json",
                content_encoding="utf-8",
                delivery_mode=2,
            )
        else:  # binary mode: attributes in headers, the body is the data
            producer.publish(
                json.dumps({"n": n}).encode(),
                routing_key=queue,
                headers={
                    "ce-specversion": "1.0",
                    "ce-id": event_id,
                    "ce-type": "loan.requested",
                    "ce-source": "/loans",
                },
                content_type="application/json",
                content_encoding="utf-8",
                delivery_mode=2,
            )
        if n == EVENTS // 3:
            producer.publish(
                NOT_JSON, routing_key=queue, content_type="application/json", delivery_mode=2
            )
        if n == 2 * EVENTS // 3:
            poison = {"specversion": "1.0", "id": "poison-2", "data": {"explode": True}}
            producer.publish(
                json.dumps(poison).encode(),
                routing_key=queue,
                content_type="application/cloudevents+json",
                content_encoding="utf-8",
                delivery_mode=2,
            )


def dead_letters(connection: Connection, queue: str) -> list[tuple[bytes, dict[str, Any]]]:
    found = []
    channel: Any = connection.channel()
    while (message := channel.basic_get(queue=dead_letter_queue(queue), no_ack=True)) is not None:
        body = message.body  # py-amqp decodes a body with a content encoding
        found.append((body if isinstance(body, bytes) else body.encode(), dict(message.headers)))
    return found


def test_a_thousand_events_apply_once_across_two_kills(queue, tmp_path: Path):
    publish(intake_workflow())
    routes = [{"source": "rabbitmq", "queue": queue, "workflow": "intake-start", "action": "start"}]
    with Connection(AMQP_URL) as connection:
        queues_declare(connection.default_channel, queue)
        publish_events(connection, queue)
        consumer = ConsumerProcess(tmp_path / "consumer.log", routes, consumers=THREADS)
        args = ("--prefetch", "20", "--concurrency", str(THREADS))

        consumer.start(*args)
        wait_for(lambda: receipts() >= 250, 30, "250 events applied")
        consumer.kill()
        killed_first = receipts()
        consumer.start(*args)
        wait_for(lambda: receipts() >= killed_first + 250, 30, "250 more events applied")
        consumer.kill()
        killed_second = receipts()
        assert killed_first < killed_second < EVENTS  # both kills were mid-stream

        consumer.start(*args)
        wait_for(lambda: receipts() == EVENTS, 30, "every event applied")
        wait_for(lambda: ready_count(connection, dead_letter_queue(queue)) == 2, 10, "2 dead")
        assert consumer.stop() == 0  # SIGTERM: a clean stop
        # Nothing left behind: every message acknowledged (the stop returns unacked ones).
        assert ready_count(connection, queue) == 0
        assert ready_count(connection, retry_queue(queue)) == 0
        dead = dead_letters(connection, queue)

    # Exactly once: the starts carry no business key, so a second application of an event
    # would be a second instance.
    started = Instance.objects.filter(workflow_key="intake-start")
    assert started.count() == EVENTS
    assert set(started.values_list("created_by", flat=True)) == {f"broker:rabbitmq:{queue}"}
    start_jobs = Job.objects.filter(kind=JobKind.TRANSITION, instance_id__in=started.values("id"))
    assert (start_jobs.count(), start_jobs.values("instance_id").distinct().count()) == (
        EVENTS,
        EVENTS,
    )
    run_jobs_until_settled()
    numbers = Counter(instance.data.get("n") for instance in started)
    assert numbers == Counter(range(1, EVENTS + 1))
    assert set(started.values_list("status", "current_state")) == {("A", "open")}
    assert Job.objects.filter(kind=JobKind.EVENT_RECEIPT).count() == EVENTS

    by_reason = {headers["x-vnext-reason"]: (body, headers) for body, headers in dead}
    assert sorted(by_reason) == ["error", "undecodable"]
    body, headers = by_reason["undecodable"]
    assert body == NOT_JSON
    assert "not JSON" in headers["x-vnext-error"]
    body, headers = by_reason["error"]
    assert json.loads(body)["id"] == "poison-2"
    assert headers["x-vnext-error-code"] == "Script:100001"
    assert "cannot be mapped" in headers["x-vnext-error"]
    assert headers["x-vnext-queue"] == queue


def test_an_event_before_its_instance_is_retried_until_it_applies_or_runs_out(
    queue, tmp_path: Path
):
    """Through `<queue>.retry` and back: the event for `L-late` applies once its instance is
    started, the one for `nobody` is dead-lettered after its attempts."""
    publish(intake_workflow())
    routes = [
        {
            "source": "rabbitmq",
            "queue": queue,
            "workflow": "intake-start",
            "action": "transition",
            "transitionKey": "bump",
        }
    ]
    env = {"VNEXT_EVENT_MAX_ATTEMPTS": "4", "VNEXT_EVENT_RETRY_SECONDS": "0.3"}
    consumer = ConsumerProcess(tmp_path / "consumer.log", routes, 1, **env)
    with Connection(AMQP_URL) as connection:
        queues_declare(connection.default_channel, queue)
        producer = Producer(connection.default_channel)
        for key in ("L-late", "nobody"):
            event = {"specversion": "1.0", "id": f"bump-{key}", "data": {"order": key, "n": 1}}
            producer.publish(
                json.dumps(event).encode(),
                routing_key=queue,
                content_type="application/cloudevents+json",
                content_encoding="utf-8",
            )
        consumer.start()
        try:
            wait_for(lambda: b"tried again (attempt 1)" in consumer.log.read_bytes(), 10, "a retry")
            late = instance_start(
                domain="core",
                workflow="intake-start",
                body={"key": "L-late", "attributes": {}},
                info=RequestInfo(actor="test"),
            )
            wait_for(lambda: receipts() == 1, 10, "the late instance's event applied")
            wait_for(lambda: ready_count(connection, dead_letter_queue(queue)) == 1, 10, "dead")
        finally:
            assert consumer.stop() == 0
        [(body, headers)] = dead_letters(connection, queue)

    run_jobs_until_settled()
    assert Instance.objects.get(pk=late.instance.id).current_state == "bumped"
    assert json.loads(body)["id"] == "bump-nobody"
    assert (headers["x-vnext-reason"], headers["x-vnext-attempts"]) == ("unmatched", 4)
    assert "matched no instance" in headers["x-vnext-error"]
