"""The state function as a long-poll (API.md 3), served on the ASGI side of `make run`.

`GET .../instances/{instance}/functions/state?wait=N` with `If-None-Match` set to the current
eTag is parked on the server's event loop, holding no thread, until the instance (or a subflow it
waits for) changes or N seconds pass, then answers as the state function does (200 with the new
body, or 304). Every answer comes from the same Django view through the WSGI handler, so
authentication, errors and the body are exactly those of the plain request; only the waiting
happens here. Changes arrive as channel-layer messages (`instances.changes`); the parked request
also re-reads the instance every `LONG_POLL_RECHECK_SECONDS`, so a lost message costs latency,
never a stale answer. A client that goes away leaves its groups at once.

Limits (vnext/throttling.py): the first read of a request with `wait` above 0 is marked, so the
view counts it against the caller's long-poll rate and names the caller; one that would park
past the caller's `MAX_PARKED_POLLS_PER_CALLER` is answered 429 instead of parked.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from a2wsgi.wsgi import build_environ
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from instances.changes import group_name, serving_in
from instances.engine.errors import Codes, Violation
from instances.engine.telemetry import LONG_POLL_WAITING, LONG_POLLS
from instances.selectors import instance_get, subflow_level_list
from instances.services import instance_snapshot
from vnext.conf import vnext_setting
from vnext.exception_handler import PROBLEM_JSON, problem_body
from vnext.observability import SANE_REQUEST_ID as _SANE_REQUEST_ID
from vnext.throttling import (
    LONG_POLL_CALLER,
    LONG_POLL_MARK,
    ParkingRefused,
    parking_slot_release,
    parking_slot_take,
)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
WsgiApp = Callable[..., Any]

STATE_PATH = re.compile(
    r"^/api/v1/(?P<domain>[^/]+)/workflows/(?P<workflow>[^/]+)/instances/(?P<instance>[^/]+)"
    r"/functions/state/?$"
)


def is_long_poll(scope: Scope) -> bool:
    """A GET of the state function with a `wait` parameter."""
    if scope.get("type") != "http" or scope.get("method") != "GET":
        return False
    if not STATE_PATH.match(scope.get("path", "")):
        return False
    return "wait" in parse_qs(scope.get("query_string", b"").decode("latin1"))


@dataclass
class Answer:
    """A response of the Django view: status, headers, body; and, for a long-poll's first
    read, the caller the view's throttle named."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    caller: str = ""


def get_scope(
    path: str,
    headers: list[tuple[bytes, bytes]],
    *,
    query: bytes = b"",
    server: tuple[str, int] = ("localhost", 80),
    client: tuple[str, int] = ("127.0.0.1", 0),
) -> Scope:
    """The ASGI scope of a `GET path` with `headers`: how the long-poll and the live socket ask
    the state function view (and how tests and the bench call the long-poll)."""
    return {
        "type": "http",
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query,
        "headers": headers,
        "server": server,
        "client": client,
    }


def call_wsgi(app: WsgiApp, scope: Scope, *, first_long_poll_read: bool = False) -> Answer:
    """Run the request `scope` describes through Django's WSGI handler (in a worker thread).
    `first_long_poll_read`: the read that may park (counted by the long-poll rate)."""
    environ: dict[str, Any] = dict(build_environ(scope, io.BytesIO(b"")))  # type: ignore[arg-type]
    if first_long_poll_read:
        # An environ key, which no request header can set.
        environ[LONG_POLL_MARK] = True
    started: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        started["status"] = int(status.split(" ", 1)[0])
        started["headers"] = [(k.encode("latin1"), v.encode("latin1")) for k, v in headers]
        return lambda data: None

    chunks = app(environ, start_response)
    try:
        body = b"".join(chunks)
    finally:
        if hasattr(chunks, "close"):
            chunks.close()
    caller = str(environ.get(LONG_POLL_CALLER, ""))
    return Answer(started["status"], started["headers"], body, caller)


class StateLongPoll:
    """The ASGI app of long-poll requests; `wsgi_app` answers every read of the state."""

    def __init__(self, wsgi_app: WsgiApp) -> None:
        self.wsgi_app = wsgi_app
        # Reads in flight, by request signature: the clients one change wakes share one read
        # (100 parked clients of an instance cost one state read, not 100).
        self._reads: dict[tuple[bytes, ...], tuple[float, asyncio.Future[Answer]]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer at once unless the client holds the current eTag; else park until a change."""
        request = await receive()  # the (empty) body of the GET
        if request.get("type") == "http.disconnect":
            return
        wait = _wait_seconds(scope)
        if wait is None:
            await _send(send, _bad_wait())
            return
        answer = await self._read(scope, first=wait > 0)
        if answer.status != 304 or wait <= 0:
            if wait > 0:
                LONG_POLLS.labels("stale").inc()
            await _send(send, answer)
            return
        try:
            slot = await sync_to_async(parking_slot_take, thread_sensitive=False)(answer.caller)
        except ParkingRefused as refused:
            LONG_POLLS.labels("refused").inc()
            await _send(send, _with_own_request_id(_too_many_parked(refused), scope))
            return
        try:
            await self._park(scope, receive, send, wait, answer)
        finally:
            if slot is not None:
                await sync_to_async(parking_slot_release, thread_sensitive=False)(slot)

    async def _read(self, scope: Scope, *, first: bool = False) -> Answer:
        return await sync_to_async(call_wsgi, thread_sensitive=False)(
            self.wsgi_app, scope, first_long_poll_read=first
        )

    async def _shared_read(self, scope: Scope, not_before: float) -> Answer:
        """A read of the state as this request would make it, joining one in flight for the
        same request when that one started at `not_before` (the commit a wake announced) or
        later, so it sees that commit."""
        key = _signature(scope)
        current = self._reads.get(key)
        if current is not None and current[0] >= not_before and not current[1].done():
            return await asyncio.shield(current[1])
        read = asyncio.ensure_future(self._read(scope))
        self._reads[key] = (time.time(), read)
        read.add_done_callback(lambda done: self._forget(key, done))
        return await asyncio.shield(read)

    def _forget(self, key: tuple[bytes, ...], read: asyncio.Future[Answer]) -> None:
        if self._reads.get(key, (0.0, None))[1] is read:
            del self._reads[key]

    async def _park(
        self, scope: Scope, receive: Receive, send: Send, wait: float, answer: Answer
    ) -> None:
        loop = asyncio.get_running_loop()
        serving_in(loop)
        deadline = loop.time() + wait
        layer = get_channel_layer()
        channel = await layer.new_channel() if layer is not None else None
        groups = [
            group_name(i)
            for i in await sync_to_async(watched_instances, thread_sensitive=False)(scope)
        ]
        for group in groups if channel else []:
            await layer.group_add(group, channel)
        gone = asyncio.ensure_future(receive())
        recheck = float(vnext_setting("LONG_POLL_RECHECK_SECONDS"))
        not_before = time.time()
        LONG_POLL_WAITING.inc()
        outcome = "gone"
        try:
            while True:
                # Read again after joining: a change just before the join is not missed.
                answer = await self._shared_read(scope, not_before)
                remaining = deadline - loop.time()
                if answer.status != 304 or remaining <= 0:
                    outcome = "changed" if answer.status != 304 else "timeout"
                    break
                message = asyncio.ensure_future(layer.receive(channel)) if channel else None
                waiting = {gone, message} if message else {gone}
                done, _ = await asyncio.wait(
                    waiting, timeout=min(remaining, recheck), return_when=asyncio.FIRST_COMPLETED
                )
                if message is not None and message not in done:
                    message.cancel()
                if gone in done:
                    return  # the client went away: nothing to answer
                woken = message.result() if message is not None and message in done else {}
                # A wake reads what its commit wrote; a periodic re-read reads afresh.
                not_before = float(woken.get("at") or time.time())
            await _send(send, _with_own_request_id(answer, scope))
        finally:
            LONG_POLL_WAITING.dec()
            LONG_POLLS.labels(outcome).inc()
            gone.cancel()
            for group in groups if channel else []:
                await layer.group_discard(group, channel)


# Headers that differ between requests whose answers are the same (each request keeps its own
# id in its own answer).
_UNSHARED_HEADERS = frozenset({b"x-request-id", b"traceparent", b"tracestate", b"user-agent"})


def _signature(scope: Scope) -> tuple[bytes, ...]:
    # What makes two requests' answers the same: the path, the query and every header a view
    # may read (a conditional view's rule can read any of them, not only the credentials).
    headers = sorted(
        (name.lower(), value)
        for name, value in scope.get("headers", [])
        if name.lower() not in _UNSHARED_HEADERS
    )
    return (
        scope["path"].encode(),
        scope.get("query_string", b""),
        *(b"%s=%s" % (name, value) for name, value in headers),
    )


def _wait_seconds(scope: Scope) -> float | None:
    values = parse_qs(scope.get("query_string", b"").decode("latin1")).get("wait") or [""]
    try:
        wait = float(values[0])
    except ValueError:
        return None
    if wait != wait or wait < 0:  # NaN or negative
        return None
    return min(wait, float(vnext_setting("LONG_POLL_MAX_SECONDS")))


def watched_instances(scope: Scope) -> list[uuid.UUID]:
    """The instance a state-function request names and the subflows its state function
    describes: a change of any of them changes the answer."""
    match = STATE_PATH.match(scope["path"])
    assert match is not None
    instance = instance_snapshot(
        domain=match["domain"], workflow=match["workflow"], ref=match["instance"]
    )
    ids = [instance.id]
    for level in subflow_level_list(instance=instance):
        ids.append(level.child.id)
    return [i for i in ids if instance_get(instance_id=i) is not None]


def _bad_wait() -> Answer:
    body = problem_body(
        Codes.APP_INVALID_QUERY,
        "wait must be a number of seconds (0 or more)",
        violations=[Violation("/wait", "a number of seconds, 0 or more")],
    )
    return Answer(400, [(b"content-type", b"application/problem+json")], json.dumps(body).encode())


def _too_many_parked(refused: ParkingRefused) -> Answer:
    body = problem_body(Codes.APP_THROTTLED, str(refused))
    headers = [(b"content-type", PROBLEM_JSON.encode()), (b"retry-after", b"1")]
    return Answer(429, headers, json.dumps(body).encode())


def _with_own_request_id(answer: Answer, scope: Scope) -> Answer:
    # A shared read answered another waiter's request: this one answers its own id.
    given = dict(scope.get("headers", [])).get(b"x-request-id", b"").decode("latin1")
    own = given if _SANE_REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
    headers = [(k, v) for k, v in answer.headers if k.lower() != b"x-request-id"]
    return Answer(answer.status, [*headers, (b"x-request-id", own.encode())], answer.body)


async def _send(send: Send, answer: Answer) -> None:
    await send({"type": "http.response.start", "status": answer.status, "headers": answer.headers})
    await send({"type": "http.response.body", "body": answer.body, "more_body": False})


class LongPollRouter:
    """The HTTP side of the ASGI application: long-polls of the state function here, every
    other request to the WSGI bridge."""

    def __init__(self, long_poll: StateLongPoll, other: Any) -> None:
        self.long_poll = long_poll
        self.other = other

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Route one HTTP request."""
        if is_long_poll(scope):
            await self.long_poll(scope, receive, send)
        else:
            await self.other(scope, receive, send)
