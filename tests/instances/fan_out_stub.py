"""The local stand-in for the mock API the fan-out examples call (`API_BASEURL/api/fan-out/...`),
and a probe of how many calls run at once.

- `/api/fan-out/documents/process?documentId=ID`: `DOC-FAIL*` answers 500 at once, `DOC-SLOW*`
  200 after `slow_seconds`, any other id 200 at once.
- `/api/fan-out/slow-documents/process`, `/api/fan-out/documents/process-slow`: 200 after
  `slow_seconds`.
- `/api/fan-out/sleep?ms=N`: 200 after N ms (the bulkhead test and the benchmark).

Every answer is `{"documentId": ..., "path": ...}`. The stub counts calls per document id and
keeps the highest number of calls it was serving at once (`peak`). It speaks HTTP/1.1 with
keep-alive and writes each answer in one piece (no Nagle wait between headers and body).
"""

from __future__ import annotations

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
        document_id = (query.get("documentId") or [""])[0]
        if path == "/api/fan-out/sleep":
            time.sleep(int((query.get("ms") or ["0"])[0]) / 1000)
            return 200
        if path in ("/api/fan-out/slow-documents/process", "/api/fan-out/documents/process-slow"):
            time.sleep(self.slow_seconds)
            return 200
        if path == "/api/fan-out/documents/process":
            if document_id.startswith("DOC-FAIL"):
                return 500
            if document_id.startswith("DOC-SLOW"):
                time.sleep(self.slow_seconds)
            return 200
        return 404


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
