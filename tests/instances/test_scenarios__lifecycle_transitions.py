"""SCENARIOS.md section 12, lifecycle-transitions-test-workflow, driven through the HTTP API:
a transition mapping, onEntry/onExit mappings, complementary auto rules with a default auto
transition, an absolute-time timer (armed, cancelled by a manual transition, re-armed by a `$self`
transition), and the workflow's cancel and exit transitions.

Timers fire: instead of waiting ~10 s a test makes the armed `Job` row due
(`update(run_at=...)`) and runs it with `jobs_run_due()`, so the pass path is followed through
`timer-triggered-state` to `completed-state`, and a cancelled or re-armed timer is shown not to fire
(or to fire once, re-armed). Roles and query roles (item 9, and the roles on
`move-to-processing` and `complete-workflow`) are not enforced yet and are not tested here.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from instances.job_handlers import job_run, jobs_run_due
from instances.job_table import Job
from instances.models import Instance, InstanceTask
from instances.status import JobStatus
from tests.instances.scenario_api import (
    TRIGGER,
    WorkflowApi,
    api_fixture,
    at,
    make_due,
    scheduled,
    timers,
)

pytestmark = pytest.mark.django_db

api = api_fixture("lifecycle-transitions-test-workflow", audit=TRIGGER)
TIMER = "scheduled-timer-transition"


PASS_PATH = [
    ("start-lifecycle-test", "", "initialize-state", 0, "operator"),
    ("move-to-processing", "initialize-state", "processing-state", 0, "operator"),
    ("auto-pass-transition", "processing-state", "auto-passed-state", 1, "operator"),
]


@pytest.fixture
def passed(api: WorkflowApi) -> str:
    """An instance on the pass path, parked in `auto-passed-state` with its timer armed."""
    instance_id = api.started({"attributes": {"testPath": "pass", "testId": "t-pass"}})
    api.fired(instance_id, "move-to-processing")
    return instance_id


# --- 1. pass path, up to the armed timer ----------------------------------------------------------


def test_start_runs_the_initialize_mapping(api):
    instance_id = api.started({"attributes": {"testPath": "pass"}})

    instance = api.detail(instance_id)
    assert instance["metadata"]["currentState"] == "initialize-state"
    assert instance["metadata"]["status"] == "A"
    data = instance["attributes"]
    assert data["testPath"] == "pass"
    assert data["initialized"] is True
    assert data["stepLog"] == ["initialize-state:onEntry"]
    assert at(data["initializedAt"]).tzinfo is not None
    assert timers(instance_id) == []


def test_start_without_test_path_defaults_to_pass(api):
    instance_id = api.started({"attributes": {}})

    assert api.detail(instance_id)["attributes"]["testPath"] == "pass"


def test_pass_path_runs_mapping_entry_rules_exit_then_arms_the_timer(api):
    instance_id = api.started({"attributes": {"testPath": "pass"}})
    before = timezone.now()

    answer = api.fired(instance_id, "move-to-processing", {"attributes": {"injected": "x"}})

    after = timezone.now()
    assert answer["status"] == "A"
    instance = api.detail(instance_id)
    assert instance["metadata"]["currentState"] == "auto-passed-state"
    assert instance["metadata"]["effectiveStateType"] == "intermediate"
    data = instance["attributes"]
    assert data["testPath"] == "pass"
    assert data["initialized"] is True
    assert data["stepLog"] == ["initialize-state:onEntry"]
    assert data["transitionMappingExecuted"] is True
    assert data["processEntryExecuted"] is True
    assert data["processExitExecuted"] is True
    # The transition mapping's result is written instead of the request body.
    assert "injected" not in data
    # Transition mapping, then onEntry, then (after the rules chose) onExit.
    assert at(data["transitionMappingAt"]) <= at(data["processedAt"]) <= at(data["exitedAt"])
    assert api.history(instance_id) == [
        ("start-lifecycle-test", "", "initialize-state", "completed"),
        ("move-to-processing", "initialize-state", "processing-state", "completed"),
        ("auto-pass-transition", "processing-state", "auto-passed-state", "completed"),
    ]
    phases = InstanceTask.objects.filter(instance_id=instance_id).order_by("pk")
    assert [(t.task_key, t.phase, t.status) for t in phases] == [
        ("script-task", "onExecute", "succeeded"),
        ("script-task", "onEntry", "succeeded"),
        ("script-task", "onExit", "succeeded"),
    ]
    (job,) = timers(instance_id)
    assert job.status == JobStatus.PENDING
    assert job.state == "auto-passed-state"
    assert job.payload["transition"] == TIMER
    assert before + timedelta(seconds=9) <= job.run_at <= after + timedelta(seconds=11)


def test_state_function_lists_the_armed_timer(api, passed):
    state = api.state(passed)

    assert state["state"] == "auto-passed-state"
    assert state["status"] == "A"
    (job,) = timers(passed)
    (entry,) = scheduled(state)
    assert entry["name"] == TIMER
    assert entry["href"].endswith(f"/{passed}/transitions/{TIMER}")
    assert at(entry["executeAtUtc"]) == job.run_at
    manual = [t["name"] for t in state["transitions"] if t.get("kind") != "scheduled"]
    assert manual == ["cancel-schedule-manually", "reschedule-timer", "cancel-workflow"]
    assert next(t for t in state["transitions"] if t["name"] == "cancel-workflow")["kind"] == (
        "cancel"
    )


def test_a_scheduled_transition_cannot_be_fired_by_a_client(api, passed):
    response = api.fire(passed, TIMER)

    assert response.status_code == 400
    assert response.json()["errorCode"] == "Transition:100020"
    assert api.detail(passed)["metadata"]["currentState"] == "auto-passed-state"
    assert [job.status for job in timers(passed)] == [JobStatus.PENDING]


def test_transition_errors_in_initialize_state(api):
    instance_id = api.started({"attributes": {"testPath": "pass"}})

    not_here = api.fire(instance_id, "complete-workflow")
    unknown = api.fire(instance_id, "no-such-transition")

    assert not_here.status_code == 400
    assert not_here.json()["errorCode"] == "Transition:100020"
    assert unknown.status_code == 404
    assert unknown.json()["errorCode"] == "Transition:100004"
    assert api.detail(instance_id)["metadata"]["currentState"] == "initialize-state"
    assert api.history(instance_id) == [
        ("start-lifecycle-test", "", "initialize-state", "completed"),
    ]


def test_the_timer_fires_through_timer_triggered_state_to_pre_complete(api, passed):
    (job,) = timers(passed)
    assert timedelta(seconds=5) < job.run_at - timezone.now() <= timedelta(seconds=10)
    assert jobs_run_due() == {}  # not due yet

    make_due(job)
    outcome = jobs_run_due()

    assert outcome == {"succeeded": 1}
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.SUCCEEDED, 1)
    instance = api.detail(passed)
    assert instance["metadata"]["currentState"] == "pre-complete-state"
    assert instance["metadata"]["status"] == "A"
    assert instance["metadata"]["effectiveStateType"] == "intermediate"
    data = instance["attributes"]
    # `TimerEntryMapping` (onEntry of timer-triggered-state) marked the timer and kept the flags.
    assert data["timerTriggered"] is True
    assert at(data["exitedAt"]) <= at(data["timerTriggeredAt"])
    assert data["testPath"] == "pass"
    assert data["transitionMappingExecuted"] is True
    assert data["processEntryExecuted"] is True
    assert data["processExitExecuted"] is True
    assert data["testId"] == "t-pass"
    rows = api.audit(passed)
    assert rows[:3] == PASS_PATH
    # The timer runs with the Scheduled profile; the auto hop it chains is triggered by it.
    assert rows[3] == (TIMER, "auto-passed-state", "timer-triggered-state", 2, "scheduler")
    assert rows[4] == (
        "auto-to-pre-complete",
        "timer-triggered-state",
        "pre-complete-state",
        1,
        "scheduler",
    )
    assert len(rows) == 5
    assert {row[3] for row in api.history(passed)} == {"completed"}
    # After the three tasks of the pass path, the onEntry of timer-triggered-state.
    phases = InstanceTask.objects.filter(instance_id=passed).order_by("pk")
    assert [(t.phase, t.status) for t in phases][3:] == [("onEntry", "succeeded")]
    state = api.state(passed)
    assert state["state"] == "pre-complete-state"
    assert scheduled(state) == []
    assert [t["name"] for t in state["transitions"]] == [
        "complete-workflow",
        "cancel-workflow",
        "exit-workflow",
    ]
    # Delivered again, the finished job changes nothing.
    assert job_run(job.pk) == "skipped"
    assert len(api.audit(passed)) == 5

    completed = api.fired(passed, "complete-workflow")

    assert completed["status"] == "C"
    metadata = api.detail(passed)["metadata"]
    assert metadata["currentState"] == "completed-state"
    assert metadata["status"] == "C"
    assert metadata["effectiveStateType"] == "final"
    assert metadata["effectiveStateSubType"] == "success"
    assert metadata["completedAt"] is not None
    assert api.audit(passed)[-1] == (
        "complete-workflow",
        "pre-complete-state",
        "completed-state",
        0,
        "operator",
    )
    assert [job.status for job in timers(passed)] == [JobStatus.SUCCEEDED]
    assert not Job.objects.filter(instance_id=passed, status=JobStatus.PENDING).exists()


# --- 2. fail path ---------------------------------------------------------------------------------


def test_fail_path_ends_in_auto_failed_state(api):
    instance_id = api.started({"attributes": {"testPath": "fail"}})

    answer = api.fired(instance_id, "move-to-processing")

    assert answer["status"] == "C"
    metadata = api.detail(instance_id)["metadata"]
    assert metadata["currentState"] == "auto-failed-state"
    assert metadata["status"] == "C"
    assert metadata["effectiveStateType"] == "final"
    assert metadata["effectiveStateSubType"] == "error"
    assert metadata["completedAt"] is not None
    assert api.history(instance_id)[-1] == (
        "auto-fail-transition",
        "processing-state",
        "auto-failed-state",
        "completed",
    )
    assert api.detail(instance_id)["attributes"]["processExitExecuted"] is True
    assert timers(instance_id) == []


# --- 3. default auto transition -------------------------------------------------------------------


def test_default_auto_transition_when_no_rule_matches(api):
    instance_id = api.started({"attributes": {"testPath": "unknown"}})

    answer = api.fired(instance_id, "move-to-processing")

    assert answer["status"] == "C"
    metadata = api.detail(instance_id)["metadata"]
    assert metadata["currentState"] == "completed-state"
    assert metadata["effectiveStateSubType"] == "success"
    assert api.history(instance_id)[1:] == [
        ("move-to-processing", "initialize-state", "processing-state", "completed"),
        ("default-auto-transition", "processing-state", "default-fallback-state", "completed"),
        ("fallback-to-complete", "default-fallback-state", "completed-state", "completed"),
    ]
    assert timers(instance_id) == []


# --- 4. idempotent start --------------------------------------------------------------------------


def test_idempotent_start_by_key(api):
    first = api.start({"key": "lt-key-1", "attributes": {"testPath": "pass"}})
    second = api.start({"key": "lt-key-1", "attributes": {"testPath": "fail"}})

    assert first.status_code == second.status_code == 200
    assert first.json()["id"] == second.json()["id"]
    assert Instance.objects.filter(workflow_key="lifecycle-transitions-test-workflow").count() == 1
    assert api.detail("lt-key-1")["attributes"]["testPath"] == "pass"


# --- 5. cancel from any state ---------------------------------------------------------------------


def _to_initialize(api: WorkflowApi) -> str:
    return api.started({"attributes": {"testPath": "pass"}})


def _to_auto_passed(api: WorkflowApi) -> str:
    instance_id = _to_initialize(api)
    api.fired(instance_id, "move-to-processing")
    return instance_id


def _to_pre_complete(api: WorkflowApi) -> str:
    instance_id = _to_auto_passed(api)
    api.fired(instance_id, "cancel-schedule-manually")
    return instance_id


@pytest.mark.parametrize(
    "reach",
    [
        pytest.param(_to_initialize, id="initialize-state"),
        pytest.param(_to_auto_passed, id="auto-passed-state"),
        pytest.param(_to_pre_complete, id="pre-complete-state"),
    ],
)
def test_cancel_workflow_from_any_live_state(api, reach):
    instance_id = reach(api)
    source = api.detail(instance_id)["metadata"]["currentState"]

    answer = api.fired(instance_id, "cancel-workflow")

    assert answer["status"] == "C"
    metadata = api.detail(instance_id)["metadata"]
    assert metadata["currentState"] == "terminated-state"
    assert metadata["status"] == "C"
    assert metadata["effectiveStateType"] == "final"
    # DESIGN section 5: a cancelled instance reports the `cancelled` sub-type.
    assert metadata["effectiveStateSubType"] == "cancelled"
    assert metadata["completedAt"] is not None
    assert api.history(instance_id)[-1] == (
        "cancel-workflow",
        source,
        "terminated-state",
        "completed",
    )
    assert all(job.status == JobStatus.CANCELLED for job in timers(instance_id))
    assert scheduled(api.state(instance_id)) == []
    assert api.fire(instance_id, "cancel-workflow").json()["errorCode"] == "Instance:100018"


def test_cancel_cancels_the_pending_timer(api, passed):
    assert [job.status for job in timers(passed)] == [JobStatus.PENDING]

    api.fired(passed, "cancel-workflow")

    assert [job.status for job in timers(passed)] == [JobStatus.CANCELLED]


# --- 6. exit --------------------------------------------------------------------------------------


def test_exit_from_initialize_state_runs_the_exit_mapping(api):
    instance_id = api.started({"attributes": {"testPath": "pass", "testId": "t-exit"}})

    answer = api.fired(instance_id, "exit-workflow")

    assert answer["status"] == "C"
    instance = api.detail(instance_id)
    assert instance["metadata"]["currentState"] == "terminated-state"
    assert instance["metadata"]["status"] == "C"
    assert instance["metadata"]["effectiveStateSubType"] == "terminated"
    data = instance["attributes"]
    assert data["exitExecuted"] is True
    assert at(data["exitAt"]).tzinfo is not None
    assert data["testId"] == "t-exit"
    assert api.history(instance_id)[-1] == (
        "exit-workflow",
        "initialize-state",
        "terminated-state",
        "completed",
    )


def test_exit_is_offered_in_initialize_state(api):
    instance_id = api.started({"attributes": {"testPath": "pass"}})

    transitions = api.state(instance_id)["transitions"]

    assert [(t["name"], t.get("kind")) for t in transitions] == [
        ("move-to-processing", None),
        ("cancel-workflow", "cancel"),
        ("exit-workflow", "exit"),
    ]


def test_exit_is_refused_outside_its_available_states(api, passed):
    offered = [t["name"] for t in api.state(passed)["transitions"]]

    refused = api.fire(passed, "exit-workflow")

    assert "exit-workflow" not in offered
    assert refused.status_code == 400
    assert refused.json()["errorCode"] == "Transition:100020"
    assert api.detail(passed)["metadata"]["currentState"] == "auto-passed-state"


def test_exit_from_pre_complete_state(api):
    instance_id = _to_pre_complete(api)

    api.fired(instance_id, "exit-workflow")

    instance = api.detail(instance_id)
    assert instance["metadata"]["currentState"] == "terminated-state"
    assert instance["attributes"]["exitExecuted"] is True


# --- 7. cancel the timer manually -----------------------------------------------------------------


def test_cancel_schedule_manually_cancels_the_timer_then_complete(api, passed):
    answer = api.fired(passed, "cancel-schedule-manually")

    assert answer["status"] == "A"
    state = api.state(passed)
    assert state["state"] == "pre-complete-state"
    assert scheduled(state) == []
    assert [t["name"] for t in state["transitions"]] == [
        "complete-workflow",
        "cancel-workflow",
        "exit-workflow",
    ]
    assert [(job.status, job.state) for job in timers(passed)] == [
        (JobStatus.CANCELLED, "auto-passed-state")
    ]

    completed = api.fired(passed, "complete-workflow")

    assert completed["status"] == "C"
    metadata = api.detail(passed)["metadata"]
    assert metadata["currentState"] == "completed-state"
    assert metadata["effectiveStateSubType"] == "success"
    assert [job.status for job in timers(passed)] == [JobStatus.CANCELLED]


def test_a_manually_cancelled_timer_never_fires(api, passed):
    api.fired(passed, "cancel-schedule-manually")
    (job,) = timers(passed)
    assert job.status == JobStatus.CANCELLED

    make_due(job, ago=timedelta(seconds=5))

    assert jobs_run_due() == {}
    assert job_run(job.pk) == "skipped"
    instance = api.detail(passed)
    assert instance["metadata"]["currentState"] == "pre-complete-state"
    assert instance["metadata"]["status"] == "A"
    assert "timerTriggered" not in instance["attributes"]
    assert [row[0] for row in api.audit(passed)] == [
        "start-lifecycle-test",
        "move-to-processing",
        "auto-pass-transition",
        "cancel-schedule-manually",
    ]
    assert Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED


def test_a_stale_timer_of_a_state_already_left_is_void(api, passed):
    """Belt and braces: a timer row still pending (say, a cancel that raced) whose state was
    left is run, applies nothing and ends `skipped` saying why."""
    api.fired(passed, "cancel-schedule-manually")
    (job,) = timers(passed)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.PENDING, run_at=timezone.now())

    assert jobs_run_due() == {"skipped": 1}
    job.refresh_from_db()
    assert job.status == JobStatus.SKIPPED
    assert "left state 'auto-passed-state'" in job.last_error

    instance = api.detail(passed)
    assert instance["metadata"]["currentState"] == "pre-complete-state"
    assert "timerTriggered" not in instance["attributes"]
    assert TIMER not in [row[0] for row in api.audit(passed)]


# --- 8. re-arm the timer with a $self transition --------------------------------------------------


def test_reschedule_timer_rearms_from_now(api, passed):
    (old,) = timers(passed)
    before = timezone.now()

    answer = api.fired(passed, "reschedule-timer")

    after = timezone.now()
    assert answer["status"] == "A"
    old.refresh_from_db()
    assert old.status == JobStatus.CANCELLED
    pending = Job.objects.filter(instance_id=passed, kind="timer", status=JobStatus.PENDING)
    (new,) = pending
    assert new.pk != old.pk
    assert new.state == "auto-passed-state"
    assert new.payload["transition"] == TIMER
    assert before + timedelta(seconds=9) <= new.run_at <= after + timedelta(seconds=11)
    assert new.run_at >= old.run_at
    state = api.state(passed)
    assert state["state"] == "auto-passed-state"
    (entry,) = scheduled(state)
    assert at(entry["executeAtUtc"]) == new.run_at
    assert api.history(passed)[-1] == (
        "reschedule-timer",
        "auto-passed-state",
        "auto-passed-state",
        "completed",
    )


def test_reschedule_twice_keeps_exactly_one_pending_timer(api, passed):
    api.fired(passed, "reschedule-timer")
    api.fired(passed, "reschedule-timer")

    statuses = [job.status for job in timers(passed)]
    assert statuses == [JobStatus.CANCELLED, JobStatus.CANCELLED, JobStatus.PENDING]
    assert len(scheduled(api.state(passed))) == 1


def test_the_rearmed_timer_fires_and_the_old_one_does_not(api, passed):
    (old,) = timers(passed)

    api.fired(passed, "reschedule-timer")

    old.refresh_from_db()
    new = Job.objects.get(instance_id=passed, kind="timer", status=JobStatus.PENDING)
    assert old.status == JobStatus.CANCELLED
    assert new.run_at > old.run_at
    # The old deadline passing changes nothing.
    make_due(old, ago=timedelta(seconds=1))
    assert jobs_run_due() == {}
    assert api.detail(passed)["metadata"]["currentState"] == "auto-passed-state"

    make_due(new)
    outcome = jobs_run_due()

    assert outcome == {"succeeded": 1}
    instance = api.detail(passed)
    assert instance["metadata"]["currentState"] == "pre-complete-state"
    assert instance["attributes"]["timerTriggered"] is True
    assert [(job.pk, job.status) for job in timers(passed)] == [
        (old.pk, JobStatus.CANCELLED),
        (new.pk, JobStatus.SUCCEEDED),
    ]
    rows = api.audit(passed)
    assert [row[0] for row in rows] == [
        "start-lifecycle-test",
        "move-to-processing",
        "auto-pass-transition",
        "reschedule-timer",
        TIMER,
        "auto-to-pre-complete",
    ]
    assert rows[4] == (TIMER, "auto-passed-state", "timer-triggered-state", 2, "scheduler")
