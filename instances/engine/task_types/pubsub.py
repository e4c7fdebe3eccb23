"""Task type 4 (DaprPubSub): publish the input handler's value (else `config.data`) to `topic` of
the pub/sub target `pubSubName`, a name in settings (`PUBSUB_TARGETS`: RabbitMQ, whose topic is
the routing key on the target's exchange, or Redis Streams, whose topic is the stream), as a
structured CloudEvent 1.0 the broker confirmed. `metadata` goes with the message as headers
(AMQP headers, stream fields); `cloudevent.type`, `cloudevent.source`, `cloudevent.subject` and
`cloudevent.id` set those attributes of the event instead, as Dapr's metadata does.

The standard response is vNext's: `data` `{Published, Message, MessageId}`, `metadata`
`{PubSubName, Topic, MessageId}`. A target that is down, refuses or does not confirm in its
`timeout_seconds` fails with `Task:PubSub:Unavailable` (a response with `is_success` false, so
the output handler sees it); a name settings do not have, `Task:PubSub:UnknownTarget`."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from instances.engine.errors import Codes
from instances.engine.ports import TargetUnavailable
from instances.engine.task_types.base import StandardResponse, TaskCall, TaskFailure
from instances.engine.task_types.stores import setting, task_targets

# Metadata keys that set a CloudEvent attribute rather than travel as a header.
CLOUD_EVENT_METADATA = (
    "cloudevent.type",
    "cloudevent.source",
    "cloudevent.subject",
    "cloudevent.id",
)
DEFAULT_TYPE = "io.vnext.task.published"


def execute_pubsub(call: TaskCall) -> StandardResponse:
    """Publish one CloudEvent and answer with the broker's message id."""
    name = str(setting(call, "pub_sub_name", "pubSubName") or "")
    topic = str(setting(call, "topic", "topic") or "")
    data = call.input_data if call.input_data is not None else setting(call, "data", "data")
    given = setting(call, "metadata", "metadata") or {}
    metadata = {str(k): str(v) for k, v in given.items() if v is not None}
    targets = task_targets()
    publisher = targets.publisher(name) if targets is not None else None
    if publisher is None:
        raise TaskFailure(
            Codes.TASK_PUBSUB_UNKNOWN,
            f"pub/sub target {name!r} is not configured (VNEXT PUBSUB_TARGETS)",
        )
    event = cloud_event(call, name, topic, data, metadata)
    headers = {k: v for k, v in metadata.items() if k not in CLOUD_EVENT_METADATA}
    described = {"PubSubName": name, "Topic": topic}
    try:
        message_id = publisher.publish(topic, event, headers)
    except TargetUnavailable as exc:
        message = f"publishing to {name!r} topic {topic!r} failed: {exc}"
        failed = StandardResponse(
            status_code=None, is_success=False, error_message=message, metadata=described
        )
        raise TaskFailure(Codes.TASK_PUBSUB_UNAVAILABLE, message, failed) from exc
    return StandardResponse(
        status_code=200,
        data={
            "Published": True,
            "Message": "Event published successfully",
            "MessageId": message_id,
            "EventId": event["id"],
        },
        metadata={**described, "MessageId": message_id},
    )


def cloud_event(
    call: TaskCall, name: str, topic: str, data: Any, metadata: dict[str, str]
) -> dict[str, Any]:
    """The structured-mode CloudEvent 1.0 of one publish (Dapr's `topic` and `pubsubname`
    extension attributes included)."""
    parent = call.parent
    source = f"/{call.domain}/workflows/{call.workflow}"
    if parent is not None:
        source += f"/instances/{parent.instance_id}"
    event: dict[str, Any] = {
        "specversion": "1.0",
        "id": metadata.get("cloudevent.id") or str(uuid.uuid4()),
        "source": metadata.get("cloudevent.source") or source,
        "type": metadata.get("cloudevent.type") or DEFAULT_TYPE,
        "time": datetime.now(UTC).isoformat(),
        "datacontenttype": "application/json",
        "topic": topic,
        "pubsubname": name,
        "data": data,
    }
    subject = metadata.get("cloudevent.subject") or (str(parent.instance_id) if parent else "")
    if subject:
        event["subject"] = subject
    return event
