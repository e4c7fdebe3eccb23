"""SCENARIOS.md section 1, schedule-after-auto, driven through the HTTP API: when the Auto step
picks a winner the state's timer is never armed; without a winner the 8 s timer is armed and
listed by the state function; cancel ends the instance and cancels the timer.

Timers fire: instead of waiting 8 s a test makes the armed `Job` row due (`update(run_at=...)`)
and runs it with `jobs_run_due()`; the fired `gate-timeout` lands on `gate-timedout` (sub-type
`timeout`). The upstream 2.5 s wait of `AutoAdvanceMapping` is dropped in the Python script (the
sandbox has no sleep), so the "while the chained hop is running" window of item 1 is not observed;
the sync start returns after the chain settled.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from instances.job_handlers import job_run, jobs_run_due
from instances.job_table import Job
from instances.models import InstanceTask
from instances.status import JobStatus
from tests.instances.scenario_api import HOP, api_fixture, at, make_due, scheduled, timers

pytestmark = pytest.mark.django_db

api = api_fixture("schedule-after-auto", history=HOP)


# --- 1. auto winner: no timer is ever armed -------------------------------------------------------


def test_auto_winner_chains_to_advanced_without_arming_the_timer(api):
    response = api.start({"attributes": {"mode": "auto", "testId": "t-auto"}})

    assert response.status_code == 200, response.json()
    instance_id = response.json()["id"]
    instance = api.detail(instance_id)
    assert instance["metadata"]["currentState"] == "advanced"
    assert instance["metadata"]["status"] == "A"
    data = instance["attributes"]
    assert data["mode"] == "auto"
    assert data["autoAdvances"] == 1
    assert data["timeoutFired"] == 0
    assert data["testId"] == "t-auto"
    assert api.history(instance_id) == [
        ("start-schedule-after-auto", "", "gate"),
        ("auto-advance", "gate", "advanced"),
    ]
    # Not armed and cancelled: never armed at all.
    assert timers(instance_id) == []
    state = api.state(instance_id)
    assert state["state"] == "advanced"
    assert scheduled(state) == []
    assert [t["name"] for t in state["transitions"]] == [
        "finish-advanced",
        "cancel-schedule-after-auto",
    ]


def test_auto_winner_then_finish_completes(api):
    instance_id = api.started({"attributes": {"mode": "auto"}})

    response = api.fire(instance_id, "finish-advanced")

    assert response.status_code == 200
    assert response.json()["status"] == "C"
    metadata = api.detail(instance_id)["metadata"]
    assert metadata["currentState"] == "advanced-done"
    assert metadata["status"] == "C"
    assert metadata["effectiveStateSubType"] == "success"
    assert api.detail(instance_id)["attributes"]["timeoutFired"] == 0
    assert timers(instance_id) == []


def test_auto_winner_has_no_timer_to_fire_later(api):
    """Item 1's "after 8 s + 5 s it is still `advanced` with `timeoutFired == 0`": no timer row
    exists, so running the due jobs (at any later time) changes nothing."""
    instance_id = api.started({"attributes": {"mode": "auto"}})
    assert list(Job.objects.filter(instance_id=instance_id)) == []

    outcome = jobs_run_due()

    assert outcome == {}
    instance = api.detail(instance_id)
    assert instance["metadata"]["currentState"] == "advanced"
    assert instance["metadata"]["status"] == "A"
    assert instance["attributes"]["timeoutFired"] == 0
    assert instance["attributes"]["autoAdvances"] == 1
    assert api.history(instance_id) == [
        ("start-schedule-after-auto", "", "gate"),
        ("auto-advance", "gate", "advanced"),
    ]
    assert scheduled(api.state(instance_id)) == []
    api.fire(instance_id, "finish-advanced")
    assert jobs_run_due() == {}
    assert api.detail(instance_id)["metadata"]["currentState"] == "advanced-done"


# --- 2. no auto winner: the timer is armed ~8 s ahead ---------------------------------------------


@pytest.mark.parametrize(
    "attributes",
    [
        pytest.param({"mode": "park"}, id="park"),
        pytest.param({}, id="no-mode"),
        pytest.param({"mode": "something-else"}, id="other-mode"),
    ],
)
def test_without_auto_winner_the_timer_is_armed(api, attributes):
    before = timezone.now()

    instance_id = api.started({"attributes": attributes})

    after = timezone.now()
    instance = api.detail(instance_id)
    assert instance["metadata"]["currentState"] == "gate"
    assert instance["metadata"]["status"] == "A"
    data = instance["attributes"]
    assert data["mode"] == attributes.get("mode", "park")
    assert data["autoAdvances"] == 0
    assert data["timeoutFired"] == 0
    (job,) = timers(instance_id)
    assert job.status == JobStatus.PENDING
    assert job.state == "gate"
    assert job.payload["transition"] == "gate-timeout"
    assert before + timedelta(seconds=8) <= job.run_at <= after + timedelta(seconds=8)
    assert api.history(instance_id) == [("start-schedule-after-auto", "", "gate")]


def test_state_function_lists_the_armed_gate_timeout(api):
    instance_id = api.started({"attributes": {"mode": "park"}})

    state = api.state(instance_id)

    assert state["state"] == "gate"
    (entry,) = scheduled(state)
    (job,) = timers(instance_id)
    assert entry["name"] == "gate-timeout"
    assert entry["href"].endswith(f"/{instance_id}/transitions/gate-timeout")
    executes_at = at(entry["executeAtUtc"])
    assert executes_at == job.run_at
    assert timedelta(seconds=6) < executes_at - timezone.now() <= timedelta(seconds=8)
    manual = [t["name"] for t in state["transitions"] if t.get("kind") != "scheduled"]
    assert manual == ["cancel-schedule-after-auto"]


@pytest.mark.parametrize(
    "attributes",
    [
        pytest.param({"mode": "park", "testId": "t-park"}, id="park"),
        pytest.param({}, id="no-mode"),
    ],
)
def test_the_due_gate_timeout_fires_into_gate_timedout(api, attributes):
    instance_id = api.started({"attributes": attributes})
    (job,) = timers(instance_id)

    make_due(job)
    outcome = jobs_run_due()

    assert outcome == {"succeeded": 1}
    instance = api.detail(instance_id)
    metadata = instance["metadata"]
    assert metadata["currentState"] == "gate-timedout"
    assert metadata["status"] == "C"
    assert metadata["effectiveStateType"] == "final"
    # `gate-timedout` is a final state of subType 8, reported by name.
    assert metadata["effectiveStateSubType"] == "timeout"
    assert metadata["completedAt"] is not None
    data = instance["attributes"]
    assert data["timeoutFired"] == 1
    assert data["autoAdvances"] == 0
    assert data["mode"] == "park"
    assert data.get("testId") == attributes.get("testId")
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.SUCCEEDED, 1)
    assert api.audit(instance_id) == [
        ("start-schedule-after-auto", "", "gate", "completed", 0, "operator"),
        ("gate-timeout", "gate", "gate-timedout", "completed", 2, "scheduler"),
    ]
    # The onExecute mapping of the scheduled transition ran once (`TimeoutMapping`).
    tasks = InstanceTask.objects.filter(instance_id=instance_id).select_related("transition")
    assert [
        (t.transition.transition_key if t.transition else None, t.phase, t.status)
        for t in tasks.order_by("pk")
    ] == [
        ("start-schedule-after-auto", "onExecute", "succeeded"),
        ("gate-timeout", "onExecute", "succeeded"),
    ]
    state = api.state(instance_id)
    assert state["state"] == "gate-timedout"
    assert state["status"] == "C"
    assert state["stateSubType"] == "timeout"
    assert state["transitions"] == []
    # Delivered again, the finished job is skipped: `timeoutFired` stays 1.
    assert job_run(job.pk) == "skipped"
    assert jobs_run_due() == {}
    assert api.detail(instance_id)["attributes"]["timeoutFired"] == 1


def test_the_gate_timeout_does_not_fire_before_it_is_due(api):
    instance_id = api.started({"attributes": {"mode": "park"}})

    assert jobs_run_due() == {}

    instance = api.detail(instance_id)
    assert instance["metadata"]["currentState"] == "gate"
    assert instance["attributes"]["timeoutFired"] == 0
    assert [job.status for job in timers(instance_id)] == [JobStatus.PENDING]


def test_free_payload_start_arms_the_timer_too(api):
    instance_id = api.started({"mode": "park", "testId": "t-free"})

    assert api.detail(instance_id)["attributes"]["testId"] == "t-free"
    assert [job.status for job in timers(instance_id)] == [JobStatus.PENDING]


def test_clients_cannot_fire_the_scheduled_or_auto_transitions(api):
    instance_id = api.started({"attributes": {"mode": "park"}})

    scheduled_fire = api.fire(instance_id, "gate-timeout")
    auto_fire = api.fire(instance_id, "auto-advance")

    for response in (scheduled_fire, auto_fire):
        assert response.status_code == 400
        assert response.json()["errorCode"] == "Transition:100020"
    assert api.detail(instance_id)["metadata"]["currentState"] == "gate"
    assert [job.status for job in timers(instance_id)] == [JobStatus.PENDING]


def test_finish_advanced_is_not_available_in_gate(api):
    instance_id = api.started({"attributes": {"mode": "park"}})

    response = api.fire(instance_id, "finish-advanced")

    assert response.status_code == 400
    assert response.json()["errorCode"] == "Transition:100020"


def test_idempotent_start_does_not_arm_a_second_timer(api):
    body = {"key": "saa-1", "attributes": {"mode": "park"}}
    first = api.start(body)
    second = api.start(body)

    assert first.json()["id"] == second.json()["id"]
    assert [job.status for job in timers(first.json()["id"])] == [JobStatus.PENDING]


# --- 3. cancel from gate --------------------------------------------------------------------------


def test_cancel_from_gate_ends_in_sched_cancelled_and_cancels_the_timer(api):
    instance_id = api.started({"attributes": {"mode": "park"}})

    response = api.fire(instance_id, "cancel-schedule-after-auto")

    assert response.status_code == 200
    assert response.json()["status"] == "C"
    metadata = api.detail(instance_id)["metadata"]
    assert metadata["currentState"] == "sched-cancelled"
    assert metadata["status"] == "C"
    assert metadata["effectiveStateType"] == "final"
    # DESIGN section 5: a cancelled instance reports the `cancelled` sub-type.
    assert metadata["effectiveStateSubType"] == "cancelled"
    assert metadata["completedAt"] is not None
    assert [job.status for job in timers(instance_id)] == [JobStatus.CANCELLED]
    state = api.state(instance_id)
    assert state["transitions"] == []
    assert api.history(instance_id)[-1] == (
        "cancel-schedule-after-auto",
        "gate",
        "sched-cancelled",
    )
    again = api.fire(instance_id, "cancel-schedule-after-auto")
    assert again.status_code == 400
    assert again.json()["errorCode"] == "Instance:100018"


def test_a_cancelled_gate_timeout_never_fires(api):
    instance_id = api.started({"attributes": {"mode": "park"}})
    api.fire(instance_id, "cancel-schedule-after-auto")
    (job,) = timers(instance_id)
    assert job.status == JobStatus.CANCELLED

    make_due(job, ago=timedelta(seconds=1))

    assert jobs_run_due() == {}
    assert job_run(job.pk) == "skipped"
    instance = api.detail(instance_id)
    assert instance["metadata"]["currentState"] == "sched-cancelled"
    assert instance["attributes"]["timeoutFired"] == 0
    assert [row[0] for row in api.history(instance_id)] == [
        "start-schedule-after-auto",
        "cancel-schedule-after-auto",
    ]
