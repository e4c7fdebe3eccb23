"""The serving layer in front of Django (vnext/serving.py), driven as an ASGI app: the body
reaches the app whole and only once it is all there, a chunked body over the cap is cut off as it
passes it, a client gone mid-body costs nothing; and the header-limited protocol imports in a
worker process before Django is set up; uvicorn believes X-Forwarded-For only when
FORWARDED_ALLOW_IPS names a proxy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
import uvicorn
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.test import override_settings

from tests.site.server import ROOT
from vnext.serving import ServingLayer
from workflows.management.commands.vnext_run import hardened_options


class Recorder:
    """An app that keeps what it received and answers 204."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.received.append(await receive())
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})


def post_scope(headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "path": "/api/v1/core/workflows/x/instances/start",
        "query_string": b"",
        "headers": headers or [],
    }


async def drive(app: Any, scope: dict[str, Any], messages: list[dict[str, Any]]) -> list[Any]:
    communicator = ApplicationCommunicator(app, scope)
    for message in messages:
        await communicator.send_input(message)
    sent = []
    try:
        while True:
            sent.append(await communicator.receive_output(1))
    except TimeoutError:
        pass
    await communicator.wait(1)
    return sent


def chunk(body: bytes, *, more: bool) -> dict[str, Any]:
    return {"type": "http.request", "body": body, "more_body": more}


def test_the_app_gets_the_body_whole_in_one_message():
    inner = Recorder()
    parts = [chunk(b'{"a":', more=True), chunk(b" 1", more=True), chunk(b"}", more=False)]
    sent = async_to_sync(drive)(ServingLayer(inner), post_scope(), parts)
    assert inner.received == [{"type": "http.request", "body": b'{"a": 1}', "more_body": False}]
    assert sent[0]["status"] == 204


@override_settings(VNEXT={"MAX_BODY_BYTES": 10})
def test_a_chunked_body_over_the_cap_is_refused_as_it_passes_it():
    inner = Recorder()
    parts = [chunk(b"x" * 6, more=True), chunk(b"x" * 6, more=True)]
    sent = async_to_sync(drive)(ServingLayer(inner), post_scope(), parts)
    assert inner.received == []
    assert sent[0]["status"] == 413
    assert (b"connection", b"close") in sent[0]["headers"]
    assert json.loads(sent[1]["body"])["errorCode"] == "App:900009"


def test_a_client_gone_mid_body_gets_nothing_and_costs_no_app_call():
    inner = Recorder()
    parts = [chunk(b"x", more=True), {"type": "http.disconnect"}]
    sent = async_to_sync(drive)(ServingLayer(inner), post_scope(), parts)
    assert (inner.received, sent) == ([], [])


@pytest.mark.django_db
def test_health_is_answered_without_the_app():
    inner = Recorder()
    scope = {**post_scope(), "method": "GET", "path": "/health"}
    sent = async_to_sync(drive)(ServingLayer(inner), scope, [chunk(b"", more=False)])
    assert inner.received == []
    assert sent[0]["status"] == 200
    assert json.loads(sent[1]["body"]) == {"status": "ok", "database": "ok"}


def test_the_header_limited_protocol_imports_before_django_is_set_up():
    # uvicorn imports the protocol before the app in each worker process of VNEXT_HTTP_WORKERS.
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "vnext.settings"}
    done = subprocess.run(
        [sys.executable, "-c", "import vnext.http_protocol"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("configured", "trusted"),
    [("", False), ("10.0.0.5", True), ("10.0.0.0/8,192.0.2.1", True)],
)
def test_proxy_headers_are_believed_only_from_forwarded_allow_ips(configured, trusted):
    with override_settings(VNEXT={"FORWARDED_ALLOW_IPS": configured}):
        options = hardened_options()
    config = uvicorn.Config("vnext.asgi:application", **options)
    assert config.proxy_headers is trusted
    if trusted:
        assert config.forwarded_allow_ips == configured
