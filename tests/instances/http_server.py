"""A loopback HTTP server for HTTP-task tests: `/ok`, `/slow?ms=N`, `/status/N`, `/echo`,
`/nul` (a JSON text PostgreSQL cannot store), `/counted/NAME` (counts its calls) and
`/count/NAME` (how many so far)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

_COUNTS: Counter[str] = Counter()
_COUNT_LOCK = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    def _answer(self, status: int, payload: object) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _route(self) -> None:
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        received = json.loads(self.rfile.read(length) or b"null") if length else None
        if url.path == "/slow":
            time.sleep(int(parse_qs(url.query).get("ms", ["1000"])[0]) / 1000)
            self._answer(200, {"slow": True})
        elif url.path.startswith("/status/"):
            self._answer(int(url.path.rsplit("/", 1)[1]), {"error": "as asked"})
        elif url.path == "/nul":
            self._answer(200, {"text": "a\u0000b"})
        elif url.path.startswith("/counted/"):
            with _COUNT_LOCK:
                _COUNTS[url.path.rsplit("/", 1)[1]] += 1
            self._answer(200, {"counted": True})
        elif url.path.startswith("/count/"):
            self._answer(200, {"count": _COUNTS[url.path.rsplit("/", 1)[1]]})
        elif url.path == "/echo":
            self._answer(
                200,
                {"method": self.command, "body": received, "header": self.headers.get("X-Test")},
            )
        else:
            self._answer(200, {"ok": True})

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _route

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def http_server() -> Iterator[str]:
    """Serve on 127.0.0.1 (a free port) for the duration; yields the base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
