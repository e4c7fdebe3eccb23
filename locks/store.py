"""The engine's `Locks` port on the database. Every operation is one statement whose row count
or returned owner says what happened: no SELECT ... FOR UPDATE, no read-check-write."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import Any

from django.db import connection
from django.utils import timezone

from instances.engine.ports import LockRelease
from locks.models import ResourceLock

logger = logging.getLogger("vnext.locks")

_TABLE = ResourceLock._meta.db_table

# Insert the key, or take over a row whose TTL has passed (or that the owner already holds).
_ACQUIRE = f"""
INSERT INTO {_TABLE} (key, owner, transition_key, acquired_at, expires_at)
VALUES (%(key)s, %(owner)s, %(transition)s, %(now)s, %(expires)s)
ON CONFLICT (key) DO UPDATE SET
    owner = excluded.owner,
    transition_key = excluded.transition_key,
    acquired_at = excluded.acquired_at,
    expires_at = excluded.expires_at
WHERE {_TABLE}.expires_at <= %(now)s OR {_TABLE}.owner = excluded.owner
RETURNING owner
"""


def _owner(owner: uuid.UUID) -> Any:
    return ResourceLock._meta.get_field("owner").get_db_prep_value(owner, connection)


class OrmLocks:
    """`Locks` on the `ResourceLock` table (PostgreSQL, or SQLite >= 3.35)."""

    def acquire(self, key: str, owner: uuid.UUID, transition: str, ttl_seconds: int) -> bool:
        """Take `key` for `owner` (re-entrant); False when another owner holds it unexpired."""
        now = timezone.now()
        params: dict[str, Any] = {
            "key": key,
            "owner": _owner(owner),
            "transition": transition,
            "now": now,
            "expires": now + timedelta(seconds=ttl_seconds),
        }
        with connection.cursor() as cursor:
            cursor.execute(_ACQUIRE, params)
            return cursor.fetchone() is not None

    def release(self, key: str, owner: uuid.UUID) -> LockRelease:
        """Delete `owner`'s row for `key`. A missing or expired lock is a success."""
        with connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {_TABLE} WHERE key = %s AND owner = %s", [key, _owner(owner)]
            )
            if cursor.rowcount:
                return LockRelease.RELEASED
        held = ResourceLock.objects.filter(key=key, expires_at__gt=timezone.now()).exists()
        return LockRelease.HELD_BY_OTHER if held else LockRelease.MISSING

    def extend(self, key: str, owner: uuid.UUID, ttl_seconds: int) -> bool:
        """Move the expiry of `owner`'s unexpired lock; False (nothing changed) otherwise."""
        now = timezone.now()
        return bool(
            ResourceLock.objects.filter(key=key, owner=owner, expires_at__gt=now).update(
                expires_at=now + timedelta(seconds=ttl_seconds)
            )
        )
