"""API token authentication with the token's user remembered in Django's cache.

DRF's `TokenAuthentication` reads the token and its user on every request: one query, and on
this machine about 1.7 ms of a 4 ms transition request, most of it building the ORM query. The
user is kept in the `default` cache (`vnext/credential_cache.py`: `VNEXT_TOKEN_CACHE_SECONDS` in
a shared cache, at most `VNEXT_TOKEN_CACHE_LOCAL_SECONDS` in a process-local one). Deleting the
token or its user, or saving the user's credentials (deactivated, new password), retires the
entry: at once in this process and, with a shared cache, in every other; with a per-process
cache, other processes re-read it within the local bound.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.core.cache import cache
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BasicAuthentication, TokenAuthentication

from vnext.credential_cache import credential_cache_key, credential_cache_seconds


def _cache_key(token_key: str) -> str:
    # The key itself is a credential: the cache sees only its digest.
    return credential_cache_key("token", hashlib.sha256(token_key.encode()).hexdigest())


class CachedTokenAuthentication(TokenAuthentication):
    """`Authorization: Token <key>`, the lookup cached (see the module docstring)."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        """The token's active user and the token, from the cache when it is there."""
        seconds = credential_cache_seconds()
        if seconds <= 0:
            return super().authenticate_credentials(key)
        # The key (and its generation) is taken before the database is read: an entry written
        # from rows a concurrent revocation is deleting lands under the retired generation.
        cache_key = _cache_key(key)
        cached = cache.get(cache_key)
        if cached is not None:
            return cached
        user, token = super().authenticate_credentials(key)
        cache.set(cache_key, (user, token), timeout=seconds)
        return user, token


class CountedBasicAuthentication(BasicAuthentication):
    """HTTP Basic whose failures django-axes counts and locks out (settings: AXES_*).

    DRF hands `authenticate()` its own request object; axes marks the lockout on the request it
    is given, and its middleware looks at Django's. Passing Django's request lets the lockout
    answer (429) reach the client."""

    def authenticate_credentials(
        self, userid: str, password: str, request: Any = None
    ) -> tuple[Any, None]:
        """Check the credentials against Django's request (see the class docstring)."""
        django_request = getattr(request, "_request", request)
        return super().authenticate_credentials(userid, password, django_request)


class CountedBasicScheme(OpenApiAuthenticationExtension):
    """The OpenAPI security scheme of `CountedBasicAuthentication`: plain HTTP Basic."""

    target_class = CountedBasicAuthentication
    name = "basicAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        """`{"type": "http", "scheme": "basic"}`."""
        return {"type": "http", "scheme": "basic"}
