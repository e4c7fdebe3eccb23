"""Outbound instance events (instances/outbox.py): the outbox rows a change writes, in the
transaction of that change, only for a subscribed workflow. A start, a hop and the final hop of a
subscribed workflow cost the statements they cost without a subscription (the events are a part
of the one statement); an unsubscribed workflow's statements do not change at all; a rolled-back
or refused hop leaves no row; faults, incidents and their resolution are events too, and the
events carry no instance data. The pending rows are metrics; published ones are pruned after
their retention (or deleted at once without one)."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any, cast

import pytest
import redis
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from instances.engine.errors import VNextError
from instances.engine.outcomes import PipelineFault
from instances.metrics import DatabaseCollector
from instances.models import Instance, OutboxEvent
from instances.operations import incident_resolve
from instances.outbox_relay import Relay, outbox_prune
from instances.services import RequestInfo, instance_start, instance_transition
from tests.engine.builders import state, task_ref, transition, workflow
from tests.instances.workflows import CANCEL, publish

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

INFO = RequestInfo(actor="clerk")
ORDER = "ev-order"
OTHER = "ev-other"
PREFIX = "io.vnext.instance."


def order_document(key: str) -> dict[str, Any]:
    """draft -submit-> submitted -approve-> approved (Final); `break` faults (a script task
    whose handler raises); `cancel` ends it."""
    return workflow(
        [
            state(
                "draft",
                1,
                [
                    transition("submit", "submitted"),
                    transition("break", "submitted", onExecutionTasks=[task_ref("1 / 0")]),
                ],
            ),
            state("submitted", 2, [transition("approve", "approved")]),
            state("approved", 3, subType=1),
            state("cancelled", 3, subType=3),
        ],
        key=key,
        cancel=CANCEL,
    )


@pytest.fixture(autouse=True)
def published(db: None, settings: Any) -> None:
    publish(order_document(ORDER), order_document(OTHER))
    settings.VNEXT = {
        **settings.VNEXT,
        "OUTBOX_SUBSCRIPTIONS": {f"core/{ORDER}": [{"target": "bus", "types": ["*"]}]},
    }
    # Warm the registry and the statement caches of both workflows.
    for key in (ORDER, OTHER):
        instance_start(domain="core", workflow=key, body={"attributes": {}}, info=INFO)
    OutboxEvent.objects.all().delete()


def start(key: str = ORDER, **attributes: Any) -> Any:
    return instance_start(
        domain="core", workflow=key, body={"attributes": attributes}, info=INFO
    ).instance


def step(instance_id: Any, name: str, key: str = ORDER, **attributes: Any) -> Any:
    return instance_transition(
        domain="core",
        workflow=key,
        ref=str(instance_id),
        transition_key=name,
        body={"attributes": attributes},
        info=INFO,
    ).instance


def events_of(instance_id: Any) -> list[tuple[str, str, str]]:
    """(kind, state, status) of the instance's rows, in the relay's order."""
    rows = OutboxEvent.objects.filter(instance_id=instance_id).order_by("id")
    return [(row.type.removeprefix(PREFIX), row.data["state"], row.data["status"]) for row in rows]


def statements(run: Any) -> tuple[Any, list[str]]:
    with CaptureQueriesContext(connection) as captured:
        result = run()
    return result, [query["sql"] for query in captured.captured_queries]


def test_a_subscribed_instance_s_life_is_one_event_per_change_in_order():
    instance = start(amount=100)
    step(instance.id, "submit", amount=120)
    step(instance.id, "approve")

    assert events_of(instance.id) == [
        ("started", "draft", "Active"),
        ("state-entered", "draft", "Active"),
        ("state-entered", "submitted", "Active"),
        ("state-entered", "approved", "Completed"),
        ("completed", "approved", "Completed"),
    ]
    rows = list(OutboxEvent.objects.filter(instance_id=instance.id).order_by("id"))
    assert {row.target for row in rows} == {"bus"}
    assert all(row.published_at is None for row in rows)
    assert len({row.event_id for row in rows}) == 5
    assert rows[0].source == f"/core/workflows/{ORDER}/instances/{instance.id}"
    assert [row.subject for row in rows] == ["draft", "draft", "submitted", "approved", "approved"]
    # The data version each change committed; the transition that entered each state.
    assert [row.data["dataVersion"] for row in rows] == [
        "1.0.0",
        "1.0.0",
        "1.1.0",
        "1.1.0",
        "1.1.0",
    ]
    assert [row.data["transition"] for row in rows] == ["", "start", "submit", "approve", ""]
    # Where the instance is, never its data.
    assert "amount" not in str(rows[2].data)
    assert set(rows[2].data) == {
        "instanceId", "domain", "workflow", "workflowVersion", "key", "state", "status",
        "transition", "dataVersion",
    }  # fmt: skip


def test_a_subscribed_start_and_hops_cost_no_extra_statement():
    instance, started = statements(lambda: start())
    _, hop = statements(lambda: step(instance.id, "submit"))
    _, final = statements(lambda: step(instance.id, "approve"))

    assert len(started) == 1, started
    assert len(hop) == 2, hop  # the read and the one statement, its events a part of it
    assert len(final) == 2, final
    assert "outbox AS (INSERT INTO instances_outboxevent" in hop[1]
    assert len(events_of(instance.id)) == 5


def test_an_unsubscribed_workflow_writes_no_row_and_the_same_statements(settings):
    def life() -> list[str]:
        instance, first = statements(lambda: start(OTHER))
        _, second = statements(lambda: step(instance.id, "submit", OTHER))
        _, third = statements(lambda: step(instance.id, "approve", OTHER))
        return first + second + third

    subscribed_elsewhere = life()
    settings.VNEXT = {**settings.VNEXT, "OUTBOX_SUBSCRIPTIONS": {}}
    no_subscription_at_all = life()

    assert len(subscribed_elsewhere) == len(no_subscription_at_all) == 5
    assert not [sql for sql in subscribed_elsewhere if "outboxevent" in sql]
    assert OutboxEvent.objects.count() == 0


def test_a_rolled_back_hop_leaves_no_outbox_row():
    instance = start()
    before = OutboxEvent.objects.count()

    seen_inside: list[int] = []

    def hop_then_roll_back() -> None:
        with transaction.atomic():
            step(instance.id, "submit")
            seen_inside.append(OutboxEvent.objects.count())  # in the hop's transaction
            raise RuntimeError("the caller's transaction rolls back")

    with pytest.raises(RuntimeError):
        hop_then_roll_back()

    assert seen_inside == [before + 1]

    assert OutboxEvent.objects.count() == before
    assert Instance.objects.get(pk=instance.id).current_state == "draft"
    step(instance.id, "submit")
    assert [kind for kind, _, _ in events_of(instance.id)][-1] == "state-entered"


def test_a_refused_hop_writes_no_row():
    instance = start()
    step(instance.id, "submit")
    before = OutboxEvent.objects.count()

    with pytest.raises(VNextError):
        step(instance.id, "submit")  # not a transition of `submitted`

    assert OutboxEvent.objects.count() == before


def test_a_fault_is_faulted_and_incident_opened_and_cancel_resolves_it():
    instance = start()

    with pytest.raises(PipelineFault):
        step(instance.id, "break")
    step(instance.id, "cancel")

    assert events_of(instance.id) == [
        ("started", "draft", "Active"),
        ("state-entered", "draft", "Active"),
        ("faulted", "draft", "Faulted"),
        ("incident-opened", "draft", "Faulted"),
        ("state-entered", "cancelled", "Completed"),
        ("incident-resolved", "cancelled", "Completed"),
        ("completed", "cancelled", "Completed"),
    ]
    rows = OutboxEvent.objects.filter(instance_id=instance.id).order_by("id")
    opened = rows.get(type=PREFIX + "incident-opened").data
    assert (opened["errorCode"], opened["step"], opened["transition"]) == (
        "Task:400008",
        "ON_EXECUTE",
        "break",
    )
    assert "message" not in opened  # a message may quote a value: never published
    resolved = rows.get(type=PREFIX + "incident-resolved").data
    assert (resolved["resolution"], resolved["resolvedBy"]) == ("cancelled", "clerk")


def test_an_operator_s_resolve_is_an_incident_resolved_event():
    instance = start()
    with pytest.raises(PipelineFault):
        step(instance.id, "break")

    incident_resolve(instance=Instance.objects.get(pk=instance.id), actor="ops")
    again = incident_resolve(instance=Instance.objects.get(pk=instance.id), actor="ops")

    assert [kind for kind, _, _ in events_of(instance.id)][-3:] == [
        "faulted",
        "incident-opened",
        "incident-resolved",
    ]  # the second resolve closed nothing: no event
    assert again.detail == "no open incident"


def test_a_retry_that_faults_again_opens_a_new_incident_and_resolves_none():
    instance = start()
    with pytest.raises(PipelineFault):
        step(instance.id, "break")

    from instances.services import instance_retry

    with pytest.raises(PipelineFault):
        instance_retry(domain="core", workflow=ORDER, ref=str(instance.id), body={}, info=INFO)

    kinds = [kind for kind, _, _ in events_of(instance.id)]
    assert kinds.count("incident-opened") == 2
    assert "incident-resolved" not in kinds


def test_types_and_targets_select_the_rows(settings):
    settings.VNEXT = {
        **settings.VNEXT,
        "OUTBOX_SUBSCRIPTIONS": {
            f"core/{ORDER}": [
                {"target": "bus", "types": ["completed"]},
                {"target": "audit", "types": ["io.vnext.instance.state-*"]},
            ],
            "core/*": [{"target": "catch-all"}],
            f"core/{OTHER}": [],
        },
    }
    instance = start()
    step(instance.id, "submit")
    step(instance.id, "approve")
    other = start(OTHER)

    rows = OutboxEvent.objects.filter(instance_id=instance.id).order_by("id")
    assert [(row.target, row.type.removeprefix(PREFIX)) for row in rows] == [
        ("audit", "state-entered"),
        ("audit", "state-entered"),
        ("audit", "state-entered"),
        ("bus", "completed"),
    ]
    assert not OutboxEvent.objects.filter(instance_id=other.id).exists()  # [] turns it off


def test_an_async_start_s_started_event_is_part_of_its_one_statement():
    outcome, sql = statements(
        lambda: instance_start(
            domain="core", workflow=ORDER, body={"attributes": {}}, info=INFO, sync=False
        )
    )

    assert len(sql) == 1, sql
    assert events_of(outcome.instance.id) == [("started", "draft", "Busy")]


def test_metrics_show_the_pending_events_and_their_age():
    start()

    families = {family.name: family for family in DatabaseCollector().collect()}

    (pending,) = families["vnext_outbox_pending_events"].samples
    assert (pending.labels, pending.value) == ({"target": "bus"}, 2)
    (age,) = families["vnext_outbox_oldest_pending_age_seconds"].samples
    assert 0 <= age.value < 60


def test_prune_deletes_only_rows_published_before_the_retention():
    instance = start()
    step(instance.id, "submit")
    rows = list(OutboxEvent.objects.filter(instance_id=instance.id).order_by("id"))
    long_ago = timezone.now() - timedelta(days=3)
    OutboxEvent.objects.filter(pk=rows[0].pk).update(published_at=long_ago)
    OutboxEvent.objects.filter(pk=rows[1].pk).update(published_at=timezone.now())

    assert outbox_prune(retention=timedelta(days=1)) == 1

    left = OutboxEvent.objects.filter(instance_id=instance.id).order_by("id")
    assert [(row.pk, row.published_at is None) for row in left] == [
        (rows[1].pk, False),
        (rows[2].pk, True),  # pending: never pruned
    ]


def test_a_relay_without_retention_deletes_what_the_broker_confirmed():
    client = redis.Redis.from_url("redis://127.0.0.1:6379/13")
    stream = f"vnext.test.outbox.{uuid.uuid4().hex[:8]}"
    relay = Relay(
        targets={"bus": {"broker": "redis", "url": "redis://127.0.0.1:6379/13", "stream": stream}},
        batch_size=10,
        retention=timedelta(0),
    )
    instance = start()
    step(instance.id, "submit")
    expected = [
        str(event_id)
        for event_id in OutboxEvent.objects.order_by("id").values_list("event_id", flat=True)
    ]
    try:
        assert relay.publish_batch("bus", relay.targets["bus"]) == 3
        assert relay.publish_batch("bus", relay.targets["bus"]) == 0
        entries = cast(list[tuple[bytes, dict[bytes, bytes]]], client.xrange(stream))
    finally:
        relay.close()
        client.delete(stream)

    assert [json.loads(fields[b"data"])["id"] for _, fields in entries] == expected
    assert OutboxEvent.objects.count() == 0


def test_an_automatic_chain_committed_at_once_has_an_event_per_state_it_entered(settings):
    chain = "ev-chain"
    publish(
        workflow(
            [
                state("begin", 1, [transition("go", "middle", 1, triggerKind=10)]),
                state("middle", 2, [transition("on", "end", 1, triggerKind=10)]),
                state("end", 3, subType=1),
            ],
            key=chain,
        )
    )
    settings.VNEXT = {
        **settings.VNEXT,
        "OUTBOX_SUBSCRIPTIONS": {"core/*": [{"target": "bus"}]},
    }

    start(chain)  # the registry reads the new workflow once

    instance, sql = statements(lambda: start(chain))

    assert len(sql) == 1, sql  # the start and its whole chain: one statement
    assert [(kind, state_key) for kind, state_key, _ in events_of(instance.id)] == [
        ("started", "begin"),
        ("state-entered", "begin"),
        ("state-entered", "middle"),
        ("state-entered", "end"),
        ("completed", "end"),
    ]
    rows = OutboxEvent.objects.filter(instance_id=instance.id).order_by("id")
    assert [row.data["transition"] for row in rows][1:4] == ["start", "go", "on"]


@pytest.mark.parametrize(
    ("targets", "problem"),
    [
        ({"bus": {"broker": "kafka", "url": "x"}}, "unknown broker 'kafka'"),
        ({"bus": {"broker": "rabbitmq"}}, "needs the broker's url"),
    ],
)
def test_a_relay_refuses_to_start_on_a_target_it_cannot_use(settings, targets, problem):
    # Refused at start: not failing every batch, nor publishing to a default localhost broker.
    settings.VNEXT = {**settings.VNEXT, "OUTBOX_TARGETS": targets}
    with pytest.raises(ValueError, match=problem):
        Relay.from_settings()
