"""The write lane's lock: an instance's async updateData tickets and its sync updateData apply
one after another, each inside a transaction holding the instance's lane (`lane_held`): a
PostgreSQL advisory lock, or a lock per instance in this process on SQLite (the embedded mode).
The tickets themselves are job rows (`instances.queue`)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import OperationalError, connection, transaction

# Advisory lock namespaces (the two-key form): one orders the tickets' inserts, one is held by
# whoever applies an update of the instance.
LANE_NUMBERING, _LANE_WRITING = 7301, 7302


class LaneTimeout(Exception):
    """The instance's write lane stayed taken for longer than the caller would wait."""


def lane_lock_key(instance_id: uuid.UUID) -> int:
    """The instance's key in the lane's advisory locks (a signed 32-bit integer)."""
    return (instance_id.int & 0xFFFFFFFF) - 2**31


# SQLite (the embedded mode, one process): the lane is a lock per instance in this process.
_LOCAL_LANES: dict[uuid.UUID, threading.RLock] = {}
_LOCAL_LANES_GUARD = threading.Lock()


@contextmanager
def lane_held(instance_id: uuid.UUID, *, wait: float) -> Iterator[None]:
    """A transaction holding the instance's write lane: every update of the instance's data by
    an updateData is applied inside one, so they apply one after another, each reading what the
    one before committed. Waits at most `wait` seconds for the lane (`LaneTimeout`); re-entrant
    (a lane holder may run tickets of the same instance inside)."""
    if connection.vendor != "postgresql":
        with _LOCAL_LANES_GUARD:
            lock = _LOCAL_LANES.setdefault(instance_id, threading.RLock())
        if not lock.acquire(timeout=max(wait, 0.0)):
            raise LaneTimeout(f"the write lane of {instance_id} stayed taken for {wait:g} s")
        try:
            with transaction.atomic():
                yield
        finally:
            lock.release()
        return
    with transaction.atomic():
        with connection.cursor() as cursor:
            # Waiters queue in PostgreSQL, first come first served, spending nothing meanwhile;
            # the bound (the transaction's lock_timeout) is set before the lock is asked for.
            try:
                cursor.execute(
                    "SELECT set_config('lock_timeout', %s, true), pg_advisory_xact_lock(%s, %s)",
                    [f"{max(int(wait * 1000), 1)}ms", _LANE_WRITING, lane_lock_key(instance_id)],
                )
            except OperationalError as exc:
                if getattr(exc.__cause__, "sqlstate", "") != "55P03":  # lock_not_available
                    raise
                raise LaneTimeout(
                    f"the write lane of {instance_id} stayed taken for {wait:g} s"
                ) from exc
        yield
