"""Rate limits (vnext/throttling.py): starts per caller and per workflow, publish and long-polls
per caller, each refused with 429 `App:900008` problem+json and `Retry-After`, nothing written;
the cap on a caller's parked long-polls; and the counters shared by two server processes
through one Redis cache. (Off in the rest of the suite: tests/conftest.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.core.wsgi import get_wsgi_application
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from instances.api.longpoll import StateLongPoll, get_scope
from instances.models import Instance
from instances.services import RequestInfo, instance_start
from tests.conftest import OperatorFactory, UserFactory
from tests.instances.workflows import ping_pong, publish
from tests.site.api_worker import Worker, current_database_url
from workflows.models import Component

START = "/api/v1/core/workflows/{}/instances/start"
PUBLISH = "/api/v1/definitions/publish"
# Keys under a prefix of their own, in a database the long-poll test does not flush (13).
REDIS = "redis://127.0.0.1:6379/10"
REDIS_PREFIX = "i30-throttling"


def limits(settings: Any, **values: Any) -> None:
    settings.VNEXT = {**settings.VNEXT, **values}


def superuser(name: str) -> APIClient:
    client = APIClient()
    user: Any = UserFactory(username=name, is_superuser=True)
    client.force_authenticate(user)
    return client


def assert_throttled(response: Any) -> int:
    """A 429 problem answer; its Retry-After, in seconds."""
    assert response.status_code == 429, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["errorCode"] == "App:900008"
    retry_after = int(response["Retry-After"])
    assert 1 <= retry_after <= 3600
    return retry_after


@pytest.fixture
def workflows(db: None) -> None:
    publish(ping_pong(), ping_pong("ping-pong-2"))


@pytest.mark.django_db
@pytest.mark.usefixtures("workflows")
def test_starts_past_the_callers_rate_are_429_with_retry_after_and_start_nothing(settings):
    limits(settings, RATE_START_PER_CALLER="2/h")
    alice, bob = superuser("alice"), superuser("bob")
    assert alice.post(START.format("ping-pong"), {}, format="json").status_code < 300
    assert alice.post(START.format("ping-pong-2"), {}, format="json").status_code < 300
    assert_throttled(alice.post(START.format("ping-pong"), {}, format="json"))
    assert Instance.objects.count() == 2
    # Another caller has a budget of its own.
    assert bob.post(START.format("ping-pong"), {}, format="json").status_code < 300


@pytest.mark.django_db
@pytest.mark.usefixtures("workflows")
def test_starts_past_the_workflows_rate_are_429_for_every_caller(settings):
    limits(settings, RATE_START_PER_WORKFLOW="2/h")
    alice, bob = superuser("alice"), superuser("bob")
    assert alice.post(START.format("ping-pong"), {}, format="json").status_code < 300
    assert bob.post(START.format("ping-pong"), {}, format="json").status_code < 300
    assert_throttled(alice.post(START.format("ping-pong"), {}, format="json"))
    assert_throttled(bob.post(START.format("ping-pong"), {}, format="json"))
    # Another workflow has its own.
    assert bob.post(START.format("ping-pong-2"), {}, format="json").status_code < 300
    assert Instance.objects.filter(workflow_key="ping-pong").count() == 2


@pytest.mark.django_db
@pytest.mark.usefixtures("workflows")
def test_a_caller_refused_for_its_own_rate_does_not_use_up_the_workflows(settings):
    limits(settings, RATE_START_PER_CALLER="1/h", RATE_START_PER_WORKFLOW="2/h")
    alice, bob = superuser("alice"), superuser("bob")
    assert alice.post(START.format("ping-pong"), {}, format="json").status_code < 300
    for _ in range(3):
        assert_throttled(alice.post(START.format("ping-pong"), {}, format="json"))
    assert bob.post(START.format("ping-pong"), {}, format="json").status_code < 300


@pytest.mark.django_db
def test_publish_past_the_callers_rate_is_429_and_publishes_nothing(settings, corpus_doc):
    limits(settings, RATE_PUBLISH_PER_CALLER="1/h")
    client = superuser("publisher")
    first = corpus_doc("Schemas/payload-modes/payload-modes-input.json")
    second = corpus_doc("Workflows/payload-modes/payload-modes.json")
    assert client.post(PUBLISH, first, format="json").status_code == 200
    assert_throttled(client.post(PUBLISH, second, format="json"))
    assert Component.objects.count() == 1


# --- long-polls ----------------------------------------------------------------------------


@pytest.fixture
def polled(transactional_db: None, settings: Any) -> tuple[str, str]:
    """An instance and an operator's token; re-reads of parked requests far apart."""
    limits(settings, LONG_POLL_RECHECK_SECONDS=30.0)
    publish(ping_pong())
    outcome = instance_start(domain="core", workflow="ping-pong", body={}, info=RequestInfo())
    operator: Any = OperatorFactory()
    token = Token.objects.create(user=operator).key
    return str(outcome.instance.id), str(token)


def _scope(instance_id: str, token: str, wait: str, etag: str | None) -> dict[str, Any]:
    headers = [(b"authorization", f"Token {token}".encode())]
    if etag is not None:
        headers.append((b"if-none-match", f'"{etag}"'.encode()))
    path = f"/api/v1/core/workflows/ping-pong/instances/{instance_id}/functions/state"
    return dict(get_scope(path, headers, query=f"wait={wait}".encode(), server=("testserver", 80)))


class Poll:
    """One request to the long-poll app, answered or still parked."""

    def __init__(self, app: StateLongPoll, scope: dict[str, Any]) -> None:
        self.communicator = ApplicationCommunicator(app, scope)

    async def send(self) -> None:
        await self.communicator.send_input({"type": "http.request", "body": b""})

    async def answer(self, timeout: float = 10) -> tuple[int, dict[bytes, bytes], bytes]:
        start = await self.communicator.receive_output(timeout)
        body = await self.communicator.receive_output(timeout)
        headers = {name.lower(): value for name, value in start["headers"]}
        return start["status"], headers, body["body"]

    async def parked(self) -> bool:
        return bool(await self.communicator.receive_nothing(timeout=0.5))

    async def leave(self) -> None:
        await self.communicator.send_input({"type": "http.disconnect"})
        await self.communicator.wait(timeout=5)


def _etag(app: StateLongPoll, instance_id: str, token: str) -> str:
    async def read() -> bytes:
        poll = Poll(app, _scope(instance_id, token, "0", None))
        await poll.send()
        status, _, body = await poll.answer()
        assert status == 200
        return body

    return str(json.loads(async_to_sync(read)())["eTag"])


@pytest.mark.postgres
def test_long_polls_past_the_callers_rate_are_429_and_plain_reads_are_not_counted(polled, settings):
    limits(settings, RATE_LONG_POLL_PER_CALLER="2/h")
    instance_id, token = polled
    app = StateLongPoll(get_wsgi_application())
    for _ in range(3):
        _etag(app, instance_id, token)  # wait=0: a plain read, never counted

    async def scenario() -> list[tuple[int, dict[bytes, bytes], bytes]]:
        answers = []
        for _ in range(3):
            poll = Poll(app, _scope(instance_id, token, "5", "stale"))  # answered at once
            await poll.send()
            answers.append(await poll.answer())
        return answers

    first, second, third = async_to_sync(scenario)()
    assert (first[0], second[0]) == (200, 200)
    status, headers, body = third
    assert (status, headers[b"content-type"]) == (429, b"application/problem+json")
    assert json.loads(body)["errorCode"] == "App:900008"
    assert 1 <= int(headers[b"retry-after"]) <= 3600


@pytest.mark.postgres
def test_a_parked_long_polls_re_reads_are_not_counted(polled, settings):
    limits(settings, RATE_LONG_POLL_PER_CALLER="1/h", LONG_POLL_RECHECK_SECONDS=0.1)
    instance_id, token = polled
    app = StateLongPoll(get_wsgi_application())
    etag = _etag(app, instance_id, token)

    async def scenario() -> int:
        poll = Poll(app, _scope(instance_id, token, "1", etag))  # re-read every 0.1 s
        await poll.send()
        status, _, _ = await poll.answer()
        return status

    assert async_to_sync(scenario)() == 304


@pytest.mark.postgres
def test_a_caller_past_its_cap_of_parked_long_polls_is_429_at_once_until_one_ends(polled, settings):
    limits(settings, MAX_PARKED_POLLS_PER_CALLER=2)
    instance_id, token = polled
    other_user: Any = UserFactory(username="other", is_superuser=True)
    other = str(Token.objects.create(user=other_user).key)
    app = StateLongPoll(get_wsgi_application())
    etag = _etag(app, instance_id, token)

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        parked = [Poll(app, _scope(instance_id, token, "20", etag)) for _ in range(2)]
        for poll in parked:
            await poll.send()
        seen["two parked"] = [await poll.parked() for poll in parked]
        refused = Poll(app, _scope(instance_id, token, "20", etag))
        await refused.send()
        seen["third"] = await refused.answer()
        # Another caller's polls are counted apart.
        elsewhere = Poll(app, _scope(instance_id, other, "20", etag))
        await elsewhere.send()
        seen["other caller parked"] = await elsewhere.parked()
        await elsewhere.leave()
        # One of the two leaves: its slot is free again.
        await parked[0].leave()
        again = Poll(app, _scope(instance_id, token, "20", etag))
        await again.send()
        seen["after one left"] = await again.parked()
        for poll in (parked[1], again):
            await poll.leave()
        return seen

    seen = async_to_sync(scenario)()
    assert seen["two parked"] == [True, True]
    status, headers, body = seen["third"]
    assert (status, headers[b"content-type"], headers[b"retry-after"]) == (
        429,
        b"application/problem+json",
        b"1",
    )
    assert json.loads(body)["errorCode"] == "App:900008"
    assert seen["other caller parked"] is True
    assert seen["after one left"] is True


# --- across processes ----------------------------------------------------------------------


@pytest.fixture
def shared_cache_workers(transactional_db: None) -> Iterator[list[Worker]]:
    """Two server processes on this test database and one Redis cache, 2 starts per caller."""
    env = {
        "DATABASE_URL": current_database_url(),
        "CACHE_URL": REDIS,
        "TEST_CACHE_KEY_PREFIX": REDIS_PREFIX,
        "VNEXT_RATE_START_PER_CALLER": "2/h",
    }
    workers = [Worker(env), Worker(env)]
    try:
        yield workers
    finally:
        for worker in workers:
            worker.stop()
        client = redis.Redis.from_url(REDIS)
        for key in client.scan_iter(f"{REDIS_PREFIX}:*"):
            client.delete(key)


@pytest.mark.postgres
@pytest.mark.slow
def test_two_processes_on_one_redis_cache_share_a_callers_budget(shared_cache_workers):
    publish(ping_pong())
    operator: Any = OperatorFactory()
    token = str(Token.objects.create(user=operator).key)
    first, second = shared_cache_workers
    path = START.format("ping-pong")
    assert first.call("POST", token, path)[0] < 300
    assert second.call("POST", token, path)[0] < 300
    for worker in (first, second):
        status, retry_after = worker.call("POST", token, path)
        assert status == 429
        assert 1 <= int(retry_after) <= 3600
    assert Instance.objects.count() == 2
