"""The routing table of broker events (`VNEXT["EVENT_ROUTES"]`): which queue or stream delivers
to which workflow, as a start or as an event transition. Read and checked once, at start-up."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from instances.events import ACTIONS
from vnext.conf import vnext_setting

RABBITMQ, REDIS = "rabbitmq", "redis"
SOURCES = (RABBITMQ, REDIS)
# What an event that matched no instance does: redelivered later (an instance may be started
# meanwhile; dead-lettered after EVENT_MAX_ATTEMPTS), dead-lettered at once, or acknowledged.
UNMATCHED_RETRY, UNMATCHED_DEAD_LETTER, UNMATCHED_ACK = "retry", "dead-letter", "ack"
UNMATCHED_POLICIES = (UNMATCHED_RETRY, UNMATCHED_DEAD_LETTER, UNMATCHED_ACK)


class NoRoute(Exception):
    """No route takes this message (its queue or stream, its CloudEvent type)."""


@dataclass(frozen=True)
class EventRoute:
    """One row of the table: events on `address` (a RabbitMQ queue or a Redis stream) of
    `event_type` (any when None) go to `domain`/`workflow` as `action` (start, or the event
    transition `transition_key`)."""

    source: str
    address: str
    domain: str
    workflow: str
    action: str
    transition_key: str | None = None
    event_type: str | None = None
    unmatched: str = UNMATCHED_RETRY
    name: str = ""

    @property
    def label(self) -> str:
        """The route's name in metrics and logs: its `name`, else workflow and action."""
        if self.name:
            return self.name
        target = f"{self.domain}/{self.workflow}:{self.action}"
        return f"{target}:{self.transition_key}" if self.transition_key else target

    @property
    def actor(self) -> str:
        """Who the instances' history says started or moved them."""
        return f"broker:{self.source}:{self.address}"


def route_parse(row: Any, position: int) -> EventRoute:
    """One settings row (`{"source", "queue" or "stream", "domain", "workflow", "action",
    "transitionKey", "type", "unmatched", "name"}`) as a route; ImproperlyConfigured when it
    cannot route anything."""
    where = f'VNEXT["EVENT_ROUTES"][{position}]'
    if not isinstance(row, dict):
        raise ImproperlyConfigured(f"{where} is not an object")
    source = row.get("source")
    if source not in SOURCES:
        raise ImproperlyConfigured(f"{where}: source is one of {', '.join(SOURCES)}")
    address = row.get("queue") or row.get("stream")
    for field, value in (("queue or stream", address), ("workflow", row.get("workflow"))):
        if not isinstance(value, str) or not value:
            raise ImproperlyConfigured(f"{where}: {field} is required")
    action = row.get("action", "start")
    if action not in ACTIONS:
        raise ImproperlyConfigured(f"{where}: action is one of {', '.join(ACTIONS)}")
    transition_key = row.get("transitionKey") or None
    if action == "transition" and not transition_key:
        raise ImproperlyConfigured(f"{where}: action transition names its transitionKey")
    unmatched = row.get("unmatched") or vnext_setting("EVENT_UNMATCHED")
    if unmatched not in UNMATCHED_POLICIES:
        raise ImproperlyConfigured(f"{where}: unmatched is one of {', '.join(UNMATCHED_POLICIES)}")
    return EventRoute(
        source=str(source),
        address=str(address),
        domain=str(row.get("domain") or "core"),
        workflow=str(row["workflow"]),
        action=str(action),
        transition_key=str(transition_key) if transition_key else None,
        event_type=str(row["type"]) if row.get("type") else None,
        unmatched=str(unmatched),
        name=str(row.get("name") or ""),
    )


def event_routes(rows: Iterable[Any] | None = None) -> list[EventRoute]:
    """The routes of `rows` (default: `VNEXT["EVENT_ROUTES"]`), checked; a queue routed twice
    without telling its routes apart by `type` is refused (which one would take an event?)."""
    configured = vnext_setting("EVENT_ROUTES") if rows is None else rows
    routes = [route_parse(row, position) for position, row in enumerate(configured or [])]
    seen: set[tuple[str, str, str | None]] = set()
    for route in routes:
        key = (route.source, route.address, route.event_type)
        if key in seen:
            what = f"type {route.event_type!r}" if route.event_type else "any type"
            raise ImproperlyConfigured(
                f"{route.source} {route.address!r} is routed twice for {what}"
            )
        seen.add(key)
    return routes


def route_for(
    routes: Iterable[EventRoute], source: str, address: str, event_type: str | None
) -> EventRoute:
    """The route that takes an event of `event_type` arriving on `address`: the one naming
    that type, else the queue's catch-all; NoRoute when there is neither."""
    catch_all = None
    for route in routes:
        if route.source != source or route.address != address:
            continue
        if route.event_type is None:
            catch_all = route
        elif route.event_type == event_type:
            return route
    if catch_all is None:
        raise NoRoute(f"no route for {source} {address!r} and event type {event_type!r}")
    return catch_all


def addresses(routes: Iterable[EventRoute]) -> list[tuple[str, str]]:
    """Each (source, queue or stream) the routes read, once, in table order."""
    return list(dict.fromkeys((route.source, route.address) for route in routes))
