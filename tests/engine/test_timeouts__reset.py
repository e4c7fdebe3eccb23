"""`timer.reset` of the workflow timeout: the vocabulary (case-insensitive, the documents'
"from the start" spellings, `OnEntry` of the vNext sample among them, and the two re-arming
strategies), and, through the pipeline on the in-memory store with a clock of its own, when the
one timeout job is moved to a new deadline: after every transition (`transition`), on entering
another state (`state-change`), never (`None`, `OnEntry`: vNext arms the deadline once, at the
instance's start); never by updateData, and a final state cancels it instead."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from instances.engine.timeouts import TimerReset, parse_reset
from tests.engine.builders import Harness, state, transition, workflow

T0 = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


@pytest.mark.parametrize(
    ("value", "reset"),
    [
        ("None", TimerReset.NEVER),
        ("N", TimerReset.NEVER),
        ("never", TimerReset.NEVER),
        ("NEVER", TimerReset.NEVER),
        ("false", TimerReset.NEVER),
        ("workflow-start", TimerReset.NEVER),
        ("OnEntry", TimerReset.NEVER),
        ("on-entry", TimerReset.NEVER),
        ("ON_ENTRY", TimerReset.NEVER),
        ("", TimerReset.NEVER),
        ("transition", TimerReset.TRANSITION),
        ("On-Transition", TimerReset.TRANSITION),
        ("state-change", TimerReset.STATE_CHANGE),
        ("StateChange", TimerReset.STATE_CHANGE),
        ("on_state_change", TimerReset.STATE_CHANGE),
        ("OnExit", None),
        ("entry", None),
        ("always", None),
        ("true", None),
        ("daily", None),
    ],
)
def test_reset_values_are_read_case_insensitively(value, reset):
    assert parse_reset(value) is reset


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def harness(reset: str) -> tuple[Harness, Clock]:
    document = workflow(
        [
            state("a", 1, [transition("to-b", "b")]),
            state("b", 2, [transition("to-c", "c"), transition("stay", "$self")]),
            state("c", 2, [transition("finish", "done")]),
            state("done", 3, subType=1),
            state("late", 3, subType=2),
        ],
        timeout={
            "key": "expire",
            "target": "late",
            "versionStrategy": "None",
            "timer": {"reset": reset, "duration": "PT1H"},
        },
        updateData={
            "key": "update-data",
            "target": "$self",
            "triggerType": 0,
            "versionStrategy": "Patch",
            "labels": [{"label": "x", "language": "en"}],
        },
    )
    h = Harness(document)
    clock = Clock()
    h.engine.clock = clock
    return h, clock


def timeout_jobs(h: Harness) -> list[tuple[datetime, str]]:
    return [(job["run_at"], job["status"]) for job in h.store.jobs if job["kind"] == "timeout"]


def started(h: Harness) -> Any:
    instance_id = h.start().instance.id
    assert timeout_jobs(h) == [(T0 + HOUR, "pending")]
    return instance_id


def test_transition_re_arms_the_one_timeout_job_after_every_transition():
    h, clock = harness("transition")
    instance_id = started(h)

    clock.now = T0 + timedelta(minutes=50)
    h.fire(instance_id, "to-b")
    assert timeout_jobs(h) == [(clock.now + HOUR, "pending")]

    clock.now += timedelta(minutes=50)
    h.fire(instance_id, "stay")  # a `$self` transition is a transition too
    assert timeout_jobs(h) == [(clock.now + HOUR, "pending")]


def test_state_change_re_arms_only_when_another_state_is_entered():
    h, clock = harness("State-Change")
    instance_id = started(h)

    clock.now = T0 + timedelta(minutes=20)
    h.fire(instance_id, "to-b")
    entered_b = clock.now
    clock.now += timedelta(minutes=20)
    h.fire(instance_id, "stay")

    assert timeout_jobs(h) == [(entered_b + HOUR, "pending")]


@pytest.mark.parametrize("reset", ["None", "OnEntry"])
def test_never_and_on_entry_keep_the_deadline_from_the_start(reset):
    h, clock = harness(reset)
    instance_id = started(h)

    clock.now = T0 + timedelta(minutes=30)
    h.fire(instance_id, "to-b")
    clock.now += timedelta(minutes=10)
    h.fire(instance_id, "stay")  # re-entering b runs its onEntries and moves nothing either
    h.fire(instance_id, "to-c")

    assert h.load(instance_id).current_state == "c"
    assert timeout_jobs(h) == [(T0 + HOUR, "pending")]


def test_update_data_does_not_re_arm():
    h, clock = harness("transition")
    instance_id = started(h)

    clock.now = T0 + timedelta(minutes=30)
    h.fire(instance_id, "update-data", {"note": "x"})

    assert h.load(instance_id).data == {"note": "x"}
    assert timeout_jobs(h) == [(T0 + HOUR, "pending")]


def test_reaching_a_final_state_cancels_the_timeout_instead_of_re_arming_it():
    h, clock = harness("transition")
    instance_id = started(h)
    h.fire(instance_id, "to-b")
    h.fire(instance_id, "to-c")
    armed = timeout_jobs(h)

    clock.now = T0 + timedelta(minutes=30)
    h.fire(instance_id, "finish")

    assert [status for _, status in timeout_jobs(h)] == ["cancelled"]
    assert timeout_jobs(h)[0][0] == armed[0][0]
