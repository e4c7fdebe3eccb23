"""Django's PostgreSQL backend, its per-request health check asking the server only when the
socket says something happened.

With `CONN_HEALTH_CHECKS` (what `vnext_run` sets for the connection each HTTP thread keeps)
Django sends `SELECT 1` before the first query of every request: one more round trip on every
request, and a start is one statement. A connection the server ended (a restart,
`pg_terminate_backend`, an idle timeout) has something to read on its socket: the server's
error message and the end of the stream. So the check first looks at the socket without
waiting and asks the server only when there is something to read, or psycopg already knows the
connection broken; a quiet socket is an open connection as far as anyone can tell without
asking. A request that finds a connection dead anyway (a link cut without a word) fails, and
Django closes that connection at its end, as it does without health checks.
"""

from __future__ import annotations

import select
from typing import Any

from django.db.backends.postgresql import base
from psycopg import pq


def _quiet(connection: Any) -> bool:
    """Nothing to read on the connection's socket, psycopg knows of no failure and no
    transaction is open on it."""
    if connection.closed or connection.broken:
        return False
    if connection.info.transaction_status != pq.TransactionStatus.IDLE:
        return False
    try:
        # `poll`, not `select`: a process holding many sockets has descriptors past 1024.
        watch = select.poll()
        watch.register(connection.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
        return not watch.poll(0)
    except (OSError, ValueError):
        return False


class DatabaseWrapper(base.DatabaseWrapper):
    """PostgreSQL, the health check skipped on a quiet socket (see the module docstring)."""

    # Kept by Django's base wrapper (the stubs do not declare them).
    health_check_enabled: bool
    health_check_done: bool

    def close_if_health_check_failed(self) -> None:
        """Close the connection if it fails a health check; a quiet one passes without one."""
        checking = self.health_check_enabled and not self.health_check_done
        if checking and self.connection is not None and not self.pool and _quiet(self.connection):
            self.health_check_done = True
            return
        super().close_if_health_check_failed()
