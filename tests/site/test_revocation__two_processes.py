"""Revocation reaches every server process within a second (`vnext/credential_cache.py`): two
other Django processes on the same PostgreSQL database each serve a token once (so each holds
it in its cache); then the user, the token or the grant goes, in this process, and both refuse.
With the default process-local cache they refuse once `TOKEN_CACHE_LOCAL_SECONDS` (1 s) has
passed since the revocation; with a shared Redis cache at once."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from django.contrib.auth.models import Group
from rest_framework.authtoken.models import Token

from tests.conftest import UserFactory
from tests.site.api_worker import Worker, current_database_url
from workflows.models import WorkflowGrant

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres, pytest.mark.slow]

# Keys under a prefix of their own, in a database the long-poll test does not flush (13).
REDIS = "redis://127.0.0.1:6379/10"
REDIS_PREFIX = "i30-revocation"
# 404: authenticated and granted, the definition does not exist; 401/403: refused.
URL = "/api/v1/definitions/workflow/core/none-such"
ACCEPTED, REFUSED = 404, (401, 403)
LOCAL_BOUND_SECONDS = 1.0


REDIS_CACHE = {
    "BACKEND": "django.core.cache.backends.redis.RedisCache",
    "LOCATION": REDIS,
    "KEY_PREFIX": REDIS_PREFIX,
}


@pytest.fixture(scope="module")
def worker_pairs(django_db_setup: Any, django_db_blocker: Any) -> Iterator[dict[str, list[Worker]]]:
    """Two processes on the default (process-local) cache, two on one Redis cache."""
    with django_db_blocker.unblock():
        url = current_database_url()
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
    assert [worker.status(caller.token.key, URL) for worker in workers] == [ACCEPTED, ACCEPTED]
    revoked_at = time.monotonic()
    revoke(caller)
    # Each process cached the token and the grants before the revocation began, for at most
    # the local bound: past it, both have to read them afresh.
    time.sleep(max(0.0, revoked_at + LOCAL_BOUND_SECONDS - time.monotonic()))
    assert [worker.status(caller.token.key, URL) in REFUSED for worker in workers] == [True, True]


@pytest.mark.parametrize("revoke", REVOCATIONS.values(), ids=REVOCATIONS.keys())
def test_with_a_shared_redis_cache_both_processes_refuse_at_once(
    worker_pairs, caller, revoke, settings
):
    settings.CACHES = {"default": REDIS_CACHE}
    workers = worker_pairs["redis"]
    assert [worker.status(caller.token.key, URL) for worker in workers] == [ACCEPTED, ACCEPTED]
    revoke(caller)
    assert [worker.status(caller.token.key, URL) in REFUSED for worker in workers] == [True, True]
