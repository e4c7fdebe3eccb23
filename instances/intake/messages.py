"""A broker message as the intake sees it, and its CloudEvent: structured mode (a JSON body
with `specversion`, `id`, `data`) or binary mode (the attributes as `ce-*` headers or stream
fields, the body being `data`); a plain JSON object is an event too (its id: `x-event-id`, the
broker's message id, else its content hash, as `instances.events.unwrap` does)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

STRUCTURED, BINARY, PLAIN = "structured", "binary", "plain"
# How binary-mode attributes are spelled: `ce-id` (HTTP, Kafka, most AMQP clients), `ce_id`,
# and the AMQP binding's `cloudEvents:id` / `cloudEvents_id`; all read as `ce-id`.
_ATTRIBUTE_PREFIXES = ("ce-", "ce_", "cloudevents:", "cloudevents_")


class PoisonMessage(Exception):
    """The message can never be an event (not UTF-8, not JSON, not an object)."""


@dataclass(frozen=True)
class BrokerMessage:
    """What a transport received: the raw body, its headers (application properties or
    stream fields besides the body), the id its publisher gave it (AMQP `message_id`), the
    broker's own id of this delivery (a stream entry id; for logs) and how often it was tried."""

    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = ""
    publisher_id: str = ""
    broker_id: str = ""
    attempts: int = 1


@dataclass(frozen=True)
class CloudEvent:
    """What `event_deliver` takes (`body`, `headers`), with the mode and type for routing."""

    body: dict[str, Any]
    headers: dict[str, str]
    mode: str
    event_type: str | None


def attribute_headers(headers: dict[str, Any]) -> dict[str, str]:
    """The binary-mode attributes among `headers`, as `ce-<name>` (lower-case)."""
    found: dict[str, str] = {}
    for name, value in headers.items():
        lowered = str(name).lower()
        for prefix in _ATTRIBUTE_PREFIXES:
            if lowered.startswith(prefix) and len(lowered) > len(prefix):
                text = value.decode() if isinstance(value, bytes) else str(value)
                found["ce-" + lowered[len(prefix) :]] = text
                break
    return found


def cloud_event(message: BrokerMessage) -> CloudEvent:
    """The message's event; PoisonMessage when its body is not a JSON object."""
    try:
        text = message.body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PoisonMessage(f"the body is not UTF-8: {exc}") from None
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise PoisonMessage(f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise PoisonMessage(f"the body is a JSON {type(body).__name__}, not an object")
    attributes = attribute_headers(message.headers)
    if attributes.get("ce-id") and attributes.get("ce-specversion"):
        # Binary mode: the body is the event's data; `unwrap` takes the id from `ce-id`.
        return CloudEvent(body, attributes, BINARY, attributes.get("ce-type"))
    if "specversion" in body and "id" in body:
        event_type = body.get("type")
        return CloudEvent(body, {}, STRUCTURED, str(event_type) if event_type else None)
    # A plain object: the id a publisher gave (`x-event-id`, the AMQP message id), else
    # `unwrap` hashes the content, so an identical redelivery is still the same event.
    given = message.headers.get("x-event-id") or message.publisher_id
    return CloudEvent(body, {"x-event-id": str(given)} if given else {}, PLAIN, None)


def text_of(value: Any) -> str:
    """A broker header's or field's value as text (bytes read as UTF-8)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
