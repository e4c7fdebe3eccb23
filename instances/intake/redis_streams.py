"""The Redis Streams transport of the intake: one consumer (`name`) of a consumer group on one
stream, reading `prefetch` entries at a time and handling them in stream order.

- An entry is acknowledged (XACK) after `message_process` returned, so after its transaction
  committed; until then it stays in the group's pending list.
- At start the consumer reads its own pending entries first (the same name after a restart
  finds what it read and did not acknowledge), then new ones; every `claim_idle` seconds it
  takes over (XAUTOCLAIM) entries idle that long, whoever read them: those of a consumer that
  died and did not come back, and its own retries.
- Dead letters: XADD to `<stream>:dead` (the entry's fields plus `vnext-error`, ...) and XACK
  in one MULTI, so a crash leaves either both or neither.
- Retries are left pending: taken over after `claim_idle`, each take-over counting a delivery
  (the pending list's counter is the attempt number); transient failures are tried again in
  place, and at a stop the entry is left pending too.

Entry fields: `data` is the body (JSON); `ce-*` fields make it a binary-mode CloudEvent, else
`data` holds a structured one (or a plain JSON object)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import redis

from instances.intake.consumer import ACK, DEAD, Disposition, message_process
from instances.intake.messages import BrokerMessage, text_of
from instances.intake.routes import REDIS, EventRoute

logger = logging.getLogger("vnext.intake")

DATA_FIELD = "data"
_RECONNECT_CAP_SECONDS = 30.0
_MAX_ERROR_CHARS = 2000


def dead_letter_stream(stream: str) -> str:
    """Where `stream`'s dead letters go."""
    return f"{stream}:dead"


def group_create(client: redis.Redis, stream: str, group: str) -> None:
    """Create `group` on `stream` (and the stream), reading from its first entry; an existing
    group is kept as it is."""
    try:
        client.xgroup_create(stream, group, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


class StreamConsumer:
    """Consume `stream` at `url` as `name` of `group` until `stop` is set."""

    def __init__(
        self,
        *,
        url: str,
        stream: str,
        routes: Sequence[EventRoute],
        prefetch: int,
        stop: threading.Event,
        group: str,
        name: str,
        claim_idle_seconds: float,
    ) -> None:
        self.url = url
        self.stream = stream
        self.routes = routes
        self.prefetch = prefetch
        self.stop = stop
        self.group = group
        self.name = name
        self.claim_idle_ms = max(int(claim_idle_seconds * 1000), 1)

    def run(self) -> None:
        """Consume until stopped; a lost connection is tried again with backoff (what was read
        and not acknowledged stays pending and is read again)."""
        wait = 0.5
        client = redis.Redis.from_url(self.url)
        try:
            while not self.stop.is_set():
                try:
                    self._consume(client)
                    return
                except (redis.ConnectionError, redis.TimeoutError) as exc:
                    logger.warning("Redis %s: %s; reconnecting in %.1fs", self.stream, exc, wait)
                if self.stop.wait(wait):
                    return
                wait = min(wait * 2, _RECONNECT_CAP_SECONDS)
        finally:
            client.close()

    def _consume(self, client: redis.Redis) -> None:
        group_create(client, self.stream, self.group)
        logger.info(
            "consuming Redis stream %s as %s/%s (prefetch %d)",
            self.stream,
            self.group,
            self.name,
            self.prefetch,
        )
        self._own_pending(client)
        next_claim = 0.0
        while not self.stop.is_set():
            if time.monotonic() >= next_claim:
                self._claim_idle(client)
                next_claim = time.monotonic() + max(self.claim_idle_ms / 2000, 0.2)
            # redis-py types replies as the union of every command's: read as Any.
            reply: Any = client.xreadgroup(
                self.group, self.name, {self.stream: ">"}, count=self.prefetch, block=1000
            )
            for _stream, entries in reply or []:
                for entry_id, fields in entries:
                    if self.stop.is_set():
                        return  # left pending: read again at the next start
                    self._handle(client, entry_id, fields, attempts=1)

    def _own_pending(self, client: redis.Redis) -> None:
        # This consumer's history: entries it read before and did not acknowledge.
        after: Any = "0"
        while not self.stop.is_set():
            reply: Any = client.xreadgroup(
                self.group, self.name, {self.stream: after}, count=self.prefetch
            )
            entries = reply[0][1] if reply else []
            if not entries:
                return
            for entry_id, fields in entries:
                if self.stop.is_set():
                    return
                self._handle(client, entry_id, fields, self._deliveries(client, entry_id))
                after = entry_id

    def _claim_idle(self, client: redis.Redis) -> None:
        cursor: Any = "0-0"
        while not self.stop.is_set():
            reply: Any = client.xautoclaim(
                self.stream,
                self.group,
                self.name,
                min_idle_time=self.claim_idle_ms,
                start_id=cursor,
                count=self.prefetch,
            )
            cursor, entries = reply[0], reply[1]
            for entry_id, fields in entries:
                if self.stop.is_set():
                    return
                self._handle(client, entry_id, fields, self._deliveries(client, entry_id))
            # An empty page is not the end: XAUTOCLAIM scans a bounded stretch of the pending
            # list per call, so idle entries may lie past it until the cursor comes back to 0-0.
            if cursor in (b"0-0", "0-0"):
                return

    def _deliveries(self, client: redis.Redis, entry_id: Any) -> int:
        pending: Any = client.xpending_range(
            self.stream, self.group, min=entry_id, max=entry_id, count=1
        )
        return int(pending[0]["times_delivered"]) if pending else 1

    def _handle(self, client: redis.Redis, entry_id: Any, fields: Any, attempts: int) -> None:
        if not fields:
            # Deleted from the stream (XDEL, MAXLEN) while pending: nothing left to deliver.
            client.xack(self.stream, self.group, entry_id)
            return
        message = stream_message(entry_id, fields, attempts)
        disposition = message_process(
            message, source=REDIS, address=self.stream, routes=self.routes, stop=self.stop
        )
        if disposition.verdict == ACK:
            client.xack(self.stream, self.group, entry_id)
        elif disposition.verdict == DEAD:
            pipe = client.pipeline(transaction=True)
            pipe.xadd(
                dead_letter_stream(self.stream), dead_letter_fields(fields, message, disposition)
            )
            pipe.xack(self.stream, self.group, entry_id)
            pipe.execute()
        # retry, or transient at a stop: left pending, taken over after claim_idle


def stream_message(entry_id: Any, fields: dict[Any, Any], attempts: int) -> BrokerMessage:
    """The intake's view of a stream entry: `data` is the body, the other fields headers."""
    texts = {text_of(key): value for key, value in fields.items()}
    body = texts.pop(DATA_FIELD, b"")
    headers = {key: text_of(value) for key, value in texts.items()}
    return BrokerMessage(
        body=body if isinstance(body, bytes) else str(body).encode(),
        headers=headers,
        content_type=headers.get("content-type", ""),
        broker_id=text_of(entry_id),
        attempts=attempts,
    )


def dead_letter_fields(
    fields: dict[Any, Any], message: BrokerMessage, disposition: Disposition
) -> dict[Any, Any]:
    """The entry's fields with why it was dead-lettered."""
    return {
        **fields,
        "vnext-stream-id": message.broker_id,
        "vnext-reason": disposition.reason,
        "vnext-error": disposition.detail[:_MAX_ERROR_CHARS],
        "vnext-error-code": disposition.error_code,
        "vnext-route": disposition.route,
        "vnext-attempts": str(message.attempts),
        "vnext-failed-at": datetime.now(UTC).isoformat(),
    }
