"""The bridge from the event loop to Django's WSGI handler: a2wsgi's, one hop a request.

a2wsgi runs the WSGI app on a fixed pool of threads (`VNEXT_HTTP_THREADS`) and, from that
thread, goes back to the event loop for every message and waits there: reading the body, the
response start, each chunk, the end; four hops of a sync transition, each a thread waking the
loop and sleeping until it has run. Here the thread reads the body `ServingLayer` has read
already (`BODY_SCOPE_KEY`), and an answer Django does not stream comes back from it whole: the
loop sends its start and its body. A streamed answer (a static file) is still sent chunk by
chunk through a2wsgi's queue, its start with its first chunk.
"""

from __future__ import annotations

import contextvars
import functools
import io
from collections.abc import Iterable
from typing import Any, cast

from a2wsgi.asgi_typing import HTTPScope, Receive, Scope, Send, SendEvent
from a2wsgi.wsgi import Body, WSGIMiddleware, WSGIResponder, build_environ
from a2wsgi.wsgi_typing import Environ, ExceptionInfo, StartResponse, WriteCallable

# Where `ServingLayer` leaves the request body it read whole (the ASGI scope is the request's).
BODY_SCOPE_KEY = "vnext.body"


class OneHopWSGIMiddleware(WSGIMiddleware):
    """a2wsgi's `WSGIMiddleware` answering HTTP through `OneHopResponder`."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """HTTP through one hop to a thread; anything else as a2wsgi does it."""
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        responder = OneHopResponder(self.app, self.executor, self.send_queue_size)
        await responder(scope, receive, send)


class OneHopResponder(WSGIResponder):
    """One request: the WSGI app run in a thread with its body read already; the answer sent
    from the loop when it is whole (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.start: SendEvent | None = None
        self.start_sent = False
        # The whole body of an answer that is not streamed, once the thread has it.
        self.whole: bytes | None = None

    async def __call__(self, scope: HTTPScope, receive: Receive, send: Send) -> None:
        """Run the app in a thread, then send what it answered (or what it has not streamed)."""
        read = cast(dict[str, Any], scope).get(BODY_SCOPE_KEY)
        # The environ's input is read like a file; a2wsgi's `Body` is one too.
        body = cast(Body, io.BytesIO(read)) if read is not None else Body(self.loop, receive)
        environ = build_environ(scope, body)
        sender = self.loop.create_task(self.sender(send))
        try:
            context = contextvars.copy_context()
            run = functools.partial(context.run, self.wsgi, environ, self.start_response)
            await self.loop.run_in_executor(self.executor, run)
            if self.whole is not None:
                if self.start is None:
                    raise RuntimeError("the WSGI app answered without calling start_response")
                await self.send_queue.put(self.start)
                await self.send_queue.put({"type": "http.response.body", "body": self.whole})
            await self.send_queue.put(None)
            await sender
            if self.exc_info is not None:
                raise self.exc_info[0].with_traceback(self.exc_info[1], self.exc_info[2])
        finally:
            if not sender.done():
                sender.cancel()

    def start_response(
        self,
        status: str,
        response_headers: list[tuple[str, str]],
        exc_info: ExceptionInfo | None = None,
    ) -> WriteCallable:
        """Keep the start: it goes out with the body (an error's start replaces one not sent)."""
        self.exc_info = exc_info
        if not self.start_sent and (self.start is None or exc_info is not None):
            self.response_started = True
            self.start = {
                "type": "http.response.start",
                "status": int(status.split(" ", 1)[0]),
                "headers": [
                    (name.strip().encode("latin1").lower(), value.strip().encode("latin1"))
                    for name, value in response_headers
                ],
            }
        return self._write

    def _write(self, chunk: bytes) -> None:
        self._send_start()
        self.send({"type": "http.response.body", "body": chunk, "more_body": True})

    def _send_start(self) -> None:
        if not self.start_sent and self.start is not None:
            self.start_sent = True
            self.send(self.start)

    def wsgi(self, environ: Environ, start_response: StartResponse) -> None:
        """In the thread: run the app; keep a whole answer, stream any other."""
        iterable: Iterable[bytes] = self.app(environ, start_response)
        try:
            # Django's `HttpResponse` is not streamed: its content is one chunk, in memory.
            if getattr(iterable, "streaming", True) is False:
                self.whole = b"".join(iterable)
                return
            for chunk in iterable:
                self._write(chunk)
            self._send_start()
            self.send({"type": "http.response.body", "body": b""})
        finally:
            getattr(iterable, "close", lambda: None)()
