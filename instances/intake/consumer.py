"""What the intake does with one broker message, whatever the broker: decode its CloudEvent,
route it, deliver it through `instances.events.event_deliver` (the receipt and the work commit
in one transaction), and say what the transport does next:

- `ack`: applied, a duplicate (its receipt was committed before: a redelivery after a crash
  between the commit and the acknowledgement), or unmatched under the `ack` policy;
- `dead`: it can never apply (not JSON, no route, refused by validation or by its mapping), or
  it was retried EVENT_MAX_ATTEMPTS times: the transport moves it to the dead-letter queue;
- `retry`: it may apply later (it matched no instance yet, its mapping timed out, an
  unexpected error): the transport redelivers it later, counting the attempt;
- `transient`: the platform is unwell (database or script pool unavailable); `message_process`
  tries again in place with backoff and answers this only when told to stop, and the transport
  then leaves the message unacknowledged for the broker to redeliver.

Nothing is acknowledged here: the transport acknowledges after this returns, so a crash at any
point leaves the message with the broker (at least once), and the receipt makes it once."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import DatabaseError, DataError, IntegrityError, connection
from prometheus_client import Counter, Histogram

from instances.engine.errors import Codes, VNextError
from instances.engine.scripts import ScriptResourceLimit, ScriptTimeout, ScriptUnavailable
from instances.events import EventOutcome, event_deliver
from instances.intake.messages import BrokerMessage, PoisonMessage, cloud_event
from instances.intake.routes import (
    UNMATCHED_ACK,
    UNMATCHED_DEAD_LETTER,
    EventRoute,
    NoRoute,
    route_for,
)
from instances.services import RequestInfo
from vnext.conf import vnext_setting

logger = logging.getLogger("vnext.intake")

ACK, DEAD, RETRY, TRANSIENT = "ack", "dead", "retry", "transient"
# Why a message was dead-lettered or redelivered (the `reason` label, the error header).
UNDECODABLE, NO_ROUTE, UNMATCHED, ERROR = "undecodable", "no-route", "unmatched", "error"
# Refusals that are the platform's state, not the event's: tried again, never dead-lettered.
_TRANSIENT_CODES = frozenset(
    {
        Codes.APP_DATABASE_UNAVAILABLE.code,
        Codes.SCRIPT_UNAVAILABLE.code,
        Codes.ENCRYPTION_KEY_UNAVAILABLE.code,
        # A start that met a publish of its workflow three times running.
        Codes.INSTANCE_BUSY.code,
    }
)
_BACKOFF_CAP_SECONDS = 30.0

EVENTS_CONSUMED = Counter(
    "vnext_events_consumed",
    "Broker events applied (receipt and work committed) and acknowledged, by source and route",
    ["source", "route"],
)
EVENTS_DUPLICATES = Counter(
    "vnext_events_duplicates",
    "Broker events acknowledged as duplicates (their event id was applied before)",
    ["source", "route"],
)
EVENTS_UNMATCHED_ACKED = Counter(
    "vnext_events_unmatched_acked",
    "Broker events that matched no instance, acknowledged (route policy `ack`)",
    ["source", "route"],
)
EVENTS_DEAD_LETTERED = Counter(
    "vnext_events_dead_lettered",
    "Broker events moved to the dead-letter queue or stream, by reason",
    ["source", "route", "reason"],
)
EVENTS_REDELIVERED = Counter(
    "vnext_events_redelivered",
    "Broker events failed and left for redelivery (retry: counted attempts; transient: the "
    "platform was unavailable), by reason",
    ["source", "route", "reason"],
)
EVENT_SECONDS = Histogram(
    "vnext_event_handle_seconds",
    "Wall time of one broker event's delivery (decode, mapping, the transaction)",
    ["source", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)


@dataclass(frozen=True)
class Disposition:
    """What the transport does with the message (`verdict`), why (`reason`, `detail`), the
    route's label (empty when none took it) and, when delivered, the outcome."""

    verdict: str
    reason: str = ""
    detail: str = ""
    route: str = ""
    outcome: EventOutcome | None = None
    code: str = ""

    @property
    def error_code(self) -> str:
        """The public error code of the refusal (`Script:100001`), else the reason."""
        return self.code or self.reason


def message_handle(
    message: BrokerMessage, *, source: str, address: str, routes: Sequence[EventRoute]
) -> Disposition:
    """Deliver one message once: decide what the transport does with it (module docstring)."""
    try:
        event = cloud_event(message)
    except PoisonMessage as exc:
        return _counted(message, source, address, Disposition(DEAD, UNDECODABLE, str(exc)))
    try:
        route = route_for(routes, source, address, event.event_type)
    except NoRoute as exc:
        return _counted(message, source, address, Disposition(DEAD, NO_ROUTE, str(exc)))
    started = time.perf_counter()
    try:
        outcome = event_deliver(
            domain=route.domain,
            workflow=route.workflow,
            action=route.action,
            transition_key=route.transition_key,
            body=event.body,
            headers=event.headers,
            info=RequestInfo(actor=route.actor, headers={}, query={}),
        )
    except VNextError as exc:
        verdict = _refusal_verdict(exc)
        disposition = Disposition(verdict, ERROR, exc.detail, route.label, code=exc.code)
    except (IntegrityError, DataError) as exc:
        # The same event fails the same way (a NUL in a string, a value out of range), but
        # one unexpected unique violation may be a race: counted retries, then dead.
        disposition = Disposition(RETRY, ERROR, f"{type(exc).__name__}: {exc}", route.label)
    except DatabaseError as exc:
        # The connection is broken (database restarted, network): a fresh one next time.
        connection.close_if_unusable_or_obsolete()
        disposition = Disposition(TRANSIENT, ERROR, f"{type(exc).__name__}: {exc}", route.label)
    except Exception as exc:  # a bug: it must not spin, nor be lost (counted retries)
        logger.exception("event %s on %s %s failed", message.broker_id, source, address)
        disposition = Disposition(RETRY, ERROR, f"{type(exc).__name__}: {exc}", route.label)
    else:
        disposition = _delivered(route, outcome)
    EVENT_SECONDS.labels(source, route.label).observe(time.perf_counter() - started)
    return _counted(message, source, address, disposition)


def message_process(
    message: BrokerMessage,
    *,
    source: str,
    address: str,
    routes: Sequence[EventRoute],
    stop: threading.Event,
) -> Disposition:
    """`message_handle`, tried again in place while the failure is transient (with backoff:
    the platform is down for every message alike, so the next one would fail too and the
    queue's order is kept); `transient` only when `stop` was set meanwhile."""
    wait = float(vnext_setting("EVENT_RETRY_SECONDS"))
    while True:
        disposition = message_handle(message, source=source, address=address, routes=routes)
        if disposition.verdict != TRANSIENT:
            return disposition
        logger.warning(
            "event %s on %s %s: %s; trying again in %.1fs",
            message.broker_id,
            source,
            address,
            disposition.detail,
            wait,
        )
        if stop.wait(wait):
            return disposition
        wait = min(wait * 2, _BACKOFF_CAP_SECONDS)


def retry_delay_seconds(attempts: int) -> float:
    """How long a message waits before its next attempt after `attempts` of them:
    EVENT_RETRY_SECONDS doubled per attempt, at most EVENT_RETRY_MAX_SECONDS."""
    base = float(vnext_setting("EVENT_RETRY_SECONDS"))
    return float(min(base * 2 ** max(attempts - 1, 0), vnext_setting("EVENT_RETRY_MAX_SECONDS")))


def _refusal_verdict(error: VNextError) -> str:
    cause = error.__cause__
    if error.code in _TRANSIENT_CODES or isinstance(cause, ScriptUnavailable):
        return TRANSIENT
    if isinstance(cause, ScriptTimeout | ScriptResourceLimit):
        return RETRY  # the worker was slow or died: perhaps load, perhaps the event
    return DEAD  # validation or the mapping refused it: so will every redelivery


def _delivered(route: EventRoute, outcome: EventOutcome) -> Disposition:
    if outcome.duplicate or outcome.matched:
        return Disposition(ACK, route=route.label, outcome=outcome)
    detail = f"event {outcome.event_id!r} matched no instance of {route.workflow}"
    if route.unmatched == UNMATCHED_ACK:
        return Disposition(ACK, UNMATCHED, detail, route.label, outcome)
    verdict = DEAD if route.unmatched == UNMATCHED_DEAD_LETTER else RETRY
    return Disposition(verdict, UNMATCHED, detail, route.label, outcome)


def _counted(
    message: BrokerMessage, source: str, address: str, disposition: Disposition
) -> Disposition:
    # A retried message out of attempts is dead-lettered; then the figures and the log line.
    if disposition.verdict == RETRY and message.attempts >= int(
        vnext_setting("EVENT_MAX_ATTEMPTS")
    ):
        disposition = Disposition(
            DEAD,
            disposition.reason,
            f"{disposition.detail} (after {message.attempts} attempts)",
            disposition.route,
            disposition.outcome,
            disposition.code,
        )
    route = disposition.route or f"{source}:{address}"
    if disposition.verdict == ACK:
        outcome = disposition.outcome
        if disposition.reason == UNMATCHED:
            EVENTS_UNMATCHED_ACKED.labels(source, route).inc()
        elif outcome is not None and outcome.duplicate:
            EVENTS_DUPLICATES.labels(source, route).inc()
            logger.info("event %s on %s %s: duplicate", outcome.event_id, source, address)
        else:
            EVENTS_CONSUMED.labels(source, route).inc()
    elif disposition.verdict == DEAD:
        EVENTS_DEAD_LETTERED.labels(source, route, disposition.reason).inc()
        logger.warning(
            "event %s on %s %s dead-lettered (%s): %s",
            message.broker_id,
            source,
            address,
            disposition.reason,
            disposition.detail,
        )
    else:
        reason = TRANSIENT if disposition.verdict == TRANSIENT else disposition.reason
        EVENTS_REDELIVERED.labels(source, route, reason).inc()
        if disposition.verdict == RETRY:
            logger.info(
                "event %s on %s %s will be tried again (attempt %d): %s",
                message.broker_id,
                source,
                address,
                message.attempts,
                disposition.detail,
            )
    return disposition
