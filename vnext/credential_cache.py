"""How long a token's user and a caller's grants may be served from Django's cache, and the
generation that retires every such entry when a credential or a grant changes.

Entries are keyed by a generation number kept in the same cache. Deleting a token or a user,
saving a user's `is_active`, `password` or `username`, and changing a grant, a group or a
membership move the generation on: at once (this process, and a transaction's own later reads)
and again when the transaction commits, so a request that read the old rows before the commit
can only have cached them under a generation nobody asks for any more.

A shared cache (`CACHE_URL`: Redis, Memcached, the database) makes that reach every process at
once, and entries live `TOKEN_CACHE_SECONDS`. A process-local one (`locmem`, the default) cannot
tell other processes: there entries live at most `TOKEN_CACHE_LOCAL_SECONDS` (1 s), the bound on
how long another process still accepts a revoked token or grant.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.cache import DEFAULT_CACHE_ALIAS, cache, caches
from django.core.cache.backends.locmem import LocMemCache
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from rest_framework.authtoken.models import Token

from vnext.conf import vnext_setting

_GENERATION_KEY = "vnext:credentials:generation"


def cache_is_process_local() -> bool:
    """The `default` cache lives in this process's memory (other processes keep their own)."""
    return isinstance(caches[DEFAULT_CACHE_ALIAS], LocMemCache)


def credential_cache_seconds() -> float:
    """How long a cached token lookup or grant set may be served; 0: not cached."""
    seconds = float(vnext_setting("TOKEN_CACHE_SECONDS"))
    if cache_is_process_local():
        seconds = min(seconds, float(vnext_setting("TOKEN_CACHE_LOCAL_SECONDS")))
    return max(seconds, 0.0)


def credential_cache_key(kind: str, ident: str) -> str:
    """The cache key of entry `ident` of `kind` under the current generation."""
    return f"vnext:{kind}:{cache.get(_GENERATION_KEY, 0)}:{ident}"


def _next_generation() -> None:
    try:
        cache.incr(_GENERATION_KEY)
    except ValueError:
        # No generation yet (or it was evicted): any new number retires the old keys, as
        # long as it was never used before in this cache; 0 is the implicit first one.
        cache.set(_GENERATION_KEY, 1, timeout=None)


def credentials_changed(*args: Any, **kwargs: Any) -> None:
    """Receiver: a token, a user's credentials or a grant changed; every cached entry is stale,
    now and again when the transaction commits (see the module docstring)."""
    _next_generation()
    transaction.on_commit(_next_generation)


# A save touching only other fields (a login's `last_login`) changes nothing a token relies on.
_AUTHENTICATING_FIELDS = frozenset(
    {"is_active", "is_staff", "is_superuser", "password", "username"}
)


def _user_saved(sender: Any, instance: Any, update_fields: Any = None, **kwargs: Any) -> None:
    if kwargs.get("created"):
        return
    if update_fields is not None and not _AUTHENTICATING_FIELDS & set(update_fields):
        return
    credentials_changed()


_User = get_user_model()
post_save.connect(_user_saved, sender=_User, dispatch_uid="vnext-credentials-user-saved")
post_delete.connect(credentials_changed, sender=_User, dispatch_uid="vnext-credentials-user-del")
post_delete.connect(credentials_changed, sender=Token, dispatch_uid="vnext-credentials-token-del")
