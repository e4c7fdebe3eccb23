"""Change notifications: after an instance's write commits, a message goes to its channel group
(`vnext.instance.<id>`), so the long-poll waiters of that instance re-read it at once.

The Redis channel layer (`CHANNEL_LAYER_URL`) reaches waiters in every server process, from any
writer (a request, a Celery worker); it is sent from a background event loop, never blocking the
writer. Django's in-memory layer only reaches waiters of the same process, and its queues belong
to the server's event loop: the message is handed to that loop, and a process that never parked a
client (no loop recorded) sends nothing. Waiters re-read the instance now and then anyway, so a
lost message costs latency, never a wrong answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
import uuid
from functools import partial

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

logger = logging.getLogger("vnext.changes")

_server_loop: asyncio.AbstractEventLoop | None = None
_sender_loop: asyncio.AbstractEventLoop | None = None
_sender_lock = threading.Lock()
CHANGED = "instance.changed"


def group_name(instance_id: uuid.UUID | str) -> str:
    """The channel group of an instance's waiters."""
    return f"vnext.instance.{instance_id}"


def serving_in(loop: asyncio.AbstractEventLoop) -> None:
    """Record the event loop this process parks waiters in (the in-memory layer lives there)."""
    global _server_loop
    _server_loop = loop


def instance_changed(instance_id: uuid.UUID | str) -> None:
    """Announce a change of the instance once the current transaction commits (at once when
    there is none)."""
    transaction.on_commit(partial(_publish, str(instance_id)))


def _publish(instance_id: str) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    if isinstance(layer, InMemoryChannelLayer):
        loop = _server_loop
        if loop is None or not loop.is_running():
            return  # nobody is parked in this process
    else:
        loop = _sender()
    try:
        future = asyncio.run_coroutine_threadsafe(
            layer.group_send(
                group_name(instance_id), {"type": CHANGED, "id": instance_id, "at": time.time()}
            ),
            loop,
        )
    except RuntimeError:  # the loop is shutting down
        return
    future.add_done_callback(_log_failure)


def _sender() -> asyncio.AbstractEventLoop:
    # One daemon thread per process runs the sends to Redis.
    global _sender_loop
    with _sender_lock:
        if _sender_loop is None or _sender_loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="vnext-changes", daemon=True).start()
            _sender_loop = loop
        return _sender_loop


def _log_failure(future: concurrent.futures.Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        logger.warning("change notification not sent: %s", future.exception())
