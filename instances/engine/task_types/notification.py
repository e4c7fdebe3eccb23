"""Task type 10 (Notification): multi-channel dispatch (vnext-schema `channels`,
`includeStateChannel`; the vNext docs' Notification Task).

Each channel of `config.channels` is shaped by the mapping's `channel_handler(channel, context)`
(the docs' `INotificationMapping.ChannelHandler`): it returns the message (a value, or a
`ScriptResponse` whose `data` is the content and `headers` travel as metadata), or None to skip
the channel. The platform-managed `state` channel (added unless `includeStateChannel` is false,
and sent once even when listed) needs no mapping: its content is the instance's state function,
made when it is delivered; the mapping's optional `enrich(context)` (`IStateNotificationMapping`)
adds headers to it.

Nothing is sent from here: each message is handed over (`TaskCall.outbox`) and becomes a durable
job committed with the hop, delivered by the configured channel and retried until it is (the
same delivery as state notifications). The task's response data is what the docs call the result
metadata: `{"dispatched": [...], "skipped": [...], "errors": [...]}`. Channels are independent:
a `channel_handler` that raises lands in `errors` and the others go on; a mapping the platform
had to stop (deadline, memory, no worker) fails the task with that code, so an error boundary
(`onTimeout` for `Script:Timeout`) can retry it.
"""

from __future__ import annotations

import logging
from typing import Any

from instances.engine.errors import Codes
from instances.engine.script_runner import ScriptHandle, response_data, stopped_code
from instances.engine.scripts import ScriptError, ScriptResponse
from instances.engine.task_types.base import (
    OutgoingNotification,
    StandardResponse,
    TaskCall,
    TaskFailure,
)

logger = logging.getLogger("vnext.tasks")

STATE_CHANNEL = "state"
CHANNEL_HANDLER = "channel_handler"
ENRICH = "enrich"


def notification_channels(config: Any) -> list[str]:
    """The channels a notification task's `config` dispatches to, in order, each once: its
    `channels`, then `state` unless `includeStateChannel` is false (schema default: true)."""
    config = config if isinstance(config, dict) else {}
    listed = config.get("channels")
    channels = [c for c in listed if isinstance(c, str) and c] if isinstance(listed, list) else []
    if config.get("includeStateChannel", True) is not False:
        channels.append(STATE_CHANNEL)
    return list(dict.fromkeys(channels))


def execute_notification(call: TaskCall) -> StandardResponse:
    """Shape a message per channel and hand each over for delivery after the hop commits."""
    config = call.task.get("config") or {}
    dispatched: list[str] = []
    skipped: list[str] = []
    errors: list[str] = []
    for channel in notification_channels(config):
        if channel == STATE_CHANNEL:
            call.outbox.append(OutgoingNotification(channel, None, _enriched(call)))
            dispatched.append(channel)
            continue
        if call.mapping is None or not call.mapping.has(CHANNEL_HANDLER):
            errors.append(f"{channel}: the mapping defines no channel_handler(channel, context)")
            continue
        try:
            returned = _call(call.mapping, CHANNEL_HANDLER, channel, call.context)
        except ScriptError as exc:
            errors.append(f"{channel}: {exc}")
            logger.warning("notification task %s: channel %s failed: %s", _key(call), channel, exc)
            continue
        if returned is None:
            skipped.append(channel)
            continue
        call.outbox.append(
            OutgoingNotification(channel, response_data(returned), _headers(returned))
        )
        dispatched.append(channel)
    result = {"dispatched": dispatched, "skipped": skipped, "errors": errors}
    return StandardResponse(
        status_code=200,
        data=result,
        is_success=not errors,
        error_message="; ".join(errors) or None,
    )


def _enriched(call: TaskCall) -> dict[str, str]:
    # The state channel's extra metadata from the mapping's `enrich(context)`, if it has one; a
    # handler that raises leaves the defaults (the docs), logged.
    if call.mapping is None or not call.mapping.has(ENRICH):
        return {}
    try:
        returned = _call(call.mapping, ENRICH, call.context)
    except ScriptError as exc:
        logger.warning("notification task %s: enrich failed, sent without: %s", _key(call), exc)
        return {}
    if isinstance(returned, ScriptResponse):
        return _headers(returned)
    if isinstance(returned, dict):
        return {str(name): str(value) for name, value in returned.items()}
    return {}


def _call(mapping: ScriptHandle, name: str, *args: Any) -> Any:
    try:
        return mapping.call(name, *args)
    except ScriptError as exc:
        stopped = stopped_code(exc, Codes.SCRIPT_FAILED)
        if stopped != Codes.SCRIPT_FAILED:
            # The platform stopped the script: a failure of the task, not of one channel.
            raise TaskFailure(stopped, f"notification mapping {name}(): {exc}") from exc
        raise


def _headers(returned: Any) -> dict[str, str]:
    if isinstance(returned, ScriptResponse) and returned.headers:
        return {str(name): str(value) for name, value in returned.headers.items()}
    return {}


def _key(call: TaskCall) -> str:
    return str(call.task.get("task_key") or "?")
