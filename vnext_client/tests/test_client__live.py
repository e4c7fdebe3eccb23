"""The client library against a live server started as `make run` starts it (`manage.py
vnext_run`, examples loaded, the operator account), once for the module: start (sync and a 202
followed), transitions, the state and data functions, `watch` through the long-poll, 409 Busy
backed off, filtered and paged lists, retry of a faulted instance and typed errors with `Client`;
the same paths (but retry, the same operation) with `AsyncClient`; and the README's "Python
client" example run as written."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.site.server import ROOT, vnext_server
from vnext_client import (
    AsyncClient,
    Busy,
    Client,
    InvalidFilter,
    NotFound,
    RetryPolicy,
    Unauthorized,
    ValidationError,
    column,
    data,
)

pytestmark = pytest.mark.slow

README = ROOT / "README.md"
MANAGEMENT = ("core", "instance-management-test-workflow")
# A human state whose long-poll interaction pauses the run: the instance stays Busy (409 to
# any transition) until the long-poll is acknowledged by a `chain.admin`.
PAUSING = ("core", "authorization-chain-lab-leaf")
LAB = ("core", "error-boundary-lab")
SCRIPT_FAILURE = "Task:Script:eb-script-fail-task:500"
# Back-off capped low: the tests wait for an acknowledgement due in well under a second.
QUICK_BACK_OFF = RetryPolicy(attempts=30, base_delay=0.05, max_delay=0.3)


def readme_section() -> str:
    """The README's "Python client" section."""
    text = README.read_text()
    start = text.index("\n## Python client\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def readme_example() -> str:
    """The first Python code block of that section."""
    match = re.search(r"```python\n(.*?)```", readme_section(), re.DOTALL)
    assert match is not None, "no python block in README's Python client section"
    return match.group(1)


def readme_password() -> str:
    """The operator password the section tells `make run` to use."""
    match = re.search(r"VNEXT_OPERATOR_PASSWORD=(\S+) make run", readme_section())
    assert match is not None
    return match.group(1)


@dataclass
class Live:
    """The running server and the operator's credentials."""

    base: str
    auth: tuple[str, str]

    def client(self, **options: Any) -> Client:
        return Client(self.base, auth=self.auth, **options)

    def async_client(self, **options: Any) -> AsyncClient:
        return AsyncClient(self.base, auth=self.auth, **options)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    folder = tmp_path_factory.mktemp("vnext-client-live")
    password = readme_password()
    env = {
        "VNEXT_OPERATOR_USERNAME": "operator",
        "VNEXT_OPERATOR_PASSWORD": password,
        # As `make run` sets it (the examples' mock API); nothing here calls it.
        "VNEXT_EGRESS_ALLOW_HOSTS": "localhost:3001",
    }
    with vnext_server(folder, env) as server:
        # The operator acknowledges the pausing state's long-poll: its roles say `chain.admin`.
        # Added before any API request, so no cached credential predates it.
        subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", GRANT_CHAIN_ADMIN],
            cwd=ROOT,
            env={
                **{k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
                "DATABASE_URL": f"sqlite:///{folder / 'vnext.sqlite3'}",
            },
            check=True,
            capture_output=True,
        )
        yield Live(server.base, ("operator", password))


GRANT_CHAIN_ADMIN = (
    "from django.contrib.auth.models import Group, User; "
    "User.objects.get(username='operator').groups.add("
    "Group.objects.get_or_create(name='chain.admin')[0])"
)


class Recording(httpx.HTTPTransport):
    """The real transport, remembering each request's method, path, query, If-None-Match and
    the answer's status."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str, dict[str, str], str | None, int]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        self.seen.append(
            (
                request.method,
                request.url.path,
                dict(request.url.params),
                request.headers.get("If-None-Match"),
                response.status_code,
            )
        )
        return response


class AsyncRecording(httpx.AsyncHTTPTransport):
    """`Recording` for the async client: the statuses answered."""

    def __init__(self) -> None:
        super().__init__()
        self.statuses: list[int] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        self.statuses.append(response.status_code)
        return response


def later(seconds: float, action: Any, *args: Any) -> threading.Thread:
    """Run `action(*args)` in a thread after `seconds`."""

    def run() -> None:
        time.sleep(seconds)
        action(*args)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


# --- Client ----------------------------------------------------------------------------------


def test_start_sync_answers_the_instance_and_a_202_is_followed_until_done(live):
    with live.client() as client:
        started = client.start(*MANAGEMENT, {"category": "finance", "priority": "2"})
        assert (started.accepted, started.status) == (False, "A")
        # The start mapping ran: the data is the workflow's, not only what was sent.
        assert started.attributes["priority"] == 2
        assert started.attributes["testStarted"] is True
        assert started.etag

        accepted = client.start(*MANAGEMENT, {"category": "queued"}, sync=False, follow=False)
        assert (accepted.accepted, accepted.status) == (True, "B")
        assert accepted.location is not None
        assert accepted.location.endswith(f"/instances/{accepted.id}")

        followed = client.start(*MANAGEMENT, {"category": "queued"}, sync=False)
        assert (followed.accepted, followed.status) == (True, "A")
        assert followed.attributes["testStarted"] is True
        assert client.get(followed).state == "active-state"


def test_transition_then_the_state_and_data_functions(live):
    with live.client() as client:
        order = client.start(*MANAGEMENT, {"category": "transitions"})
        before = client.state(order)
        assert (before.state, before.status) == ("active-state", "A")
        assert before.transition_names == ["process", "fast-complete"]

        moved = client.transition(order, "process", {"note": "looked at"})

        assert (moved.status, moved.attributes["note"]) == ("A", "looked at")
        after = client.state(order)
        assert after.state == "processing-state"
        assert {"finish", "reject"} <= set(after.transition_names)
        assert after.etag != before.etag
        assert client.data(order).data["note"] == "looked at"
        instance = client.get(order)
        assert (instance.state, instance.metadata.created_by) == ("processing-state", "operator")
        assert [row.transition_key for row in client.history(order)][-1] == "process"


def test_watch_sees_each_state_through_the_long_poll_until_completed(live):
    recording = Recording()
    with live.client(transport=recording, long_poll_seconds=20) as client, live.client() as driver:
        order = client.start(*MANAGEMENT, {"category": "watched"})
        following = {"active-state": "process", "processing-state": "finish"}
        seen = []
        began = time.monotonic()
        for state in client.watch(order, timeout=30):
            seen.append((state.state, state.status))
            if state.state in following:
                # Fired while the watcher is parked on the server: the change wakes it.
                later(0.3, driver.transition, order, following[state.state])
        elapsed = time.monotonic() - began

    assert seen == [("active-state", "A"), ("processing-state", "A"), ("completed-state", "C")]
    # Woken by the changes, not by the 20 s wait running out.
    assert elapsed < 15
    polls = [entry for entry in recording.seen if entry[1].endswith("/functions/state")]
    assert polls[0][2:4] == ({}, None)  # the first read is plain
    assert all(params.get("wait") == "20" and etag for _, _, params, etag, _ in polls[1:])
    assert [status for *_, status in polls].count(200) == 3


def test_a_busy_instance_is_backed_off_until_it_is_free(live):
    recording = Recording()
    quick = live.client(transport=recording, retry=QUICK_BACK_OFF)
    with quick as client, live.client() as other:
        paused = client.start(*PAUSING)
        assert paused.status == "B"  # paused for the long-poll acknowledgement
        impatient = live.client(retry=RetryPolicy(attempts=1))
        with impatient, pytest.raises(Busy) as refused:
            impatient.transition(paused, "finish-leaf")
        assert (refused.value.status, refused.value.code) == (409, "Instance:100031")
        assert refused.value.instance_id == paused.id

        acked = later(0.6, other.ack, paused)
        began = time.monotonic()
        done = client.transition(paused, "finish-leaf")
        waited = time.monotonic() - began
        acked.join(10)

    assert done.status == "C"
    assert waited >= 0.5  # it waited for the acknowledgement instead of failing
    runs = [status for method, _, _, _, status in recording.seen if method == "PATCH"]
    assert runs[-1] == 200
    assert runs[:-1]
    assert set(runs[:-1]) == {409}


def test_list_with_a_filter_and_every_page(live):
    category = f"paged-{uuid.uuid4().hex[:8]}"
    with live.client() as client:
        waiting = client.start(*MANAGEMENT, {"category": category})
        done = client.start(*MANAGEMENT, {"category": category})
        client.transition(done, "fast-complete")
        mine = data("category").eq(category)

        first = client.list(*MANAGEMENT, filter=mine, page_size=1)
        assert (len(first.items), first.has_next) == (1, True)
        assert first.items[0].attributes["category"] == category
        pages = list(client.pages(*MANAGEMENT, filter=mine, page_size=1))
        assert [len(page.items) for page in pages] == [1, 1]
        assert pages[-1].has_next is False
        every = {item.id for item in client.iter_instances(*MANAGEMENT, filter=mine, page_size=1)}
        assert every == {waiting.id, done.id}
        active = client.list(*MANAGEMENT, filter=mine & column("status").eq("Active"))
        assert [item.id for item in active.items] == [waiting.id]
        completed = client.list(*MANAGEMENT, filter=[mine, '{"status": {"eq": "C"}}'])
        assert [(item.id, item.state) for item in completed.items] == [(done.id, "completed-state")]


def test_retry_of_a_faulted_instance(live):
    with live.client() as client:
        case = client.start(*LAB, {"testId": "client", "shouldFail": True})

        faulted = client.transition(case, "case-retry-endpoint")

        assert faulted.faulted
        assert faulted.error is not None
        assert faulted.error.code == SCRIPT_FAILURE
        assert "retry" in client.state(case).transition_names
        fixed = client.retry(case, {"shouldFail": False})
        assert (fixed.status, fixed.attributes["scriptRecovered"]) == ("C", True)
        assert fixed.retried_transition_id
        with pytest.raises(ValidationError) as again:
            client.retry(case)
        assert (again.value.status, again.value.code) == (400, "Instance:100027")


def test_errors_are_typed_with_their_codes_and_pointers(live):
    with live.client() as client:
        with pytest.raises(NotFound) as missing:
            client.get(client.ref(*MANAGEMENT, "00000000-0000-0000-0000-000000000001"))
        assert (missing.value.status, missing.value.code) == (404, "Instance:100017")
        with pytest.raises(NotFound) as no_workflow:
            client.start("core", "no-such-workflow")
        assert no_workflow.value.code == "Instance:100015"

        with pytest.raises(ValidationError) as invalid:
            client.start("core", "payload-modes", {"session": "s-1", "customer": {}})
        assert invalid.value.status == 400
        assert invalid.value.pointers == ["/attributes/customer/ownerUserId"]
        assert invalid.value.errors[0].message

        with pytest.raises(InvalidFilter) as bad_filter:
            client.list(*MANAGEMENT, filter={"status": {"resembles": "A"}})
        assert bad_filter.value.code == "unsupported_operator"
        assert "eq" in bad_filter.value.extra["supportedOperators"]

    with Client(live.base, token="not-a-token") as stranger, pytest.raises(Unauthorized) as denied:
        stranger.list(*MANAGEMENT)
    assert denied.value.status == 401


# --- AsyncClient -----------------------------------------------------------------------------


def test_the_async_client_does_the_same(live):
    async def scenario() -> None:
        recording = AsyncRecording()
        async with (
            live.async_client(transport=recording, retry=QUICK_BACK_OFF) as client,
            live.async_client() as driver,
        ):
            category = f"async-{uuid.uuid4().hex[:8]}"
            order = await client.start(*MANAGEMENT, {"category": category}, sync=False)
            assert (order.accepted, order.status) == (True, "A")
            assert (await client.state(order)).state == "active-state"

            following = {"active-state": "process", "processing-state": "finish"}
            seen = []
            async for state in client.watch(order, timeout=30):
                seen.append(state.state)
                if state.state in following:
                    asyncio.get_running_loop().call_later(
                        0.3,
                        asyncio.ensure_future,
                        driver.transition(order, following[state.state]),
                    )
            assert seen == ["active-state", "processing-state", "completed-state"]

            other = await client.start(*MANAGEMENT, {"category": category})
            listed = [
                i.id
                async for i in client.iter_instances(
                    *MANAGEMENT, filter=data("category").eq(category), page_size=1
                )
            ]
            assert sorted(listed) == sorted([order.id, other.id])

            paused = await client.start(*PAUSING)
            recording.statuses.clear()
            ack = asyncio.get_running_loop().call_later(
                0.6, asyncio.ensure_future, driver.ack(paused)
            )
            done = await client.transition(paused, "finish-leaf")
            ack.cancel()
            assert done.status == "C"
            assert 409 in recording.statuses

            with pytest.raises(NotFound) as missing:
                await client.state(client.ref(*MANAGEMENT, "no-such-key"))
            assert missing.value.code == "Instance:100017"

    asyncio.run(scenario())


# --- the README ------------------------------------------------------------------------------


def test_the_readme_example_works_as_written(live):
    example = readme_example()
    assert len(example.strip().splitlines()) <= 10
    # As written but for where the server listens (`make run`: 127.0.0.1:8000).
    assert "http://127.0.0.1:8000" in example
    source = example.replace("http://127.0.0.1:8000", live.base)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(source, str(README), "exec"), {"__name__": "readme_example"})
    lines = printed.getvalue().splitlines()
    assert lines[0].endswith("['process', 'fast-complete']")
    assert "completed-state C" in lines
    assert lines[-1].startswith("finance:")
    assert int(lines[-1].split()[-1]) >= 1


@pytest.fixture(autouse=True)
def _no_stray_threads() -> Iterator[None]:
    # A `later` thread that outlives its test would act on the next test's server calls.
    before = set(threading.enumerate())
    yield
    for thread in set(threading.enumerate()) - before:
        if thread.daemon:
            thread.join(10)
