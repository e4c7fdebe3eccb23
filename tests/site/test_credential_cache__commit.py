"""A revocation retires cached credentials again when its transaction commits
(`vnext/credential_cache.py`): another request that read the token or the grant while the
deleting transaction was still open (so it saw them, and cached them) is refused once the
deletion has committed, not when its cache entry expires."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection, transaction
from rest_framework.authtoken.models import Token
from rest_framework.exceptions import AuthenticationFailed

from tests.conftest import UserFactory
from vnext.authentication import CachedTokenAuthentication
from workflows.access import Right, has_right
from workflows.models import WorkflowGrant

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]


def elsewhere(call: Callable[[], Any]) -> Any:
    """`call` as another request would make it: another thread, its own connection."""

    def run() -> Any:
        try:
            return call()
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result(timeout=30)


@pytest.fixture
def settings_long_cache(settings: Any) -> None:
    # Long enough that only a retirement, not an expiry, can make the entry go.
    settings.VNEXT = {
        **settings.VNEXT,
        "TOKEN_CACHE_SECONDS": 600,
        "TOKEN_CACHE_LOCAL_SECONDS": 600,
    }


@pytest.mark.usefixtures("settings_long_cache")
def test_a_grant_read_while_its_deletion_was_uncommitted_is_refused_after_the_commit():
    user: Any = UserFactory()
    group = Group.objects.create(name="readers")
    user.groups.add(group)
    grant = WorkflowGrant.objects.create(group=group, domain="core", read_definitions=True)

    def may_read() -> bool:
        fresh = get_user_model().objects.get(pk=user.pk)  # a request's own user object
        return has_right(fresh, Right.READ_DEFINITIONS, "core")

    with transaction.atomic():
        grant.delete()
        assert elsewhere(may_read) is True  # the deletion is not committed: it still holds
    assert elsewhere(may_read) is False


@pytest.mark.usefixtures("settings_long_cache")
def test_a_token_read_while_its_deletion_was_uncommitted_is_refused_after_the_commit():
    user: Any = UserFactory()
    token = Token.objects.create(user=user)
    key = token.key  # the key is the primary key: a deleted token forgets it

    def authenticate() -> str:
        try:
            CachedTokenAuthentication().authenticate_credentials(key)
        except AuthenticationFailed:
            return "refused"
        return "accepted"

    with transaction.atomic():
        token.delete()
        assert elsewhere(authenticate) == "accepted"
    assert elsewhere(authenticate) == "refused"
