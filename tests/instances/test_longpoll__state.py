"""The state function as a long-poll (`?wait=N` with `If-None-Match`), through the ASGI app that
`make run` serves: a parked request answers within the change (woken by the change notification,
not by its re-read), 304 at the end of its wait, at once when the client's eTag is stale; bad
`wait` is 400 with its pointer; a client that goes away leaves no group membership behind; and
500 parked requests hold no thread each."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from asgiref.testing import ApplicationCommunicator
from channels.layers import get_channel_layer
from django.core.wsgi import get_wsgi_application
from rest_framework.authtoken.models import Token

from instances.api.longpoll import StateLongPoll, get_scope
from instances.services import RequestInfo, instance_start, instance_transition
from tests.instances.workflows import ping_pong, publish

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
BASE = "/api/v1/core/workflows/ping-pong/instances"


@pytest.fixture
def token(operator: Any) -> str:
    return str(Token.objects.create(user=operator).key)


@pytest.fixture
def instance_id(settings: Any) -> str:
    # Re-reads far apart: a quick answer can only come from the change notification.
    settings.VNEXT = {**settings.VNEXT, "LONG_POLL_RECHECK_SECONDS": 30.0}
    publish(ping_pong())
    outcome = instance_start(domain="core", workflow="ping-pong", body={}, info=RequestInfo())
    return str(outcome.instance.id)


def app() -> StateLongPoll:
    return StateLongPoll(get_wsgi_application())


def scope(instance_id: str, token: str, *, wait: str, etag: str | None) -> dict[str, Any]:
    headers = [(b"authorization", f"Token {token}".encode())]
    if etag is not None:
        headers.append((b"if-none-match", f'"{etag}"'.encode()))
    path = f"{BASE}/{instance_id}/functions/state"
    return dict(get_scope(path, headers, query=f"wait={wait}".encode(), server=("testserver", 80)))


def current_etag(instance_id: str, token: str) -> str:
    answer = async_to_sync(request)(scope(instance_id, token, wait="0", etag=None))
    assert answer[0] == 200
    return str(json.loads(answer[1])["eTag"])


async def request(request_scope: dict[str, Any], timeout: float = 10) -> tuple[int, bytes]:
    communicator = ApplicationCommunicator(app(), request_scope)
    await communicator.send_input({"type": "http.request", "body": b""})
    start = await communicator.receive_output(timeout)
    body = await communicator.receive_output(timeout)
    return start["status"], body["body"]


def fire(instance_id: str, key: str = "to-pong") -> None:
    instance_transition(
        domain="core", workflow="ping-pong", ref=instance_id, transition_key=key, body={},
        info=RequestInfo(actor="someone"),
    )  # fmt: skip


def test_a_parked_request_answers_within_the_change(instance_id, token):
    etag = current_etag(instance_id, token)

    async def scenario() -> tuple[int, bytes, float]:
        communicator = ApplicationCommunicator(
            app(), scope(instance_id, token, wait="20", etag=etag)
        )
        await communicator.send_input({"type": "http.request", "body": b""})
        assert await communicator.receive_nothing(timeout=0.5)  # parked
        changed = time.monotonic()
        await sync_to_async(fire, thread_sensitive=False)(instance_id)
        start = await communicator.receive_output(5)
        body = await communicator.receive_output(5)
        return start["status"], body["body"], time.monotonic() - changed

    status, body, waited = async_to_sync(scenario)()
    assert status == 200
    assert json.loads(body)["state"] == "pong"
    assert waited < 2.0, waited


def test_the_wait_ends_with_304_and_a_stale_etag_answers_at_once(instance_id, token):
    etag = current_etag(instance_id, token)
    started = time.monotonic()
    status, body = async_to_sync(request)(scope(instance_id, token, wait="1", etag=etag))
    assert (status, body) == (304, b"")
    assert 1.0 <= time.monotonic() - started < 5
    started = time.monotonic()
    status, body = async_to_sync(request)(scope(instance_id, token, wait="20", etag="stale"))
    assert status == 200
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("wait", ["soon", "-1", "nan"])
def test_a_bad_wait_is_400_with_its_pointer(instance_id, token, wait):
    status, body = async_to_sync(request)(scope(instance_id, token, wait=wait, etag="x"))
    problem = json.loads(body)
    assert (status, problem["errorCode"], problem["errors"][0]["pointer"]) == (
        400,
        "App:900002",
        "/wait",
    )


def test_an_unauthenticated_long_poll_is_refused_at_once(instance_id):
    status, _ = async_to_sync(request)(scope(instance_id, "not-a-token", wait="20", etag="x"))
    assert status in (401, 403)


def test_a_client_that_goes_away_leaves_nothing_behind(instance_id, token):
    etag = current_etag(instance_id, token)
    layer = get_channel_layer()

    async def scenario() -> None:
        communicator = ApplicationCommunicator(
            app(), scope(instance_id, token, wait="20", etag=etag)
        )
        await communicator.send_input({"type": "http.request", "body": b""})
        assert await communicator.receive_nothing(timeout=0.5)
        assert layer.groups.get(f"vnext.instance.{instance_id}")
        await communicator.send_input({"type": "http.disconnect"})
        await communicator.wait(timeout=5)

    async_to_sync(scenario)()
    assert not layer.groups.get(f"vnext.instance.{instance_id}")


def test_500_parked_requests_hold_no_thread_each_and_all_get_the_change(instance_id, token):
    etag = current_etag(instance_id, token)
    clients = 500

    async def scenario() -> tuple[list[int], int, int]:
        before = threading.active_count()
        communicators = [
            ApplicationCommunicator(app(), scope(instance_id, token, wait="30", etag=etag))
            for _ in range(clients)
        ]
        for communicator in communicators:
            await communicator.send_input({"type": "http.request", "body": b""})
        # Every request read the instance once, then parked.
        deadline = time.monotonic() + 30
        group = f"vnext.instance.{instance_id}"
        layer = get_channel_layer()
        while len(layer.groups.get(group, {})) < clients and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        parked_threads = threading.active_count() - before
        await sync_to_async(fire, thread_sensitive=False)(instance_id)
        statuses = []
        for communicator in communicators:
            start = await communicator.receive_output(10)
            await communicator.receive_output(10)
            statuses.append(start["status"])
        return statuses, parked_threads, len(layer.groups.get(group, {}))

    statuses, parked_threads, left = async_to_sync(scenario)()
    assert statuses == [200] * clients
    assert parked_threads < 40, parked_threads  # a bounded executor, not a thread per client
    assert left == 0
