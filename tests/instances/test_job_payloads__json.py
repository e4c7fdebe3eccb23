"""Typed job payloads keep the stored JSON: a payload written as the untyped camelCase dict jobs
have always held loads through `from_json`, and `to_json` writes that same dict back."""

from __future__ import annotations

from typing import Any

import pytest

from instances.job_handlers import jobs_run_due
from instances.job_payloads import (
    AutomaticJob,
    BoundaryRetryJob,
    EventReceipt,
    EventTransitionJob,
    FaultToRetry,
    LongPollFallbackJob,
    NotificationJob,
    RetryJob,
    SubflowEndJob,
    SubflowResumeJob,
    TaskNotificationJob,
    TimerJob,
    TransitionJob,
    transition_job_of,
)
from instances.job_table import Job
from instances.models import Instance
from tests.instances.workflows import ping_pong, publish

# Payloads as the writers stored them before the records existed (one per job kind and shape).
ASYNC_START = {
    "transition": "start",
    "attributes": {"a": 1},
    "body": {"attributes": {"a": 1}},
    "headers": {"x-trace": "t"},
    "query": {"sync": "false"},
    "actor": "alice",
    "stage": "",
    "start": True,
    "reservation": "res:0f",
}
ASYNC_TRANSITION = {
    "transition": "to-pong",
    "attributes": {},
    "body": {},
    "headers": {},
    "query": {},
    "actor": "bob",
    "stage": "s1",
    "fromState": "ping",
    "reservation": "res:1a",
    "trigger": 3,
    "chainReserved": "6d2f1c1e-0000-4000-8000-000000000001",
}
LANE_TICKET = {**ASYNC_TRANSITION, "lockFree": True}
WAITING_PARENT = {key: value for key, value in ASYNC_TRANSITION.items() if key != "reservation"} | {
    "waitingParent": True
}
SUBFLOW_CHILD_START = {
    "transition": "start",
    "start": True,
    "attributes": {"n": 1},
    "body": {"n": 1},
    "headers": {},
    "query": {},
    "actor": "alice",
    "stage": "",
    "reservation": "res:2b",
    "origin": "6d2f1c1e-0000-4000-8000-000000000002",
}
RETRY = {
    "retry": {"transition_key": "to-pong", "from_state": "ping", "trigger": 1, "step": "ON_ENTRY"},
    "transition": "to-pong",
    "reservation": "retry:3c",
    "actor": "operator",
    "headers": {},
    "query": {},
}
BOUNDARY_RETRY = {
    "boundaryRetry": {
        "transition": "to-pong",
        "fromState": "ping",
        "trigger": 1,
        "step": "ON_EXECUTE",
        "phase": "onExecute",
        "order": 2,
        "tasks": ["call"],
        "retry": 1,
        "rowId": "6d2f1c1e-0000-4000-8000-000000000003",
        "resolvesIncidents": "",
    },
    "reservation": "4d",
    "actor": "alice",
    "headers": {"x-trace": "t"},
    "query": {},
}

ROUND_TRIPS: list[tuple[Any, dict[str, Any]]] = [
    (TransitionJob, ASYNC_START),
    (TransitionJob, ASYNC_TRANSITION),
    (TransitionJob, LANE_TICKET),
    (TransitionJob, WAITING_PARENT),
    (TransitionJob, SUBFLOW_CHILD_START),
    (RetryJob, RETRY),
    (BoundaryRetryJob, BOUNDARY_RETRY),
    (TimerJob, {"transition": "expire", "state": "ping"}),
    (TimerJob, {"transition": "timeout"}),
    (AutomaticJob, {"state": "ping", "after": "auto"}),
    (LongPollFallbackJob, {"token": "5e", "state": "ping"}),
    (
        NotificationJob,
        {"state": "ping", "index": 0, "transition": "start", "enteredAt": "2026-12-01T10:00:00"},
    ),
    (
        TaskNotificationJob,
        {
            "task": "notify",
            "channel": "state",
            "content": {"a": 1},
            "headers": {"x": "y"},
            "state": "ping",
            "transition": "start",
            "at": "2026-12-01T10:00:00",
        },
    ),
    (SubflowResumeJob, {"child": "6d2f", "correlation": 7, "origin": "6d2f"}),
    (SubflowEndJob, {"transitionKind": "cancel", "correlation": 7, "origin": "9a1b"}),
    (
        EventTransitionJob,
        {
            "eventId": "ev-1",
            "domain": "core",
            "workflow": "ping-pong",
            "transition": "to-pong",
            "attributes": {"a": 1},
            "actor": "event",
        },
    ),
    (EventReceipt, {"eventId": "ev-1", "action": "start", "workflow": "ping-pong"}),
]


@pytest.mark.parametrize(("record", "stored"), ROUND_TRIPS)
def test_a_stored_payload_loads_and_is_written_back_unchanged(record, stored):
    assert record.from_json(stored).to_json() == stored


def test_the_transition_kind_tells_its_three_shapes_apart():
    assert isinstance(transition_job_of(ASYNC_START), TransitionJob)
    retry = transition_job_of(RETRY)
    assert isinstance(retry, RetryJob)
    assert retry.fault == FaultToRetry("to-pong", "ping", 1, "ON_ENTRY")
    boundary = transition_job_of(BOUNDARY_RETRY)
    assert isinstance(boundary, BoundaryRetryJob)
    assert boundary.boundary_retry.fault == FaultToRetry("to-pong", "ping", 1, "ON_EXECUTE")
    assert boundary.boundary_retry.tasks == ["call"]


def test_keys_a_reader_does_not_know_are_ignored():
    loaded = TransitionJob.from_json({**ASYNC_TRANSITION, "requestId": "r-1", "admitted": True})
    assert (loaded.from_state, loaded.trigger, loaded.lock_free) == ("ping", 3, False)


@pytest.mark.django_db
def test_an_async_start_job_stored_as_the_old_dict_still_runs(operator_client):
    publish(ping_pong())
    base = "/api/v1/core/workflows/ping-pong/instances"
    accepted = operator_client.post(f"{base}/start", {"attributes": {"a": 1}}, format="json")
    assert accepted.status_code == 202, accepted.json()
    row = Instance.objects.get(pk=accepted.json()["id"])
    [job] = Job.objects.filter(instance_id=row.pk)
    # The job row as it was written before the typed payloads: the hand-written dict.
    Job.objects.filter(pk=job.pk).update(
        payload={
            "transition": job.payload["transition"],
            "attributes": {"a": 1},
            "body": {"attributes": {"a": 1}},
            "headers": {},
            "query": {},
            "actor": "",
            "stage": "",
            "start": True,
            "reservation": row.busy_owner,
        }
    )
    assert jobs_run_due() == {"succeeded": 1}
    row.refresh_from_db()
    assert (row.status, row.current_state, row.data) == ("A", "ping", {"a": 1})
