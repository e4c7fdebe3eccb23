"""The pub/sub task (type 4) end to end over HTTP, against the RabbitMQ and Redis running here:
the input handler's value is published as a CloudEvent 1.0 to the named target of settings (a
queue bound to the exchange receives it; XRANGE reads the stream entry), the output handler
sees the standard response, the journal keeps it; a target that is down fails the task with
`Task:PubSub:Unavailable` within its timeout, which an error boundary matching the code turns
into a fault with an incident."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any, cast

import kombu
import pytest
import redis

from instances.models import Instance, InstanceTask
from tests.engine.builders import task_component
from tests.instances.answers import fault_code
from tests.integration.task_targets_support import (
    AMQP_URL,
    REDIS_URL,
    abort_on,
    active_incident,
    answer_of,
    calls_workflow,
    closed_port,
    publish,
    reference,
    run_call,
)

pytestmark = pytest.mark.django_db

MAPPING = """
def input_handler(task, context):
    return ScriptResponse(data={"order": context.instance.data["customer"], "amount": 12.5})

def output_handler(context):
    body = context.body
    return {
        "published": body["data"]["Published"] if body["data"] else False,
        "messageId": (body["metadata"] or {}).get("MessageId"),
        "target": [body["metadata"]["PubSubName"], body["metadata"]["Topic"]],
        "ok": body["is_success"],
    }
"""
METADATA = {"priority": "high", "cloudevent.type": "com.example.order.created"}


def pubsub_task(target: str, topic: str) -> dict[str, Any]:
    return task_component(
        "publish-order", "4", {"pubSubName": target, "topic": topic, "metadata": METADATA}
    )


@pytest.fixture
def bound_queue() -> Iterator[tuple[kombu.Connection, kombu.Queue, str]]:
    """An exchange and a queue bound to it for `orders.#`, deleted afterwards."""
    suffix = uuid.uuid4().hex[:8]
    conn = kombu.Connection(AMQP_URL)
    exchange = kombu.Exchange(f"vnext.test.tasks.{suffix}", type="topic", durable=True)
    queue = kombu.Queue(f"vnext.test.tasks.{suffix}", exchange=exchange, routing_key="orders.#")
    queue(conn.channel()).declare()
    yield conn, queue, exchange.name
    channel = conn.channel()
    queue(channel).delete()
    exchange(channel).delete()
    conn.release()


def received(conn: kombu.Connection, queue: kombu.Queue) -> list[kombu.Message]:
    messages: list[kombu.Message] = []
    consumer = kombu.Consumer(conn.channel(), queues=[queue], on_message=messages.append)
    with consumer, contextlib.suppress(TimeoutError):
        conn.drain_events(timeout=2)
    for message in messages:
        message.ack()
    return messages


def test_a_published_cloud_event_reaches_a_queue_bound_to_the_exchange(
    operator_client, settings, bound_queue
):
    conn, queue, exchange = bound_queue
    settings.VNEXT = {
        **settings.VNEXT,
        "PUBSUB_TARGETS": {
            "orders-bus": {"kind": "rabbitmq", "url": AMQP_URL, "exchange": exchange}
        },
    }
    publish(
        pubsub_task("orders-bus", "orders.created"),
        calls_workflow(reference("publish-order", MAPPING)),
    )
    instance_id, response = run_call(operator_client)
    assert response.status_code == 200, response.json()
    data = response.json()["attributes"]
    message_id = data["messageId"]
    assert data == {
        "customer": "c-9",
        "published": True,
        "messageId": message_id,
        "target": ["orders-bus", "orders.created"],
        "ok": True,
    }
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert (journal.task_key, journal.status, journal.error_code) == (
        "publish-order",
        "succeeded",
        "",
    )
    assert answer_of(journal)["metadata"] == {
        "PubSubName": "orders-bus",
        "Topic": "orders.created",
        "MessageId": message_id,
    }
    assert answer_of(journal)["data"]["Message"] == "Event published successfully"
    [message] = received(conn, queue)
    event = json.loads(cast(bytes, message.body))
    assert message.properties["message_id"] == message_id == event["id"]
    assert message.content_type == "application/cloudevents+json"
    assert message.properties["delivery_mode"] == 2
    assert message.headers == {"priority": "high"}
    assert event["specversion"] == "1.0"
    assert event["type"] == "com.example.order.created"
    assert event["source"] == f"/core/workflows/calls/instances/{instance_id}"
    assert (event["topic"], event["pubsubname"]) == ("orders.created", "orders-bus")
    assert event["data"] == {"order": "c-9", "amount": 12.5}


def test_a_published_cloud_event_is_a_redis_stream_entry(operator_client, settings):
    stream = f"vnext.test.tasks.{uuid.uuid4().hex[:8]}"
    settings.VNEXT = {
        **settings.VNEXT,
        "PUBSUB_TARGETS": {"audit": {"kind": "redis-streams", "url": REDIS_URL, "maxlen": 100}},
    }
    client = redis.Redis.from_url(REDIS_URL)
    try:
        publish(pubsub_task("audit", stream), calls_workflow(reference("publish-order", MAPPING)))
        instance_id, response = run_call(operator_client)
        assert response.status_code == 200, response.json()
        data = response.json()["attributes"]
        [(entry_id, fields)] = cast(list[tuple[bytes, dict[bytes, bytes]]], client.xrange(stream))
    finally:
        client.delete(stream)
    assert data["messageId"] == entry_id.decode()
    assert (data["published"], data["target"]) == (True, ["audit", stream])
    event = json.loads(fields[b"data"])
    assert fields[b"id"].decode() == event["id"]
    assert fields[b"type"] == b"com.example.order.created"
    assert fields[b"priority"] == b"high"
    assert event["data"] == {"order": "c-9", "amount": 12.5}
    assert event["source"].endswith(f"/instances/{instance_id}")
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert journal.status == "succeeded"
    assert answer_of(journal)["data"]["EventId"] == event["id"]


@pytest.mark.parametrize(
    ("kind", "url"),
    [
        pytest.param("rabbitmq", "amqp://guest:guest@127.0.0.1:{port}//", id="rabbitmq"),
        pytest.param("redis-streams", "redis://127.0.0.1:{port}/0", id="redis-streams"),
    ],
)
def test_a_target_that_is_down_fails_the_task_and_the_boundary_matching_the_code_faults(
    operator_client, settings, kind, url
):
    code = "Task:PubSub:Unavailable"
    target = {"kind": kind, "url": url.format(port=closed_port()), "timeout_seconds": 2}
    settings.VNEXT = {**settings.VNEXT, "PUBSUB_TARGETS": {"bus": {**target, "exchange": "x"}}}
    publish(
        pubsub_task("bus", "orders.created"),
        calls_workflow(reference("publish-order", MAPPING, **abort_on(code))),
    )
    started = time.monotonic()
    instance_id, response = run_call(operator_client)
    assert time.monotonic() - started < 10
    assert fault_code(response) == code
    row = Instance.objects.get(pk=instance_id)
    assert (row.status, row.current_state) == ("F", "idle")
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert (journal.status, journal.error_code) == ("failed", code)
    assert answer_of(journal)["is_success"] is False
    assert "failed" in journal.error_message
    incident = active_incident(operator_client, instance_id)
    assert (incident["errorCode"], incident["boundaryAction"], incident["boundaryLevel"]) == (
        code,
        "Abort",
        "Task",
    )
