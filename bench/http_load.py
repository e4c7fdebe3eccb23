"""Load from several client processes (imported by spawned children: httpx only, no Django).

Each client process keeps one connection and, for `seconds`, either drives its own instance
through `ping -> pong -> ping ...` with sync PATCHes, or asks `GET /health`; it reports how many
requests it completed, their latencies, and any non-2xx answer."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

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
