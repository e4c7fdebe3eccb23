"""Local peers of the named-target and SOAP task tests, each on a free loopback port: a JSON echo
server (`/status/N` answers N), a SOAP service (a canned WSGI app on wsgiref), an SMTP server
(aiosmtpd) that keeps what it received and refuses the recipients it is told to; and the
workflow the tests run (`idle --call--> called`, a Rollback to `gave-up` on one error code, an
Abort on any other)."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from tests.engine.builders import state, transition, workflow
from workflows.services import component_publish

BASE = "/api/v1/core/workflows/calls/instances"


class _Echo(BaseHTTPRequestHandler):
    def _route(self) -> None:
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        status = int(url.path.rsplit("/", 1)[1]) if "/status/" in url.path else 200
        payload = {
            "method": self.command,
            "path": url.path,
            "query": {k: v[0] for k, v in parse_qs(url.query).items()},
            "authorization": self.headers.get("Authorization"),
            "x_test": self.headers.get("X-Test"),
            "body": body,
        }
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _route

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def echo_server() -> Iterator[str]:
    """A JSON echo (method, path, query, Authorization, X-Test, body); yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


SOAP_11 = "http://schemas.xmlsoap.org/soap/envelope/"
BALANCE = """<?xml version="1.0" encoding="utf-8"?>
<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/">
  <soap:Body>
    <b:GetBalanceResponse xmlns:b="urn:bank">
      <b:account>{account}</b:account>
      <b:balance currency="TRY">120.50</b:balance>
      <b:action>{action}</b:action>
    </b:GetBalanceResponse>
  </soap:Body>
</soap:Envelope>"""
FAULT = """<?xml version="1.0" encoding="utf-8"?>
<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/">
  <soap:Body>
    <soap:Fault>
      <faultcode>soap:Client</faultcode>
      <faultstring>Account {account} is closed</faultstring>
    </soap:Fault>
  </soap:Body>
</soap:Envelope>"""


def _soap_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """GetBalance: its balance; account `closed-*` a fault (HTTP 500); a request that is no SOAP
    1.1 envelope (wrong content type, no envelope) a 400."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    request = environ["wsgi.input"].read(length).decode()
    action = environ.get("HTTP_SOAPACTION", "")
    if not environ.get("CONTENT_TYPE", "").startswith("text/xml") or SOAP_11 not in request:
        start_response("400 Bad Request", [("Content-Type", "text/plain")])
        return [b"not a SOAP 1.1 request"]
    match = re.search(r"<(?:\w+:)?account>([^<]*)</", request)
    account = match.group(1) if match else ""
    closed = account.startswith("closed")
    status = "500 Internal Server Error" if closed else "200 OK"
    start_response(status, [("Content-Type", "text/xml; charset=utf-8")])
    return [(FAULT if closed else BALANCE).format(account=account, action=action).encode()]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def soap_server() -> Iterator[str]:
    """The SOAP service on wsgiref; yields its URL (`http://127.0.0.1:<port>/bank`)."""
    server: WSGIServer = make_server("127.0.0.1", 0, _soap_app, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/bank"
    finally:
        server.shutdown()
        server.server_close()


class _Mailbox:
    """What the SMTP server received; it refuses the recipients in `refuse` with a 550."""

    def __init__(self, refuse: frozenset[str]) -> None:
        self.refuse = refuse
        self.messages: list[tuple[str, list[str], Message]] = []

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: Any
    ) -> str:
        if address in self.refuse:
            return "550 5.1.1 mailbox unavailable"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.content if isinstance(envelope.content, bytes) else b""
        self.messages.append(
            (str(envelope.mail_from), list(envelope.rcpt_tos), message_from_bytes(content))
        )
        return "250 Message accepted"


def free_port() -> int:
    """A loopback port nothing listens on (now)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def smtp_server(refuse: frozenset[str] = frozenset()) -> Iterator[tuple[int, _Mailbox]]:
    """An SMTP server on a free loopback port; yields (port, mailbox)."""
    mailbox = _Mailbox(refuse)
    port = free_port()  # aiosmtpd's readiness check connects to the port it was given
    controller = Controller(mailbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield port, mailbox
    finally:
        controller.stop()


def task_component(key: str, task_type: str, config: dict[str, Any]) -> dict[str, Any]:
    """A task component of `task_type` with `config`."""
    return {
        "key": key,
        "domain": "core",
        "version": "1.0.0",
        "flow": "sys-tasks",
        "flowVersion": "1.0.0",
        "tags": ["test"],
        "attributes": {"type": task_type, "config": config},
    }


def calls_workflow(key: str, mapping: str, rollback_on: str) -> dict[str, Any]:
    """`idle --call--> called` running task `key` with `mapping`; its error boundary rolls a
    failure coded `rollback_on` back to `gave-up`, and aborts on any other."""
    reference = {
        "order": 1,
        "task": {"key": key, "domain": "core", "version": "1.0.0", "flow": "sys-tasks"},
        "mapping": {"location": "./src/Call.py", "code": mapping, "encoding": "NAT"},
        "errorBoundary": {
            "onError": [
                {"action": 2, "errorCodes": [rollback_on], "transition": "give-up"},
                {"action": 0, "errorCodes": ["*"]},
            ]
        },
    }
    return workflow(
        [
            state(
                "idle",
                1,
                [
                    transition("call", "called", onExecutionTasks=[reference]),
                    transition("give-up", "gave-up"),
                ],
            ),
            state("called", 2),
            state("gave-up", 2),
        ],
        key="calls",
    )


def run_call(client: Any, data: dict[str, Any]) -> tuple[str, Any]:
    """Start an instance with `data` and run `call`, both sync; (its id, the call's answer)."""
    created = client.post(f"{BASE}/start?sync=true", data, format="json").json()
    response = client.patch(f"{BASE}/{created['id']}/transitions/call?sync=true", {}, format="json")
    return created["id"], response


def publish(*documents: dict[str, Any]) -> None:
    """Publish `documents` in order (the task first)."""
    for document in documents:
        component_publish(document=document)
