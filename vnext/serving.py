"""What a client meets before it can hold one of the serving threads (`make run`, `make serve`).

- `ServingLayer`, the outermost ASGI app: it reads a request's body on the event loop, at most
  `MAX_BODY_BYTES` (413) within `BODY_READ_TIMEOUT_SECONDS` (408), and only then hands the request,
  its body replayed whole (and in the scope, `BODY_SCOPE_KEY`, for the WSGI bridge), to the app
  behind it. A client sending one byte a second holds a socket,
  never one of the `HTTP_THREADS` (the WSGI bridge would read the body in the thread it took).
  It answers `GET /health` itself: one database check at a time, on a thread of its own, shared
  by every request waiting for it, so liveness never queues behind the serving threads.

The limit on the request line and headers is the protocol's (`vnext/http_protocol.py`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import connection

from instances.engine.errors import Codes, ErrorCode
from vnext.conf import vnext_setting
from vnext.health import database_health
from vnext.problems import PROBLEM_JSON, problem_body
from vnext.wsgi_bridge import BODY_SCOPE_KEY

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

logger = logging.getLogger("vnext.serving")

HEALTH_PATH = "/health"
# A database that does not answer `SELECT 1` within this is reported down (503), not waited for.
HEALTH_TIMEOUT_SECONDS = 5.0


class ServingLayer:
    """The ASGI app the server runs: `/health`, then HTTP bodies read whole, then `app`."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.health = SharedHealthCheck()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer `/health` here; hand HTTP on with its body read; anything else straight on."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] == HEALTH_PATH and scope["method"] in ("GET", "HEAD"):
            status, body = await self.health.answer()
            await _respond(send, status, b"application/json", json.dumps(body).encode())
            return
        replay = await read_body(scope, receive, send)
        if replay is not None:
            await self.app(scope, replay, send)


async def read_body(scope: Scope, receive: Receive, send: Send) -> Receive | None:
    """Read the request body (`MAX_BODY_BYTES`, `BODY_READ_TIMEOUT_SECONDS`) into the scope
    (`BODY_SCOPE_KEY`); return a `receive` that gives it whole and then whatever the client
    sends next (its disconnect). None when the request was answered here (413, 408) or the
    client went away."""
    limit = int(vnext_setting("MAX_BODY_BYTES"))
    too_large = f"the request body is over {limit} bytes"
    declared = _content_length(scope)
    if declared is not None and declared > limit:
        await _refuse(scope, send, Codes.APP_PAYLOAD_TOO_LARGE, too_large)
        return None
    chunks: list[bytes] = []
    size = 0
    try:
        # One deadline for the whole body, not per chunk: a byte a second must not keep it alive.
        async with asyncio.timeout(float(vnext_setting("BODY_READ_TIMEOUT_SECONDS"))):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return None
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    await _refuse(scope, send, Codes.APP_PAYLOAD_TOO_LARGE, too_large)
                    return None
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
    except TimeoutError:
        seconds = vnext_setting("BODY_READ_TIMEOUT_SECONDS")
        detail = f"the request body did not arrive within {seconds} seconds"
        await _refuse(scope, send, Codes.APP_BODY_TIMEOUT, detail)
        return None
    body = b"".join(chunks)
    scope[BODY_SCOPE_KEY] = body
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


class SharedHealthCheck:
    """`database_health()` on a thread of its own; callers arriving while a check runs share it."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="health")
        self._running: asyncio.Future[tuple[int, dict[str, Any]]] | None = None

    async def answer(self) -> tuple[int, dict[str, Any]]:
        """The status and body of `/health`; 503 when the check takes too long."""
        loop = asyncio.get_running_loop()
        running = self._running
        if running is None or running.done() or running.get_loop() is not loop:
            running = loop.run_in_executor(self._executor, _check_and_tidy)
            self._running = running
        try:
            return await asyncio.wait_for(asyncio.shield(running), HEALTH_TIMEOUT_SECONDS)
        except TimeoutError:
            return 503, {"status": "unavailable", "database": "timeout"}


def _check_and_tidy() -> tuple[int, dict[str, Any]]:
    try:
        return database_health()
    finally:
        # No request_finished signal here: honour CONN_MAX_AGE (and drop a broken connection)
        # as Django does at the end of a request.
        connection.close_if_unusable_or_obsolete()


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(scope: Scope, send: Send, error: ErrorCode, detail: str) -> None:
    # The client may still be sending: close the connection after the answer.
    method, path = scope["method"], scope["path"]
    logger.warning("%s %s refused (%d): %s", method, path, error.http_status, detail)
    body = json.dumps(problem_body(error, detail)).encode()
    await _respond(send, error.http_status, PROBLEM_JSON.encode(), body, close=True)


async def _respond(
    send: Send, status: int, content_type: bytes, body: bytes, *, close: bool = False
) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
