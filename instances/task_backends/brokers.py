"""The pub/sub task's targets (`Publisher`): the outbox relay's publishers, one per target, used
one publish at a time (a kombu channel is not shared between threads). RabbitMQ: a persistent
message to the target's exchange with the topic as routing key, publisher confirms, the
CloudEvent id as `message_id`, the metadata as AMQP headers. Redis Streams: one XADD to the
stream named by the topic (the relay's fields: `data`, `id`, `type`, after the metadata),
trimmed to about the target's `maxlen`; the entry id is the message id."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import amqp.exceptions
import kombu.exceptions
import redis
from django.core.serializers.json import DjangoJSONEncoder

from instances.engine.ports import TargetUnavailable
from instances.outbox_relay import RabbitMqPublisher, RedisStreamPublisher
from instances.task_backends.config import timeout_of

logger = logging.getLogger("vnext.tasks.pubsub")

# What a broker that is down, refuses or does not confirm in time raises.
BROKER_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    kombu.exceptions.KombuError,
    amqp.exceptions.AMQPError,
    amqp.exceptions.MessageNacked,
    redis.RedisError,
)


def encoded(event: dict[str, Any]) -> bytes:
    """A CloudEvent as compact JSON."""
    return json.dumps(event, cls=DjangoJSONEncoder, separators=(",", ":")).encode()


class RabbitMqTarget:
    """A `Publisher` on a RabbitMQ exchange."""

    def __init__(self, name: str, entry: dict[str, Any]) -> None:
        self.name = name
        self.timeout = timeout_of(entry)
        self._publisher = RabbitMqPublisher({**entry, "timeout_seconds": self.timeout})
        self._lock = threading.Lock()

    def publish(self, topic: str, event: dict[str, Any], headers: dict[str, str]) -> str:
        message_id = str(event["id"])
        with self._lock:
            try:
                self._publisher.send(
                    encoded(event), routing_key=topic, message_id=message_id, headers=headers
                )
            except BROKER_ERRORS as exc:
                self._publisher.close()  # the next publish connects again
                raise TargetUnavailable(_described(exc, self.timeout)) from exc
        return message_id

    def close(self) -> None:
        """Drop the connection."""
        with self._lock:
            self._publisher.close()


class RedisStreamsTarget:
    """A `Publisher` on Redis Streams: the topic is the stream."""

    def __init__(self, name: str, entry: dict[str, Any]) -> None:
        self.name = name
        self.timeout = timeout_of(entry)
        self._publisher = RedisStreamPublisher({**entry, "timeout_seconds": self.timeout})

    def publish(self, topic: str, event: dict[str, Any], headers: dict[str, str]) -> str:
        try:
            return self._publisher.send(
                encoded(event),
                stream=topic,
                message_id=str(event["id"]),
                event_type=str(event.get("type") or ""),
                headers=headers,
            )
        except BROKER_ERRORS as exc:
            raise TargetUnavailable(_described(exc, self.timeout)) from exc

    def close(self) -> None:
        """Drop the pooled connections."""
        self._publisher.close()


def _described(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, TimeoutError | redis.TimeoutError):
        return f"no answer within {timeout:g} s"
    return str(exc) or type(exc).__name__
