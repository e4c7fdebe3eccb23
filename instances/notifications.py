"""State notifications (seed 001 "State Notifications"): when a hop enters a state that defines
`notifications`, the hop's own commit adds one `notification` job per entry, so a notification
exists exactly when the state change does. The job evaluates the entry's `rule` in the script
pool (false: skipped, not sent), shapes the content with its `mapping`, and hands it to the
channel. A channel that fails raises: the job is retried with backoff and, after its attempts,
stays failed for an operator (Admin > Jobs, replay) — never lost.

Notification tasks (task type 10) are delivered the same way: one `task-notification` job per
message, committed with the hop that ran the task, named by its `channel` (`sms`, `email`, ...,
or `state`, whose content is the instance's state function, made at delivery). Every channel
name goes through the one configured transport; the name travels in the body and, on the
webhook, in `X-VNext-Channel`.

Channels: `WebhookChannel` (the default: an HTTP POST with httpx, signed with an HMAC-SHA256 of
the body in `X-VNext-Signature`, under the egress policy like every outgoing call) and
`RedisChannel` (a Redis pub/sub message); `VNEXT["NOTIFICATION_CHANNEL"]` names the class.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import asdict, dataclass, field
from functools import cache
from typing import Any, Protocol

import httpx
from django.utils.module_loading import import_string

from instances.engine.egress import EgressRefused, shared_client
from vnext.conf import notification_secret, vnext_setting


class NotificationFailed(Exception):
    """The channel could not deliver a notification (the job retries it)."""


@dataclass(frozen=True)
class Notification:
    """What is delivered: the instance, the state it entered (and by which transition), and
    the content its mapping shaped."""

    id: str
    domain: str
    workflow: str
    instance_id: str
    instance_key: str | None
    state: str
    transition: str
    entered_at: str
    content: Any
    headers: dict[str, str] = field(default_factory=dict)
    # `state` for a state notification; a notification task's channel name otherwise.
    channel: str = "state"
    # The notification task that sent it (empty for a state notification).
    task: str = ""

    def body(self) -> bytes:
        """The JSON body sent (the content's headers travel as HTTP headers)."""
        fields = asdict(self)
        fields.pop("headers")
        if not fields["task"]:
            fields.pop("task")
        names = {
            "instance_id": "instanceId",
            "instance_key": "instanceKey",
            "entered_at": "enteredAt",
        }
        return json.dumps(
            {names.get(k, k): v for k, v in fields.items()}, sort_keys=True, default=str
        ).encode()


class Channel(Protocol):
    """Delivers a notification or raises `NotificationFailed`."""

    def send(self, notification: Notification) -> None:
        """Deliver `notification`."""
        ...


def signature(body: bytes, secret: str) -> str:
    """`sha256=<hex>`: the HMAC-SHA256 of `body` with `secret` (receivers recompute it)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class WebhookChannel:
    """POST the notification as JSON to `VNEXT["NOTIFICATION_WEBHOOK_URL"]`, signed."""

    def send(self, notification: Notification) -> None:
        """POST it; anything but a 2xx answer (or no answer) fails the delivery."""
        url = str(vnext_setting("NOTIFICATION_WEBHOOK_URL") or "")
        if not url:
            raise NotificationFailed(
                "no notification webhook is configured (VNEXT_NOTIFICATION_WEBHOOK_URL)"
            )
        body = notification.body()
        headers = {
            **{k: v for k, v in notification.headers.items() if k.lower().startswith("x-")},
            "Content-Type": "application/json",
            "X-VNext-Notification": notification.id,
            "X-VNext-Channel": notification.channel,
            "X-VNext-Signature": signature(body, notification_secret()),
        }
        timeout = float(vnext_setting("NOTIFICATION_TIMEOUT_SECONDS"))
        try:
            answer = shared_client(True).post(url, content=body, headers=headers, timeout=timeout)
        except EgressRefused as exc:
            raise NotificationFailed(f"webhook {url}: {exc}") from exc
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise NotificationFailed(f"webhook {url} could not be reached: {exc}") from exc
        if not answer.is_success:
            raise NotificationFailed(f"webhook {url} answered {answer.status_code}")


class RedisChannel:
    """PUBLISH the notification's JSON on `VNEXT["NOTIFICATION_REDIS_CHANNEL"]` of the Redis at
    `VNEXT["NOTIFICATION_REDIS_URL"]`; no subscriber counts as not delivered."""

    def send(self, notification: Notification) -> None:
        """Publish it; fails when nobody is subscribed or Redis cannot be reached."""
        import redis

        try:
            client = redis.Redis.from_url(str(vnext_setting("NOTIFICATION_REDIS_URL")))
            receivers = client.publish(
                str(vnext_setting("NOTIFICATION_REDIS_CHANNEL")), notification.body()
            )
        except redis.RedisError as exc:
            raise NotificationFailed(f"Redis could not take the notification: {exc}") from exc
        if not receivers:
            raise NotificationFailed("no subscriber received the notification")


@cache
def _channel_class(path: str) -> type[Any]:
    found: type[Any] = import_string(path)
    return found


def channel() -> Channel:
    """The configured channel (`VNEXT["NOTIFICATION_CHANNEL"]`)."""
    instance: Channel = _channel_class(str(vnext_setting("NOTIFICATION_CHANNEL")))()
    return instance
