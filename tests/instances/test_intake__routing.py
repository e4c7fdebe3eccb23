"""The broker intake's decisions, without a broker: the routing table (checked at start-up, a
type-specific route before a queue's catch-all, an unknown queue), structured and binary mode
and a missing id (the content hash, as `unwrap` does), and what the transport is told: ack
(applied, duplicate), dead (not JSON, no route, the mapping refused it, out of attempts), retry
(matched no instance yet) or transient (the platform is down), with the counters."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import OperationalError
from prometheus_client import REGISTRY

from instances.engine.errors import Codes, VNextError
from instances.engine.scripts import ScriptTimeout, ScriptUnavailable
from instances.intake import consumer as intake_consumer
from instances.intake.consumer import (
    ACK,
    DEAD,
    RETRY,
    TRANSIENT,
    message_handle,
    message_process,
    retry_delay_seconds,
)
from instances.intake.messages import (
    BINARY,
    PLAIN,
    STRUCTURED,
    BrokerMessage,
    PoisonMessage,
    cloud_event,
)
from instances.intake.routes import NoRoute, event_routes, route_for
from instances.job_table import Job
from instances.models import Instance
from tests.instances.workflows import publish
from tests.integration.intake_support import intake_workflow

pytestmark = pytest.mark.django_db
QUEUE = "loan-events"
START = {"source": "rabbitmq", "queue": QUEUE, "workflow": "intake-start", "action": "start"}
BUMP = {
    "source": "rabbitmq",
    "queue": QUEUE,
    "type": "loan.bumped",
    "workflow": "intake-start",
    "action": "transition",
    "transitionKey": "bump",
}


def structured(event_id: str, event_type: str = "loan.requested", **data: Any) -> BrokerMessage:
    body = {"specversion": "1.0", "id": event_id, "type": event_type, "source": "/t", "data": data}
    return BrokerMessage(json.dumps(body).encode())


def binary(event_id: str, event_type: str = "loan.requested", **data: Any) -> BrokerMessage:
    headers = {"ce-specversion": "1.0", "ce-id": event_id, "ce-type": event_type}
    return BrokerMessage(json.dumps(data).encode(), headers)


def handle(message: BrokerMessage, queue: str = QUEUE, rows: Any = None) -> Any:
    routes = event_routes(rows if rows is not None else [START, BUMP])
    return message_handle(message, source="rabbitmq", address=queue, routes=routes)


def counted(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(f"{name}_total", labels) or 0.0


@pytest.fixture
def published() -> None:
    publish(intake_workflow())


# --- the table ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "says"),
    [
        ({**START, "source": "kafka"}, "source is one of"),
        ({**START, "queue": ""}, "queue or stream is required"),
        ({**START, "action": "cancel"}, "action is one of"),
        ({**BUMP, "transitionKey": ""}, "names its transitionKey"),
        ({**START, "unmatched": "drop"}, "unmatched is one of"),
    ],
)
def test_a_route_that_cannot_route_refuses_to_start(row, says):
    with pytest.raises(ImproperlyConfigured, match=says):
        event_routes([row])


def test_a_queue_routed_twice_for_the_same_type_is_refused():
    with pytest.raises(ImproperlyConfigured, match="routed twice"):
        event_routes([START, {**START, "workflow": "other"}])


def test_a_typed_route_comes_before_the_queues_catch_all_and_an_unknown_queue_has_none():
    routes = event_routes([START, BUMP])
    assert route_for(routes, "rabbitmq", QUEUE, "loan.bumped").action == "transition"
    assert route_for(routes, "rabbitmq", QUEUE, "loan.requested").action == "start"
    assert route_for(routes, "rabbitmq", QUEUE, None).action == "start"
    with pytest.raises(NoRoute):
        route_for(routes, "rabbitmq", "other-queue", None)
    with pytest.raises(NoRoute):
        route_for(routes, "redis", QUEUE, None)  # the same name on another broker
    with pytest.raises(NoRoute):
        route_for(event_routes([BUMP]), "rabbitmq", QUEUE, "loan.requested")


# --- the CloudEvent of a message -----------------------------------------------------------------


def test_structured_binary_and_plain_messages():
    event = cloud_event(structured("e-1", n=1))
    assert (event.mode, event.event_type, event.headers, event.body["data"]) == (
        STRUCTURED,
        "loan.requested",
        {},
        {"n": 1},
    )
    # Binary mode in any of its spellings; the body is the data.
    amqp = BrokerMessage(
        b'{"n": 2}', {"cloudEvents:specversion": "1.0", "cloudEvents:id": "e-2", "x": "y"}
    )
    event = cloud_event(amqp)
    assert (event.mode, event.body, event.headers) == (
        BINARY,
        {"n": 2},
        {"ce-specversion": "1.0", "ce-id": "e-2"},
    )
    # A plain object takes the publisher's message id as its event id, when it has one.
    event = cloud_event(BrokerMessage(b'{"n": 3}', publisher_id="m-3"))
    assert (event.mode, event.headers) == (PLAIN, {"x-event-id": "m-3"})
    assert cloud_event(BrokerMessage(b'{"n": 3}')).headers == {}


@pytest.mark.parametrize(
    ("body", "says"),
    [(b"\xff\xfe", "not UTF-8"), (b"{oops", "not JSON"), (b"[1, 2]", "JSON list, not an object")],
)
def test_a_body_that_is_no_event_is_poison(body, says):
    with pytest.raises(PoisonMessage, match=says):
        cloud_event(BrokerMessage(body))


# --- what the transport is told --------------------------------------------------------------


def test_an_event_applies_once_and_its_redelivery_is_a_duplicate(published):
    route = "core/intake-start:start"
    applied_before = counted("vnext_events_consumed", source="rabbitmq", route=route)
    duplicates_before = counted("vnext_events_duplicates", source="rabbitmq", route=route)

    first = handle(structured("e-10", n=10))
    # The same id in binary mode is the same event.
    again = handle(binary("e-10", n=10))

    assert (first.verdict, first.outcome.duplicate, first.outcome.matched) == (ACK, False, 1)
    assert (again.verdict, again.outcome.duplicate) == (ACK, True)
    assert Instance.objects.filter(workflow_key="intake-start").count() == 1
    assert Instance.objects.get().created_by == f"broker:rabbitmq:{QUEUE}"
    assert counted("vnext_events_consumed", source="rabbitmq", route=route) == applied_before + 1
    assert counted("vnext_events_duplicates", source="rabbitmq", route=route) == (
        duplicates_before + 1
    )


def test_without_an_id_the_content_hash_is_the_event_id(published):
    plain = BrokerMessage(json.dumps({"n": 7}).encode())
    first, again = handle(plain), handle(plain)
    other = handle(BrokerMessage(json.dumps({"n": 8}).encode()))

    assert first.outcome.event_id.startswith("sha256:")
    assert (again.verdict, again.outcome.duplicate) == (ACK, True)
    assert (other.verdict, other.outcome.duplicate) == (ACK, False)
    assert Instance.objects.filter(workflow_key="intake-start").count() == 2


def test_what_can_never_apply_is_dead_lettered_with_its_reason(published):
    label = {"source": "rabbitmq", "route": "rabbitmq:unknown-queue", "reason": "no-route"}
    before = counted("vnext_events_dead_lettered", **label)

    not_json = handle(BrokerMessage(b"{oops"))
    unknown_queue = handle(structured("e-20", n=20), queue="unknown-queue")
    refused = handle(structured("e-21", explode=True))
    not_an_object = handle(binary("e-22"), rows=[START])  # binary data `{}` is fine: a start

    assert (not_json.verdict, not_json.reason) == (DEAD, "undecodable")
    assert (unknown_queue.verdict, unknown_queue.reason) == (DEAD, "no-route")
    assert (refused.verdict, refused.error_code) == (DEAD, Codes.SCRIPT_FAILED.code)
    assert "cannot be mapped" in refused.detail
    assert not_an_object.verdict == ACK
    assert counted("vnext_events_dead_lettered", **label) == before + 1
    # A refused event leaves nothing behind: no instance, no receipt.
    assert not Job.objects.filter(kind="event", payload__eventId="e-21").exists()


def test_an_event_that_matched_nothing_is_retried_then_dead_lettered(published, settings):
    settings.VNEXT = {**settings.VNEXT, "EVENT_MAX_ATTEMPTS": 3}
    bump = structured("e-30", "loan.bumped", order="nobody")

    first = handle(bump)
    last = handle(BrokerMessage(bump.body, attempts=3))
    acked = handle(bump, rows=[{**BUMP, "unmatched": "ack"}])
    at_once = handle(bump, rows=[{**BUMP, "unmatched": "dead-letter"}])

    assert (first.verdict, first.reason) == (RETRY, "unmatched")
    assert (last.verdict, last.reason) == (DEAD, "unmatched")
    assert "after 3 attempts" in last.detail
    assert (acked.verdict, acked.reason) == (ACK, "unmatched")
    assert at_once.verdict == DEAD
    # Matched nothing: no receipt, so a later delivery is processed again.
    assert not Job.objects.filter(kind="event").exists()


def test_the_event_transition_moves_the_instance_its_key_names(published):
    handle(structured("e-40", order="L-1", n=1))
    moved = handle(structured("e-41", "loan.bumped", order="L-1", n=2))
    assert (moved.verdict, moved.outcome.matched) == (ACK, 1)
    assert moved.route == "core/intake-start:transition:bump"


def failing_deliver(error: BaseException) -> Any:
    def deliver(**_kwargs: Any) -> Any:
        raise error

    return deliver


def script_refusal(cause: BaseException) -> VNextError:
    try:
        raise VNextError(Codes.SCRIPT_FAILED, "the event mapping failed") from cause
    except VNextError as error:
        return error


# Transactional: a database error has the intake close the connection, which a test's
# surrounding transaction would not survive.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("error", "verdict"),
    [
        (OperationalError("connection refused"), TRANSIENT),
        (VNextError(Codes.APP_DATABASE_UNAVAILABLE, "down"), TRANSIENT),
        (script_refusal(ScriptUnavailable("no worker", location="m.py")), TRANSIENT),
        (script_refusal(ScriptTimeout("too slow", location="m.py")), RETRY),
        (VNextError(Codes.WORKFLOW_NOT_FOUND, "no such workflow"), DEAD),
        (RuntimeError("a bug"), RETRY),
    ],
)
def test_failures_are_sorted_into_transient_counted_retries_and_dead_letters(
    monkeypatch, error, verdict
):
    monkeypatch.setattr(intake_consumer, "event_deliver", failing_deliver(error))
    assert handle(structured("e-50")).verdict == verdict


@pytest.mark.django_db(transaction=True)
def test_a_transient_failure_is_tried_again_in_place_until_it_passes_or_a_stop(
    monkeypatch, published, settings
):
    settings.VNEXT = {**settings.VNEXT, "EVENT_RETRY_SECONDS": 0.01}
    real = intake_consumer.event_deliver
    calls = []

    def flaky(**kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) < 3:
            raise OperationalError("the database restarts")
        return real(**kwargs)

    monkeypatch.setattr(intake_consumer, "event_deliver", flaky)
    routes = event_routes([START])
    done = message_process(
        structured("e-60", n=60),
        source="rabbitmq",
        address=QUEUE,
        routes=routes,
        stop=threading.Event(),
    )
    assert (done.verdict, len(calls)) == (ACK, 3)

    monkeypatch.setattr(intake_consumer, "event_deliver", failing_deliver(OperationalError("x")))
    stopped = threading.Event()
    stopped.set()
    held = message_process(
        structured("e-61"), source="rabbitmq", address=QUEUE, routes=routes, stop=stopped
    )
    assert held.verdict == TRANSIENT  # given back to the broker, not dead-lettered


def test_the_retry_wait_doubles_up_to_its_cap(settings):
    settings.VNEXT = {**settings.VNEXT, "EVENT_RETRY_SECONDS": 1.0, "EVENT_RETRY_MAX_SECONDS": 5}
    assert [retry_delay_seconds(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]
