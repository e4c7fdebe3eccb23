"""API token authentication with the token's user remembered in Django's cache.

DRF's `TokenAuthentication` reads the token and its user on every request: one query, and on
this machine about 1.7 ms of a 4 ms transition request, most of it building the ORM query. The
user is kept in the `default` cache for `VNEXT_TOKEN_CACHE_SECONDS` (the process's memory unless
`CACHES` names a shared cache such as Redis). Deleting the token or saving its user (deactivated,
new password) forgets it at once; with a per-process cache, other processes forget it when the
entry expires.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BasicAuthentication, TokenAuthentication
from rest_framework.authtoken.models import Token

from vnext.conf import vnext_setting


def _cache_key(token_key: str) -> str:
    # The key itself is a credential: the cache sees only its digest.
    return "vnext:token:" + hashlib.sha256(token_key.encode()).hexdigest()


class CachedTokenAuthentication(TokenAuthentication):
    """`Authorization: Token <key>`, the lookup cached (see the module docstring)."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        """The token's active user and the token, from the cache when it is there."""
        seconds = float(vnext_setting("TOKEN_CACHE_SECONDS"))
        if seconds <= 0:
            return super().authenticate_credentials(key)
        cached = cache.get(_cache_key(key))
        if cached is not None:
            return cached
        user, token = super().authenticate_credentials(key)
        cache.set(_cache_key(key), (user, token), timeout=seconds)
        return user, token


@receiver(post_delete, sender=Token)
def _forget_deleted_token(sender: Any, instance: Token, **kwargs: Any) -> None:
    cache.delete(_cache_key(instance.key))


# A save touching only other fields (a login's `last_login`) changes nothing a token relies on.
_AUTHENTICATING_FIELDS = frozenset({"is_active", "password", "username"})


@receiver(post_save, sender=get_user_model())
def _forget_tokens_of_saved_user(
    sender: Any, instance: Any, update_fields: Any = None, **kwargs: Any
) -> None:
    if update_fields is not None and not _AUTHENTICATING_FIELDS & set(update_fields):
        return
    keys = Token.objects.filter(user_id=instance.pk).values_list("key", flat=True)
    cache.delete_many([_cache_key(key) for key in keys])


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
