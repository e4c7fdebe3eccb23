"""The RabbitMQ transport of the intake (AMQP through kombu): one consumer of one queue with
`prefetch` messages in flight, handled one after the other in arrival order.

- A message is acknowledged after `message_process` returned, so after its transaction
  committed; a crash before the acknowledgement has the broker redeliver it, and its receipt
  makes that a no-op.
- Dead letters: `<queue>.dead` (declared here), a copy of the message with the reason in its
  headers (`x-vnext-error`, `x-vnext-error-code`, ...), published with a publisher confirm
  before the original is acknowledged (a crash in between dead-letters it twice, never zero).
- Retries: `<queue>.retry` holds the copy for its delay (per-message TTL), then dead-letters it
  back to `<queue>` through the default exchange, `x-vnext-attempts` counting; the retried
  message goes to the queue's tail.
- Transient failures (database down) are tried again in place; at a stop the message is
  rejected back to the queue.

Delivery callbacks only queue the message: py-amqp may deliver while a publish waits for its
confirm, and handling there would nest one message inside another."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Sequence
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any

from kombu import Connection, Consumer, Producer, Queue
from kombu.message import Message

from instances.intake.consumer import (
    ACK,
    DEAD,
    RETRY,
    Disposition,
    message_process,
    retry_delay_seconds,
)
from instances.intake.messages import BrokerMessage, text_of
from instances.intake.routes import RABBITMQ, EventRoute

logger = logging.getLogger("vnext.intake")

ATTEMPTS_HEADER = "x-vnext-attempts"
_RECONNECT_CAP_SECONDS = 30.0
# A dead letter's reason is for people: long enough to read, short enough for a header.
_MAX_ERROR_CHARS = 2000


def dead_letter_queue(queue: str) -> str:
    """Where `queue`'s dead letters go."""
    return f"{queue}.dead"


def retry_queue(queue: str) -> str:
    """Where `queue`'s retried messages wait for their next attempt."""
    return f"{queue}.retry"


def queues_declare(channel: Any, queue: str) -> Queue:
    """Declare `queue` (durable), its dead-letter queue and its retry queue; the first."""
    source = Queue(queue, durable=True, channel=channel)
    source.declare()
    Queue(dead_letter_queue(queue), durable=True, channel=channel).declare()
    Queue(
        retry_queue(queue),
        durable=True,
        channel=channel,
        queue_arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": queue},
    ).declare()
    return source


class RabbitConsumer:
    """Consume `queue` at `url` until `stop` is set (reconnecting after a lost connection)."""

    def __init__(
        self,
        *,
        url: str,
        queue: str,
        routes: Sequence[EventRoute],
        prefetch: int,
        stop: threading.Event,
    ) -> None:
        self.url = url
        self.queue = queue
        self.routes = routes
        self.prefetch = prefetch
        self.stop = stop

    def run(self) -> None:
        """Consume until stopped; a lost connection is opened again with backoff."""
        wait = 0.5
        while not self.stop.is_set():
            connection = Connection(self.url, transport_options={"confirm_publish": True})
            try:
                with connection:
                    self._consume(connection)
                return
            except connection.recoverable_connection_errors + connection.connection_errors as exc:
                logger.warning("RabbitMQ %s: %s; reconnecting in %.1fs", self.queue, exc, wait)
            if self.stop.wait(wait):
                return
            wait = min(wait * 2, _RECONNECT_CAP_SECONDS)

    def _consume(self, connection: Connection) -> None:
        inbox: deque[Message] = deque()
        channel = connection.channel()
        source = queues_declare(channel, self.queue)
        # Publishing (dead letters, retries) on a channel of its own, in confirm mode.
        producer = Producer(connection.channel())
        consumer = Consumer(
            channel,
            queues=[source],
            on_message=inbox.append,
            prefetch_count=self.prefetch,
            no_ack=False,
        )
        consumer.consume()
        logger.info("consuming RabbitMQ queue %s (prefetch %d)", self.queue, self.prefetch)
        try:
            while not self.stop.is_set():
                if not inbox:
                    try:
                        connection.drain_events(timeout=1.0)
                    except TimeoutError:
                        continue
                while inbox and not self.stop.is_set():
                    self._handle(inbox.popleft(), producer)
        finally:
            # What was delivered but not handled goes back to the queue now, in its order (on
            # a lost connection the broker does so itself).
            errors = connection.connection_errors + connection.channel_errors
            with suppress(*errors):
                for message in inbox:
                    if not message.acknowledged:
                        message.requeue()
                consumer.cancel()

    def _handle(self, message: Message, producer: Producer) -> None:
        received = broker_message(message)
        disposition = message_process(
            received, source=RABBITMQ, address=self.queue, routes=self.routes, stop=self.stop
        )
        if disposition.verdict == ACK:
            message.ack()
        elif disposition.verdict == DEAD:
            self._republish(message, producer, dead_letter_queue(self.queue), received, disposition)
            message.ack()
        elif disposition.verdict == RETRY:
            delay = retry_delay_seconds(received.attempts)
            self._republish(
                message, producer, retry_queue(self.queue), received, disposition, delay
            )
            message.ack()
        else:  # transient, and told to stop: the broker redelivers it
            message.requeue()

    def _republish(
        self,
        message: Message,
        producer: Producer,
        queue: str,
        received: BrokerMessage,
        disposition: Disposition,
        delay: float | None = None,
    ) -> None:
        headers: dict[str, Any] = dict(message.headers or {})
        headers.update(
            {
                "x-vnext-queue": self.queue,
                "x-vnext-reason": disposition.reason,
                "x-vnext-error": disposition.detail[:_MAX_ERROR_CHARS],
                "x-vnext-error-code": disposition.error_code,
                "x-vnext-route": disposition.route,
                "x-vnext-failed-at": datetime.now(UTC).isoformat(),
                # The retried copy is the next attempt; a dead letter keeps the count it had.
                ATTEMPTS_HEADER: received.attempts + (1 if delay is not None else 0),
            }
        )
        properties = message.properties or {}
        optional: dict[str, Any] = {
            key: properties[key]
            for key in ("message_id", "correlation_id", "type", "app_id", "timestamp")
            if properties.get(key) is not None
        }
        producer.publish(
            message.body,
            exchange="",
            routing_key=queue,
            headers=headers,
            content_type=message.content_type or "application/octet-stream",
            content_encoding=message.content_encoding or "binary",
            delivery_mode=2,
            expiration=delay,
            retry=False,
            **optional,
        )


def broker_message(message: Message) -> BrokerMessage:
    """The intake's view of an AMQP message."""
    headers = {str(key): text_of(value) for key, value in (message.headers or {}).items()}
    try:
        attempts = max(int(headers.get(ATTEMPTS_HEADER) or 1), 1)
    except ValueError:
        attempts = 1
    properties = message.properties or {}
    return BrokerMessage(
        body=message.body if isinstance(message.body, bytes) else str(message.body).encode(),
        headers=headers,
        content_type=message.content_type or "",
        publisher_id=str(properties.get("message_id") or ""),
        broker_id=str(properties.get("message_id") or message.delivery_tag),
        attempts=attempts,
    )
