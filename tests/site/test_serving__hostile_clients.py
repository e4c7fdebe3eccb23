"""What slow, oversized or lying clients can do to a real server (`manage.py vnext_run`), and
what never reaches its log: slow bodies hold no serving thread and are cut off (408), `/health`
answers beside them; a huge header is refused (431) before it is read; X-Forwarded-For from
loopback does not move the address a login lockout counts; WebSocket refusals arrive as close
codes, other WebSocket paths are refused cleanly, and no token is written in the log."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from websockets.typing import Subprotocol

from tests.site.server import RunningServer, vnext_server

pytestmark = pytest.mark.slow

PASSWORD = "ops-secret-42"
BODY_TIMEOUT_SECONDS = 4
LOGIN_FAILURE_LIMIT = 3
FLOW = "/api/v1/core/workflows/chain-busy-leaf/instances"
NO_SUCH_INSTANCE = (
    "/ws/core/workflows/chain-busy-leaf/instances/00000000-0000-0000-0000-000000000000/"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    env = {
        "VNEXT_OPERATOR_USERNAME": "ops",
        "VNEXT_OPERATOR_PASSWORD": PASSWORD,
        "VNEXT_BODY_READ_TIMEOUT_SECONDS": str(BODY_TIMEOUT_SECONDS),
        "VNEXT_LOGIN_FAILURE_LIMIT": str(LOGIN_FAILURE_LIMIT),
        "VNEXT_HTTP_ACCESS_LOG": "true",
    }
    with vnext_server(tmp_path_factory.mktemp("hostile"), env) as running:
        yield running


@pytest.fixture(scope="module")
def token(server: RunningServer) -> str:
    found = re.search(r"API token:\s+([0-9a-f]{40})", server.output())
    assert found, server.output()
    return found.group(1)


def slow_body(server: RunningServer, path: str, headers: str = "") -> socket.socket:
    """A POST announcing 100,000 bytes of body, of which it has sent none yet."""
    port = int(server.base.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}"
        "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\n".encode()
    )
    return sock


def answer_of(sock: socket.socket) -> bytes:
    """What the server answered before closing, however the client's last send fared."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except OSError:
        pass
    return received


def test_slow_bodies_hold_no_serving_thread_and_are_cut_off(server, token):
    auth = f"Authorization: Token {token}\r\n"
    sockets = [slow_body(server, "/admin/login/") for _ in range(40)] + [
        slow_body(server, f"{FLOW}/start", auth) for _ in range(20)
    ]
    stop = threading.Event()

    def one_byte_a_second() -> None:
        while not stop.is_set():
            for sock in sockets:
                # Once answered and closed (the point of the test), a send fails.
                with contextlib.suppress(OSError):
                    sock.send(b"a")
            stop.wait(1.0)

    dripping = threading.Thread(target=one_byte_a_second, daemon=True)
    dripping.start()
    try:
        latencies = []
        with httpx.Client(base_url=server.base, timeout=10) as client:
            deadline = time.monotonic() + BODY_TIMEOUT_SECONDS - 1
            while time.monotonic() < deadline:
                began = time.monotonic()
                assert client.get("/health").status_code == 200
                latencies.append(time.monotonic() - began)
                time.sleep(0.05)
            # A normal request, body and all, still gets a serving thread meanwhile.
            started = client.post(
                f"{FLOW}/start?sync=true", json={}, headers={"Authorization": f"Token {token}"}
            )
            assert started.status_code == 200, started.text
        answers = [answer_of(sock) for sock in sockets]
    finally:
        stop.set()
        dripping.join(5)
        for sock in sockets:
            sock.close()

    p95 = statistics.quantiles(latencies, n=20)[-1]
    assert p95 < 0.1, f"/health p95 {p95:.3f}s over {len(latencies)} requests"
    assert all(answer.startswith(b"HTTP/1.1 408 ") for answer in answers), {
        answer[:40] for answer in answers
    }
    assert json.loads(answers[0].split(b"\r\n\r\n", 1)[1])["errorCode"] == "App:900011"


def test_a_body_over_the_cap_is_refused_before_it_is_read(server, token):
    port = int(server.base.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            f"POST {FLOW}/start HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Token {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {3 * 2**20}\r\n\r\n{{}}".encode()
        )
        answer = answer_of(sock)
    # Answered at once, although the body never comes (nor any authentication check).
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:80]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["errorCode"] == "App:900009"


def test_a_64_mb_header_is_refused_before_it_is_read_whole(server):
    before = _resident_bytes(server)
    port = int(server.base.rsplit(":", 1)[1])
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: ")
        chunk = b"a" * 2**16
        try:
            while sent < 64 * 2**20:
                sock.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass  # the server closed the connection
        answer = answer_of(sock)
    assert sent < 64 * 2**20, "the whole header was read"
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431 "), answer[:80]
    assert _resident_bytes(server) - before < 32 * 2**20
    # A head over the limit that arrives whole in one read is refused as well.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        padding = b"a" * 70_000
        sock.sendall(
            b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + padding + b"\r\n\r\n"
        )
        assert answer_of(sock).startswith(b"HTTP/1.1 431 ")
    # A head within the limit (a 16 KB cookie) is served.
    cookie = {"Cookie": "c=" + "x" * 16_000}
    assert httpx.get(f"{server.base}/health", headers=cookie).status_code == 200


def test_ws_refusals_are_close_codes_and_no_token_reaches_the_log(server, token):
    auth = {"Authorization": f"Token {token}"}
    started = httpx.post(f"{server.base}{FLOW}/start?sync=true", json={}, headers=auth)
    assert started.status_code == 200, started.text
    socket_path = f"/ws/core/workflows/chain-busy-leaf/instances/{started.json()['id']}/"
    ws_base = server.base.replace("http://", "ws://")
    forged = "f" * 40

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with websockets.connect(f"{ws_base}{socket_path}?token={token}") as live:
            seen["query"] = (await live.recv())[:1]
        async with websockets.connect(
            f"{ws_base}{socket_path}", subprotocols=offer("vnext", f"token.{token}")
        ) as live:
            seen["subprotocol"] = (live.subprotocol, (await live.recv())[:1])
        for name, url, offered in [
            ("bad query token", f"{socket_path}?token={forged}", None),
            ("bad subprotocol token", socket_path, offer("vnext", f"token.{forged}")),
            ("unknown instance", f"{NO_SUCH_INSTANCE}?token={token}", None),
            ("not a socket path", f"/api/v1/definitions/workflow/core?token={token}", None),
        ]:
            async with websockets.connect(f"{ws_base}{url}", subprotocols=offered) as refused:
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    await refused.recv()
                seen[name] = closed.value.rcvd.code if closed.value.rcvd else None
        return seen

    seen = asyncio.run(scenario())
    assert seen["query"] == "{"
    assert seen["subprotocol"] == ("vnext", "{")
    assert seen["bad query token"] == 4401
    assert seen["bad subprotocol token"] == 4401
    assert seen["unknown instance"] == 4404
    assert seen["not a socket path"] == 4404
    # The HTTP access log too: a token in any query string is redacted.
    httpx.get(f"{server.base}/api/v1/definitions/workflow/core?access_token={token}")
    time.sleep(0.5)
    log = server.output()
    assert '"WebSocket /ws/core/workflows/chain-busy-leaf/instances/' in log
    assert "token=[redacted]" in log
    assert token not in log.split("API token:", 1)[1].split("\n", 1)[1]
    assert forged not in log
    assert "Traceback" not in log
    assert "Exception in ASGI application" not in log


def test_a_forged_x_forwarded_for_does_not_lift_a_lockout(server):
    listing = f"{server.base}/api/v1/definitions/workflow/core"
    for _ in range(LOGIN_FAILURE_LIMIT):
        httpx.get(listing, auth=("ops", "wrong"))
    assert httpx.get(listing, auth=("ops", PASSWORD)).status_code == 429
    for forged in ("203.0.113.7", "10.0.0.1, 198.51.100.2"):
        again = httpx.get(listing, auth=("ops", PASSWORD), headers={"X-Forwarded-For": forged})
        assert again.status_code == 429, forged


def offer(*subprotocols: str) -> list[Subprotocol]:
    """The subprotocols a client offers, typed as websockets wants them."""
    return [Subprotocol(name) for name in subprotocols]


def _resident_bytes(server: RunningServer) -> int:
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    found = re.search(r"VmRSS:\s+(\d+) kB", status)
    assert found
    return int(found.group(1)) * 1024
