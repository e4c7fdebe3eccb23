"""Revocation reaches every server process within a second (`vnext/credential_cache.py`): two
other Django processes on the same PostgreSQL database each serve a token once (so each holds
it in its cache); then the user, the token or the grant goes, in this process, and both refuse.
With the default process-local cache they refuse once `TOKEN_CACHE_LOCAL_SECONDS` (1 s) has
passed since the revocation; with a shared Redis cache at once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from django.contrib.auth.models import Group
from django.db import connection
from rest_framework.authtoken.models import Token

from tests.conftest import UserFactory
from workflows.models import WorkflowGrant

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
REDIS = "redis://127.0.0.1:6379/13"
REDIS_PREFIX = "i30-revocation"
# 404: authenticated and granted, the definition does not exist; 401/403: refused.
URL = "/api/v1/definitions/workflow/core/none-such"
ACCEPTED, REFUSED = 404, (401, 403)
LOCAL_BOUND_SECONDS = 1.0


class Worker:
    """`python -m tests.site.api_worker`: another server process with its own cache."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.site.api_worker"],
            cwd=ROOT,
            env={**os.environ, **env},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._line() == "ready"

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"the worker exited with {self.process.poll()}"
        return line.strip()

    def status(self, token: str) -> int:
        """The status of `GET URL` with the token, as this process answers it."""
        assert self.process.stdin is not None
        self.process.stdin.write(f"{token} {URL}\n")
        self.process.stdin.flush()
        return int(self._line())

    def stop(self) -> None:
        """Close its input (it exits), and wait."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        finally:
            if self.process.poll() is None:
                self.process.kill()


def _test_database_url() -> str:
    db = connection.settings_dict
    credentials = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{credentials}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


REDIS_CACHE = {
    "BACKEND": "django.core.cache.backends.redis.RedisCache",
    "LOCATION": REDIS,
    "KEY_PREFIX": REDIS_PREFIX,
}


@pytest.fixture(scope="module")
def worker_pairs(django_db_setup: Any, django_db_blocker: Any) -> Iterator[dict[str, list[Worker]]]:
    """Two processes on the default (process-local) cache, two on one Redis cache."""
    with django_db_blocker.unblock():
        url = _test_database_url()
    env = {"DATABASE_URL": url, "CACHE_URL": "locmemcache://"}
    shared = {**env, "CACHE_URL": REDIS, "TEST_CACHE_KEY_PREFIX": REDIS_PREFIX}
    pairs = {"local": [Worker(env), Worker(env)], "redis": [Worker(shared), Worker(shared)]}
    try:
        yield pairs
    finally:
        for pair in pairs.values():
            for worker in pair:
                worker.stop()
        client = redis.Redis.from_url(REDIS)
        for key in client.scan_iter(f"{REDIS_PREFIX}:*"):
            client.delete(key)


@dataclass
class Caller:
    """A user who reads definitions of domain `core` through a group's grant, with a token."""

    user: Any
    token: Token
    group: Group
    grant: WorkflowGrant


@pytest.fixture
def caller() -> Caller:
    user: Any = UserFactory()
    group = Group.objects.create(name=f"readers-{user.pk}")
    user.groups.add(group)
    grant = WorkflowGrant.objects.create(group=group, domain="core", read_definitions=True)
    return Caller(user, Token.objects.create(user=user), group, grant)


def _deactivate(caller: Caller) -> None:
    caller.user.is_active = False
    caller.user.save()


def _narrow_grant(caller: Caller) -> None:
    caller.grant.read_definitions = False
    caller.grant.save()


REVOCATIONS: dict[str, Callable[[Caller], Any]] = {
    "user deleted": lambda caller: caller.user.delete(),
    "user deactivated": _deactivate,
    "token deleted": lambda caller: caller.token.delete(),
    "grant deleted": lambda caller: caller.grant.delete(),
    "grant changed": _narrow_grant,
    "membership removed": lambda caller: caller.user.groups.remove(caller.group),
}


@pytest.mark.parametrize("revoke", REVOCATIONS.values(), ids=REVOCATIONS.keys())
def test_with_the_default_local_cache_both_processes_refuse_within_a_second(
    worker_pairs, caller, revoke
):
    workers = worker_pairs["local"]
    assert [worker.status(caller.token.key) for worker in workers] == [ACCEPTED, ACCEPTED]
    revoked_at = time.monotonic()
    revoke(caller)
    # Each process cached the token and the grants before the revocation began, for at most
    # the local bound: past it, both have to read them afresh.
    time.sleep(max(0.0, revoked_at + LOCAL_BOUND_SECONDS - time.monotonic()))
    assert [worker.status(caller.token.key) in REFUSED for worker in workers] == [True, True]


@pytest.mark.parametrize("revoke", REVOCATIONS.values(), ids=REVOCATIONS.keys())
def test_with_a_shared_redis_cache_both_processes_refuse_at_once(
    worker_pairs, caller, revoke, settings
):
    settings.CACHES = {"default": REDIS_CACHE}
    workers = worker_pairs["redis"]
    assert [worker.status(caller.token.key) for worker in workers] == [ACCEPTED, ACCEPTED]
    revoke(caller)
    assert [worker.status(caller.token.key) in REFUSED for worker in workers] == [True, True]
