"""The local stand-in for the mock API the error-boundary-lab HTTP tasks call
(`API_BASEURL/api/eb-lab/...`): `fail-500` and `fail-503` always answer that status, `flaky`
answers 500, 500, then 200 from the third call on. It counts every call per path."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FLAKY_FAILURES = 2


@dataclass
class EbLabStub:
    """The running stub: its base URL and the calls it answered, by path."""

    base_url: str = ""
    calls: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, path: str) -> int:
        """Count the call and say which status `path` answers with this time."""
        with self.lock:
            self.calls[path] += 1
            count = self.calls[path]
        if path == "/api/eb-lab/fail-500":
            return 500
        if path == "/api/eb-lab/fail-503":
            return 503
        if path == "/api/eb-lab/flaky":
            return 500 if count <= FLAKY_FAILURES else 200
        return 404


def _handler(stub: EbLabStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _route(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            status = stub.answer(self.path)
            payload: dict[str, Any] = {"path": self.path, "status": status}
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _route

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@contextmanager
def eb_lab_stub() -> Iterator[EbLabStub]:
    """Serve the stub on 127.0.0.1 (a free port) for the duration."""
    stub = EbLabStub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stub))
    stub.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
