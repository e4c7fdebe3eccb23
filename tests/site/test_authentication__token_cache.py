"""API tokens (`vnext/authentication.py`): the token's user is looked up once and then served
from the cache, and a deleted token or a deactivated user is refused at once, not when the
cached entry expires. (Other processes: tests/site/test_revocation__two_processes.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.conftest import OperatorFactory
from vnext.credential_cache import credential_cache_seconds

pytestmark = pytest.mark.django_db

URL = "/api/v1/definitions/workflow/core/none-such"


@pytest.fixture(autouse=True)
def _cached_a_minute(settings):
    # The process-local bound (1 s) could pass between two calls on a loaded machine: these
    # tests are about what the cache serves and what retires it, not about its lifetime.
    settings.VNEXT = {**settings.VNEXT, "TOKEN_CACHE_LOCAL_SECONDS": 60.0}


@pytest.fixture
def token(db: None) -> Token:
    user: Any = OperatorFactory()
    created: Token = Token.objects.create(user=user)
    return created


def call(key: str) -> tuple[int, int]:
    """The status of an authenticated API call, and how many queries read a token."""
    client = APIClient()
    with CaptureQueriesContext(connection) as queries:
        response = client.get(URL, headers={"Authorization": f"Token {key}"})
    lookups = sum("authtoken_token" in query["sql"] for query in queries.captured_queries)
    return response.status_code, lookups


def test_the_token_is_read_once_then_served_from_the_cache(token):
    # 404: authenticated, and the definition does not exist.
    assert call(token.key) == (404, 1)
    assert call(token.key) == (404, 0)
    assert call("not-a-token")[0] == 401


def test_a_deleted_token_is_refused_at_once(token):
    assert call(token.key)[0] == 404
    token.delete()
    assert call(token.key)[0] == 401


def test_a_deactivated_user_is_refused_at_once(token):
    assert call(token.key)[0] == 404
    token.user.is_active = False
    token.user.save()
    assert call(token.key)[0] == 401


def test_no_caching_when_the_setting_is_zero(token, settings):
    settings.VNEXT = {**settings.VNEXT, "TOKEN_CACHE_SECONDS": 0}
    assert call(token.key) == (404, 1)
    assert call(token.key) == (404, 1)


def test_a_login_does_not_forget_the_token_but_deactivation_through_update_fields_does(token):
    assert call(token.key) == (404, 1)
    # A login saves only `last_login`: the cached lookup stays.
    token.user.save(update_fields=["last_login"])
    assert call(token.key) == (404, 0)
    token.user.is_active = False
    token.user.save(update_fields=["is_active"])
    assert call(token.key)[0] == 401


def test_a_process_local_cache_keeps_a_token_at_most_the_local_bound(settings):
    settings.VNEXT = {
        **settings.VNEXT,
        "TOKEN_CACHE_SECONDS": 60.0,
        "TOKEN_CACHE_LOCAL_SECONDS": 1.0,
    }
    assert credential_cache_seconds() == 1.0
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:6379/13",
        }
    }
    # A shared cache: every process sees a retirement at once, so the longer lifetime applies.
    assert credential_cache_seconds() == 60.0
