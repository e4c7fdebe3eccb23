"""The local stand-in for the mock API the fan-out examples call (`API_BASEURL/api/fan-out/...`),
and a probe of how many calls run at once.

- `/api/fan-out/documents/process?documentId=ID`: `DOC-FAIL*` answers 500 at once, `DOC-SLOW*`
  200 after `slow_seconds`, any other id 200 at once.
- `/api/fan-out/slow-documents/process`, `/api/fan-out/documents/process-slow`: 200 after
  `slow_seconds`.
- `/api/fan-out/sleep?ms=N`: 200 after N ms (the bulkhead test and the benchmark).
- `/api/fan-out/peak` (the stub process only): the most calls served at once since last asked.

Every answer is `{"documentId": ..., "path": ...}`. The stub counts calls per document id and
keeps the highest number of calls it was serving at once (`peak`). It speaks HTTP/1.1 with
keep-alive and writes each answer in one piece (no Nagle wait between headers and body).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


@dataclass
class FanOutStub:
    """The running stub: its base URL, its calls by document id and its concurrency peak."""

    base_url: str = ""
    slow_seconds: float = 1.5
    calls: Counter[str] = field(default_factory=Counter)
    in_flight: int = 0
    peak: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def enter(self, document_id: str) -> None:
        """A call arrived."""
        with self.lock:
            self.calls[document_id] += 1
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)

    def leave(self) -> None:
        """A call was answered."""
        with self.lock:
            self.in_flight -= 1

    def reset(self) -> None:
        """Forget the calls and the peak."""
        with self.lock:
            self.calls.clear()
            self.peak = self.in_flight

    def answer(self, path: str, query: dict[str, list[str]]) -> int:
        """Wait as the path asks and say which status it answers."""
        delay, status = fate(path, query, self.slow_seconds)
        if delay:
            time.sleep(delay)
        return status


def fate(path: str, query: dict[str, list[str]], slow_seconds: float) -> tuple[float, int]:
    """How long a call to `path` waits and the status it then answers."""
    document_id = (query.get("documentId") or [""])[0]
    if path == "/api/fan-out/sleep":
        return int((query.get("ms") or ["0"])[0]) / 1000, 200
    if path in ("/api/fan-out/slow-documents/process", "/api/fan-out/documents/process-slow"):
        return slow_seconds, 200
    if path == "/api/fan-out/documents/process":
        if document_id.startswith("DOC-FAIL"):
            return 0.0, 500
        return (slow_seconds if document_id.startswith("DOC-SLOW") else 0.0), 200
    return 0.0, 404


def _handler(stub: FanOutStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _route(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            url = urlparse(self.path)
            query = parse_qs(url.query)
            document_id = (query.get("documentId") or [""])[0]
            stub.enter(document_id)
            try:
                status = stub.answer(url.path, query)
            finally:
                stub.leave()
            payload: dict[str, Any] = {"documentId": document_id, "path": url.path}
            body = json.dumps(payload).encode()
            head = (
                f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}\r\n"
                "Content-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
            self.wfile.write(head + body)

        do_GET = do_POST = _route

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@contextmanager
def fan_out_stub(slow_seconds: float = 1.5) -> Iterator[FanOutStub]:
    """Serve the stub on 127.0.0.1 (a free port) for the duration."""
    stub = FanOutStub(slow_seconds=slow_seconds)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stub))
    server.daemon_threads = True
    stub.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class _Load:
    """What the stub process is serving: calls in flight now, and the most at once since the
    last `/api/fan-out/peak` (which reads and resets it)."""

    in_flight: int = 0
    peak: int = 0


async def _answer_async(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    slow_seconds: float,
    load: _Load,
) -> None:
    # One keep-alive connection: request line, headers, a Content-Length body; no more.
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            target = line.split(b" ")[1].decode()
            length = 0
            while (header := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = header.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if length:
                await reader.readexactly(length)
            url = urlparse(target)
            query = parse_qs(url.query)
            if url.path == "/api/fan-out/peak":
                body = json.dumps({"peak": load.peak, "inFlight": load.in_flight}).encode()
                load.peak = load.in_flight
                status = 200
            else:
                delay, status = fate(url.path, query, slow_seconds)
                load.in_flight += 1
                load.peak = max(load.peak, load.in_flight)
                try:
                    if delay:
                        await asyncio.sleep(delay)
                finally:
                    load.in_flight -= 1
                document_id = (query.get("documentId") or [""])[0]
                body = json.dumps({"documentId": document_id, "path": url.path}).encode()
            writer.write(
                f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()
    except (ConnectionError, IndexError, ValueError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()


def _serve(slow_seconds: float, port_out: Any) -> None:
    load = _Load()

    async def main() -> None:
        server = await asyncio.start_server(
            lambda r, w: _answer_async(r, w, slow_seconds, load), "127.0.0.1", 0
        )
        port_out.send(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        port_out.close()
        async with server:
            await server.serve_forever()

    asyncio.run(main())


@contextmanager
def fan_out_stub_process(slow_seconds: float = 1.5) -> Iterator[str]:
    """The stub as an asyncio server in a process of its own (cheap per call, and sharing no
    interpreter lock with the caller, as a real target would not): its base URL for the
    duration. It counts no calls; `GET /api/fan-out/peak` answers the most calls it served at
    once since the previous such request (`{"peak": n, "inFlight": n}`)."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_serve, args=(slow_seconds, send), daemon=True)
    process.start()
    try:
        if not receive.poll(60):
            raise RuntimeError("the fan-out stub process did not start")
        yield str(receive.recv())
    finally:
        process.kill()
        process.join(10)
