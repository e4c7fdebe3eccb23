"""The outbox relay (`manage.py outbox_relay`, `make relay`): publishes the pending rows of the
outbox (instances/outbox.py) to their targets, RabbitMQ or Redis Streams, at least once and in
per-instance order.

Order. One relay at a time publishes a target: it holds a PostgreSQL advisory lock for it (a
second relay waits as a standby and takes over when the first one's session ends, a SIGKILL
included). It reads the target's oldest pending rows in id order (an instance's rows have ids in
the order its changes committed), publishes them in that order on one channel, waits for the
broker's confirms, and only then marks them published. A relay killed in between publishes the
unmarked rows again when it (or the standby) runs next: consumers may see an event twice, and
dedupe by the CloudEvent `id`; the first arrivals keep the per-instance order, because every run
publishes the oldest pending rows first and never skips one.

On the wire, every event is a structured-mode CloudEvent 1.0 (JSON, `application/cloudevents+
json`) with two extension attributes: `instanceid` and `sequence` (the outbox id, as text).
RabbitMQ: a persistent message (delivery mode 2) to the target's exchange, the routing key from
its template (`{domain}.{workflow}.{kind}` by default), `message_id` the event id, publisher
confirms on. Redis Streams: `XADD <stream> MAXLEN ~ <maxlen> * data <event> id <id> type <type>`,
a pipeline per batch; the reply to each XADD is its confirm.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from django.core.serializers.json import DjangoJSONEncoder
from django.db import DatabaseError, connection
from django.utils import timezone
from prometheus_client import Counter, Gauge

from instances.models import OutboxEvent
from instances.outbox import TYPE_PREFIX
from vnext.conf import vnext_setting

logger = logging.getLogger("vnext.outbox")

PUBLISHED = Counter(
    "vnext_outbox_published", "Outbox events the broker confirmed, by target", ["target"]
)
LAG = Gauge(
    "vnext_outbox_lag_seconds",
    "Age of the oldest event of the relay's last batch when the broker confirmed it",
    ["target"],
)
# How often a relay prunes published rows past their retention.
PRUNE_EVERY_SECONDS = 600.0
# The longest a relay waits after a failed publish or a lost database before trying again.
MAX_BACKOFF_SECONDS = 30.0


class Publisher(Protocol):
    """Sends a batch to a broker in order; returns once the broker confirmed every message,
    raises otherwise (nothing is marked published then)."""

    def publish(self, rows: list[OutboxEvent]) -> None:
        """Send `rows` in order and wait for their confirms."""
        ...

    def close(self) -> None:
        """Drop the broker connection (the next publish connects again)."""
        ...


def cloud_event(row: OutboxEvent) -> dict[str, Any]:
    """The structured-mode CloudEvent 1.0 of an outbox row."""
    return {
        "specversion": "1.0",
        "id": str(row.event_id),
        "source": row.source,
        "type": row.type,
        "subject": row.subject,
        "time": row.time.isoformat(),
        "datacontenttype": "application/json",
        "instanceid": str(row.instance_id),
        "sequence": str(row.id),
        "data": row.data,
    }


def _encoded(row: OutboxEvent) -> bytes:
    return json.dumps(cloud_event(row), cls=DjangoJSONEncoder, separators=(",", ":")).encode()


class RabbitMqPublisher:
    """A target on RabbitMQ through kombu: persistent messages, publisher confirms."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.url = str(config["url"])
        self.exchange_name = str(config.get("exchange") or "vnext.events")
        self.exchange_type = str(config.get("exchange_type") or "topic")
        self.routing_key = str(config.get("routing_key") or "{domain}.{workflow}.{kind}")
        # Connecting, and each confirm, may take this long (a publishing task's time limit).
        self.timeout = float(config.get("timeout_seconds") or 10)
        self._connection: Any = None
        self._producer: Any = None

    def _ensure(self) -> Any:
        import kombu  # the relay's dependency only: the web and the workers never load it

        if self._producer is None:
            self._connection = kombu.Connection(
                self.url, transport_options={"confirm_publish": True}, connect_timeout=self.timeout
            )
            exchange = kombu.Exchange(self.exchange_name, type=self.exchange_type, durable=True)
            channel = self._connection.channel()
            exchange(channel).declare()
            self._producer = kombu.Producer(channel, exchange=exchange, auto_declare=False)
        return self._producer

    def publish(self, rows: list[OutboxEvent]) -> None:
        """Each message waits for the broker's ack (`confirm_publish`); a nack raises."""
        for row in rows:
            data = row.data or {}
            self.send(
                _encoded(row),
                routing_key=self.routing_key.format(
                    domain=data.get("domain", ""),
                    workflow=data.get("workflow", ""),
                    kind=row.type.removeprefix(TYPE_PREFIX),
                    type=row.type,
                ),
                message_id=str(row.event_id),
            )

    def send(
        self,
        body: bytes,
        *,
        routing_key: str,
        message_id: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        """One persistent structured CloudEvent to the exchange, back once the broker acked it
        (a nack, or no confirm within `timeout`, raises); the pub/sub task's send too."""
        self._ensure().publish(
            body,
            routing_key=routing_key,
            delivery_mode=2,
            content_type="application/cloudevents+json",
            content_encoding="utf-8",
            message_id=message_id,
            headers=headers or {},
            retry=False,
            confirm_timeout=self.timeout,
        )

    def close(self) -> None:
        """Release the connection, ignoring a broken one."""
        if self._connection is not None:
            try:
                self._connection.release()
            except Exception:  # the connection is being dropped anyway
                logger.debug("closing the RabbitMQ connection failed", exc_info=True)
        self._connection = self._producer = None


class RedisStreamPublisher:
    """A target on a Redis stream: one pipelined XADD per event, trimmed to about `maxlen`."""

    def __init__(self, config: dict[str, Any]) -> None:
        import redis

        self.stream = str(config.get("stream") or "vnext.events")
        self.maxlen = int(config["maxlen"]) if config.get("maxlen") else None
        timeout = float(config["timeout_seconds"]) if config.get("timeout_seconds") else None
        self.client = redis.Redis.from_url(
            str(config["url"]),
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
        )

    def publish(self, rows: list[OutboxEvent]) -> None:
        """The pipeline's replies are the confirms: an error in any raises."""
        pipe = self.client.pipeline(transaction=False)
        for row in rows:
            pipe.xadd(
                self.stream,
                {"data": _encoded(row), "id": str(row.event_id), "type": row.type},
                maxlen=self.maxlen,
                approximate=True,
            )
        pipe.execute(raise_on_error=True)

    def send(
        self,
        body: bytes,
        *,
        stream: str,
        message_id: str,
        event_type: str,
        headers: dict[str, str] | None = None,
    ) -> str:
        """One XADD of a structured CloudEvent (the relay's fields, after any `headers`),
        trimmed to about `maxlen`; the entry id (the pub/sub task's send)."""
        fields = {**(headers or {}), "data": body, "id": message_id, "type": event_type}
        entry = self.client.xadd(stream, fields, maxlen=self.maxlen, approximate=True)  # type: ignore[arg-type]
        return entry.decode() if isinstance(entry, bytes) else str(entry)

    def close(self) -> None:
        """Drop the pooled connections."""
        self.client.connection_pool.disconnect()


PUBLISHERS: dict[str, Callable[[dict[str, Any]], Publisher]] = {
    "rabbitmq": RabbitMqPublisher,
    "redis": RedisStreamPublisher,
}


def target_problem(name: str, config: Any) -> str | None:
    """What makes an `OUTBOX_TARGETS` entry unusable (checked when the relay starts, so a
    mistake stops it at once rather than failing every batch), or None."""
    if not isinstance(config, dict):
        return f"OUTBOX_TARGETS[{name!r}] is an object"
    if str(config.get("broker", "")) not in PUBLISHERS:
        return (
            f"OUTBOX_TARGETS[{name!r}]: unknown broker {config.get('broker')!r} (rabbitmq or redis)"
        )
    if not config.get("url"):
        return f"OUTBOX_TARGETS[{name!r}] needs the broker's url"
    return None


def publisher_for(config: dict[str, Any]) -> Publisher:
    """The publisher of a target's settings (`broker`: `rabbitmq` or `redis`)."""
    broker = str(config.get("broker", ""))
    if broker not in PUBLISHERS:
        raise ValueError(f"unknown outbox broker {broker!r} (rabbitmq or redis)")
    return PUBLISHERS[broker](config)


def lock_key(target: str) -> int:
    """The advisory lock key of a target's relay (a signed 64-bit number)."""
    digest = hashlib.sha256(f"vnext-outbox-relay:{target}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def outbox_prune(*, retention: timedelta, chunk: int = 10_000) -> int:
    """Delete rows published before `retention` ago, `chunk` at a time; how many."""
    cutoff = timezone.now() - retention
    pruned = 0
    while True:
        ids = list(
            OutboxEvent.objects.filter(published_at__lt=cutoff).values_list("id", flat=True)[:chunk]
        )
        if not ids:
            return pruned
        pruned += OutboxEvent.objects.filter(id__in=ids).delete()[0]


@dataclass
class Relay:
    """Publishes the targets' pending rows until `stop` is set."""

    targets: dict[str, dict[str, Any]]
    batch_size: int = 500
    poll_seconds: float = 0.2
    retention: timedelta = timedelta(hours=24)
    make_publisher: Callable[[dict[str, Any]], Publisher] = publisher_for
    stop: threading.Event = field(default_factory=threading.Event)
    _held: set[str] = field(default_factory=set)
    _publishers: dict[str, Publisher] = field(default_factory=dict)
    _standby_logged: set[str] = field(default_factory=set)

    @classmethod
    def from_settings(cls, names: Iterable[str] | None = None) -> Relay:
        """A relay of the `OUTBOX_TARGETS` named (all of them when None)."""
        configured = dict(vnext_setting("OUTBOX_TARGETS") or {})
        wanted = list(names) if names else list(configured)
        missing = [name for name in wanted if name not in configured]
        if missing:
            raise ValueError(f"no OUTBOX_TARGETS entry for {', '.join(missing)}")
        problems = [p for name in wanted if (p := target_problem(name, configured[name]))]
        if problems:
            raise ValueError("; ".join(problems))
        hours = float(vnext_setting("OUTBOX_RETENTION_HOURS"))
        return cls(
            targets={name: configured[name] for name in wanted},
            batch_size=int(vnext_setting("OUTBOX_BATCH_SIZE")),
            poll_seconds=float(vnext_setting("OUTBOX_POLL_SECONDS")),
            retention=timedelta(hours=hours),
        )

    def run(self) -> None:
        """Publish until `stop` is set (SIGTERM: the batch under way finishes first), then
        release the locks."""
        backoff = self.poll_seconds
        last_prune = 0.0
        try:
            while not self.stop.is_set():
                try:
                    full = self.step()
                    if self._held and time.monotonic() - last_prune > PRUNE_EVERY_SECONDS:
                        last_prune = time.monotonic()
                        if self.retention > timedelta(0):
                            outbox_prune(retention=self.retention)
                    backoff = self.poll_seconds
                except DatabaseError:
                    logger.exception("outbox relay: the database failed; connecting again")
                    self._drop_database()
                    full = False
                    backoff = min(max(backoff * 2, 1.0), MAX_BACKOFF_SECONDS)
                    self.stop.wait(backoff)
                    continue
                if not full:
                    self.stop.wait(self.poll_seconds if self._held else self._standby_wait())
        finally:
            self.close()

    def step(self) -> bool:
        """One batch per target this relay holds (taking the locks it can): True when some
        batch was full (more rows are waiting)."""
        full = False
        for target, config in self.targets.items():
            if not self._hold(target):
                continue
            try:
                published = self.publish_batch(target, config)
            except DatabaseError:
                raise
            except Exception:
                logger.exception("outbox relay: publishing to %s failed; trying again", target)
                self._drop_publisher(target)
                self.stop.wait(1.0)
                continue
            full = full or published >= self.batch_size
        return full

    def publish_batch(self, target: str, config: dict[str, Any]) -> int:
        """Publish the target's oldest pending rows (one batch) and mark them: how many."""
        rows = list(
            OutboxEvent.objects.filter(target=target, published_at__isnull=True).order_by("id")[
                : self.batch_size
            ]
        )
        if not rows:
            return 0
        publisher = self._publishers.get(target)
        if publisher is None:
            publisher = self._publishers[target] = self.make_publisher(config)
        publisher.publish(rows)
        now = timezone.now()
        ids = [row.id for row in rows]
        if self.retention > timedelta(0):
            OutboxEvent.objects.filter(id__in=ids).update(published_at=now)
        else:
            OutboxEvent.objects.filter(id__in=ids).delete()
        PUBLISHED.labels(target).inc(len(rows))
        LAG.labels(target).set(max((now - rows[0].time).total_seconds(), 0.0))
        return len(rows)

    def close(self) -> None:
        """Drop the brokers' connections and release the locks."""
        for target in list(self._publishers):
            self._drop_publisher(target)
        if self._held and connection.vendor == "postgresql":
            # A session that is gone took its locks with it.
            with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
                for target in self._held:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [lock_key(target)])
        self._held.clear()

    def _hold(self, target: str) -> bool:
        if target in self._held:
            return True
        if connection.vendor != "postgresql":
            self._held.add(target)  # the embedded mode runs one process: nothing to share
            return True
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [lock_key(target)])
            taken = bool(cursor.fetchone()[0])
        if taken:
            self._held.add(target)
            self._standby_logged.discard(target)
            logger.info("outbox relay: publishing %s", target)
        elif target not in self._standby_logged:
            self._standby_logged.add(target)
            logger.info("outbox relay: another relay publishes %s; standing by", target)
        return taken

    def _standby_wait(self) -> float:
        return max(self.poll_seconds * 5, 1.0)

    def _drop_publisher(self, target: str) -> None:
        publisher = self._publishers.pop(target, None)
        if publisher is not None:
            publisher.close()

    def _drop_database(self) -> None:
        # The session, and the advisory locks with it, is gone: they are taken again.
        self._held.clear()
        with contextlib.suppress(DatabaseError):
            connection.close()
