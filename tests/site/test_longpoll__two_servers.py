"""Two `make run` servers on one PostgreSQL database and one Redis channel layer: a client
parked in a long-poll on one server is woken by a transition made through the other, within the
change (the parked request's own re-read is an hour away)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import redis

from tests.site.server import vnext_server

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
DATABASE = "vnext_two_servers"
REDIS = "redis://127.0.0.1:6379/13"
AUTH = ("ops", "ops-secret-42")


@pytest.fixture
def shared_database() -> str:
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as db:
        db.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        db.execute(f"CREATE DATABASE {DATABASE}")
    redis.Redis.from_url(REDIS).flushdb()
    return f"postgres://postgres@127.0.0.1:5432/{DATABASE}"


def test_a_transition_through_one_server_wakes_a_client_parked_on_the_other(
    tmp_path: Path, shared_database: str
):
    env = {
        "DATABASE_URL": shared_database,
        "CHANNEL_LAYER_URL": REDIS,
        "VNEXT_HTTP_WORKERS": "1",
        "VNEXT_LONG_POLL_RECHECK_SECONDS": "3600",
        "VNEXT_OPERATOR_USERNAME": AUTH[0],
        "VNEXT_OPERATOR_PASSWORD": AUTH[1],
    }
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with vnext_server(tmp_path / "a", env) as first, vnext_server(tmp_path / "b", env) as second:
        flow = "/api/v1/core/workflows/chain-busy-leaf/instances"
        started = httpx.post(f"{first.base}{flow}/start?sync=true", json={}, auth=AUTH, timeout=30)
        assert started.status_code == 200, started.text
        instance = f"{flow}/{started.json()['id']}"
        etag = httpx.get(f"{second.base}{instance}/functions/state", auth=AUTH).headers["ETag"]
        answer: dict[str, Any] = {}

        def park() -> None:
            answer["response"] = httpx.get(
                f"{second.base}{instance}/functions/state?wait=30",
                auth=AUTH,
                headers={"If-None-Match": etag},
                timeout=40,
            )
            answer["at"] = time.monotonic()

        parked = threading.Thread(target=park)
        parked.start()
        time.sleep(1.0)
        assert parked.is_alive()  # held by the second server
        changed = time.monotonic()
        fired = httpx.patch(
            f"{first.base}{instance}/transitions/finish-leaf?sync=true",
            json={},
            auth=AUTH,
            timeout=30,
        )
        assert fired.status_code == 200, fired.text
        parked.join(timeout=40)

    response = answer["response"]
    assert (response.status_code, response.json()["state"]) == (200, "leaf-done")
    assert answer["at"] - changed < 5.0
