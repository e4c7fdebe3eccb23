"""Long-poll wake latency: 100 clients parked on one instance's state function (in one server
process, the in-memory channel layer), a transition commits, and each parked client's answer is
timed from the commit. Baseline, same run: one plain read of the state function (no waiting)
through the same stack, and the same read done by 100 clients at once."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.core.wsgi import get_wsgi_application
from django.db import connection, connections
from rest_framework.authtoken.models import Token

from bench.bench_transitions import INFO, prepare_database
from bench.summary import record
from bench.timing import percentile
from bench.transition_workflows import DOMAIN, NO_TASK
from instances.api.longpoll import StateLongPoll, get_scope
from instances.services import instance_start, instance_transition

CLIENTS = 100
ROUNDS = 5


def _scope(instance_id: str, token: str, etag: str | None, wait: str) -> dict[str, Any]:
    headers = [(b"authorization", f"Token {token}".encode())]
    if etag:
        headers.append((b"if-none-match", f'"{etag}"'.encode()))
    return dict(
        get_scope(
            f"/api/v1/{DOMAIN}/workflows/{NO_TASK}/instances/{instance_id}/functions/state",
            headers,
            query=f"wait={wait}".encode(),
            server=("127.0.0.1", 8000),
        )
    )


async def _answer(communicator: ApplicationCommunicator) -> tuple[int, bytes, float]:
    start = await communicator.receive_output(60)
    body = await communicator.receive_output(60)
    return start["status"], body["body"], time.perf_counter()


def main() -> None:
    """Park CLIENTS long-polls, commit a transition, time every wake from the commit."""
    # Persistent connections in every thread, as `make run` serves (vnext_run sets them).
    connections.settings["default"]["CONN_MAX_AGE"] = 300
    connection.settings_dict["CONN_MAX_AGE"] = 300
    prepare_database()  # publishes the bench's ping-pong workflows
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(username="bench-poller", is_superuser=True)
    token = str(Token.objects.get_or_create(user=user)[0].key)
    app = StateLongPoll(get_wsgi_application())
    instance_id = str(
        instance_start(domain=DOMAIN, workflow=NO_TASK, body={}, info=INFO).instance.id
    )
    state = {"now": "ping"}
    wakes: list[float] = []
    plain: list[float] = []
    burst: list[float] = []

    async def one_round() -> None:
        # Baselines: one plain read; CLIENTS plain reads at once.
        began = time.perf_counter()
        communicator = ApplicationCommunicator(app, _scope(instance_id, token, None, "0"))
        await communicator.send_input({"type": "http.request", "body": b""})
        status, body, ended = await _answer(communicator)
        assert status == 200
        plain.append((ended - began) * 1000)
        etag = json.loads(body)["eTag"]
        began = time.perf_counter()
        readers = [
            ApplicationCommunicator(app, _scope(instance_id, token, None, "0"))
            for _ in range(CLIENTS)
        ]
        for reader in readers:
            await reader.send_input({"type": "http.request", "body": b""})
        for reader in readers:
            burst.append((((await _answer(reader))[2]) - began) * 1000)
        # Park CLIENTS waiters, then commit one transition from another thread.
        parked = [
            ApplicationCommunicator(app, _scope(instance_id, token, etag, "30"))
            for _ in range(CLIENTS)
        ]
        for waiter in parked:
            await waiter.send_input({"type": "http.request", "body": b""})
        await asyncio.sleep(1.0)  # every one has read once and joined its group
        committed: dict[str, float] = {}

        def commit() -> None:
            key = "to-pong" if state["now"] == "ping" else "to-ping"
            instance_transition(
                domain=DOMAIN,
                workflow=NO_TASK,
                ref=instance_id,
                transition_key=key,
                body={},
                info=INFO,
            )
            committed["at"] = time.perf_counter()
            state["now"] = "pong" if key == "to-pong" else "ping"

        thread = threading.Thread(target=commit)
        thread.start()
        answers = [await _answer(waiter) for waiter in parked]
        thread.join()
        for status, _, at in answers:
            assert status == 200, status
            wakes.append((at - committed["at"]) * 1000)

    for _ in range(ROUNDS):
        async_to_sync(one_round)()
    p50, p95 = percentile(wakes, 0.5), percentile(wakes, 0.95)
    print(f"{CLIENTS} parked long-polls woken by one commit, {ROUNDS} rounds ({len(wakes)} wakes)")
    print(f"  wake latency from the commit: p50 {p50:.2f} ms  p95 {p95:.2f} ms")
    print(f"  one plain read (no wait):     p50 {percentile(plain, 0.5):.2f} ms")
    print(
        f"  {CLIENTS} plain reads at once:   p50 {percentile(burst, 0.5):.2f} ms  "
        f"p95 {percentile(burst, 0.95):.2f} ms (what the woken clients' re-reads cost)"
    )
    record(
        f"long-poll wake p50, {CLIENTS} parked",
        p50,
        "ms",
        baseline=f"{CLIENTS} plain reads at once, p50",
        baseline_value=percentile(burst, 0.5),
        target="<= 10 ms",
        met=p50 <= 10,
    )
    record(
        f"long-poll wake p95, {CLIENTS} parked",
        p95,
        "ms",
        baseline=f"{CLIENTS} plain reads at once, p95",
        baseline_value=percentile(burst, 0.95),
        target="<= 50 ms",
        met=p95 <= 50,
    )
