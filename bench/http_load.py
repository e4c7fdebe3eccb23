"""Load from several client processes (imported by spawned children: httpx only, no Django).

Each client process keeps one connection and, for `seconds`, either drives its own instance
through `ping -> pong -> ping ...` with sync PATCHes, or asks `GET /health`, or runs `order`
workflows one after the other (start, submit, approve; `drive_orders`); it reports what it
completed, the latencies, and any non-2xx answer."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

NEXT = {"ping": "to-pong", "pong": "to-ping"}


@dataclass
class ClientResult:
    """What one client process did."""

    completed: int = 0
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def drive(base_url: str, token: str, path: str, seconds: float, transitions: bool) -> ClientResult:
    """Run one client for `seconds`: sync transitions on a new instance of `path`'s workflow
    when `transitions`, else `GET /health`."""
    result = ClientResult()
    headers = {"Authorization": f"Token {token}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=30.0) as client:
        state, ref = "ping", ""
        if transitions:
            started = client.post(f"{path}/start?sync=true", json={"attributes": {}})
            started.raise_for_status()
            ref = started.json()["id"]
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            if transitions:
                answer = client.patch(f"{path}/{ref}/transitions/{NEXT[state]}?sync=true", json={})
            else:
                answer = client.get("/health")
            result.latencies.append(time.perf_counter() - began)
            if answer.status_code >= 300:
                result.failures.append(f"{answer.status_code} {answer.text[:200]}")
                continue
            result.completed += 1
            if transitions:
                state = "pong" if state == "ping" else "ping"
    return result


@dataclass
class Burst:
    """What `count` requests fired at once got: statuses and latencies per status."""

    statuses: list[int] = field(default_factory=list)
    latencies: dict[int, list[float]] = field(default_factory=dict)


async def _burst(base_url: str, token: str, requests: list[tuple[str, str]]) -> Burst:
    result = Burst()
    headers = {"Authorization": f"Token {token}"}
    limits = httpx.Limits(max_connections=len(requests), max_keepalive_connections=0)
    async with httpx.AsyncClient(
        base_url=base_url, headers=headers, timeout=60.0, limits=limits
    ) as client:
        gate = asyncio.Event()

        async def one(method: str, url: str) -> None:
            await gate.wait()
            began = time.perf_counter()
            answer = await client.request(method, url, json={} if method == "PATCH" else None)
            elapsed = time.perf_counter() - began
            result.statuses.append(answer.status_code)
            result.latencies.setdefault(answer.status_code, []).append(elapsed)

        tasks = [asyncio.create_task(one(method, url)) for method, url in requests]
        await asyncio.sleep(0.2)  # every request waits at the gate
        gate.set()
        await asyncio.gather(*tasks)
    return result


def burst(base_url: str, token: str, requests: list[tuple[str, str]]) -> Burst:
    """Fire `requests` (method, url) at once from one process: they are all sent, then
    released together."""
    return asyncio.run(_burst(base_url, token, requests))


# (step, method, path under the instance (None: the start), body, the status it ends in)
ORDER_STEPS: tuple[tuple[str, str, str | None, dict[str, Any], str], ...] = (
    ("start", "POST", None, {"attributes": {}}, "A"),
    ("submit", "PATCH", "transitions/submit", {"attributes": {"amount": 250}}, "A"),
    ("approve", "PATCH", "transitions/approve", {"attributes": {"decision": "approved"}}, "C"),
)


def order_workflow(client: httpx.Client, path: str, steps: dict[str, list[float]]) -> str | None:
    """One `order` workflow through sync requests on `client`: start, submit, approve; each
    step's latency appended to `steps[step]`. None when every answer was 200 with the status
    the step ends in (Completed after `approve`) and the attributes it wrote, else what went
    wrong."""
    ref = ""
    for step, method, tail, body, status in ORDER_STEPS:
        url = f"{path}/start?sync=true" if tail is None else f"{path}/{ref}/{tail}?sync=true"
        began = time.perf_counter()
        answer = client.request(method, url, json=body)
        steps.setdefault(step, []).append(time.perf_counter() - began)
        if answer.status_code != 200:
            return f"{step}: {answer.status_code} {answer.text[:200]}"
        envelope = answer.json()
        written = body["attributes"].items() <= envelope.get("attributes", {}).items()
        if envelope.get("status") != status or not written:
            return f"{step}: answered {answer.text[:200]}"
        ref = ref or envelope["id"]
    return None


@dataclass
class OrderResult:
    """What one `order` client process did: workflows completed, each step's latencies."""

    completed: int = 0
    steps: dict[str, list[float]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def drive_orders(base_url: str, token: str, path: str, seconds: float) -> OrderResult:
    """Run one client for `seconds`: `order` workflows one after the other, on one connection."""
    result = OrderResult()
    headers = {"Authorization": f"Token {token}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=30.0) as client:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            failure = order_workflow(client, path, result.steps)
            if failure is None:
                result.completed += 1
            else:
                result.failures.append(failure)
    return result
