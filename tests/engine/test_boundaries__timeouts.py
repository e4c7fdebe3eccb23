"""`errorBoundary.onTimeout` (seed 001 "Error Boundary"): which failures are timeouts; at a level
with a policy a timeout goes to it before that level's onError rules, a level without one
matches the timeout with its onError rules, and the levels keep their task > state > workflow
order; a spent Retry policy falls through to the onError rules; an onTimeout alone leaves other
failures unhandled. Then through the pipeline (in-memory store): a script task that runs past its
deadline is ignored, retried (a due job) or moved to a state by its policy."""

from __future__ import annotations

from typing import Any

import pytest

from instances.engine.boundaries import (
    BoundaryAction,
    ErrorRule,
    RetryPolicy,
    TaskError,
    boundary_levels,
    error_type_of,
)
from instances.engine.definition import ON_TIMEOUT_MOVE_KEY
from instances.engine.errors import TIMEOUT_CODES, Codes, all_codes, is_timeout
from instances.engine.outcomes import PipelineFault
from instances.status import InstanceStatus, TransitionStatus
from tests.engine.builders import Harness, script, script_task, state, transition, workflow

HTTP_TIMEOUT = TaskError("Task:Http:Timeout", None, "TimeoutException")
SCRIPT_TIMEOUT = TaskError("Script:Timeout", None, "TimeoutException")
HTTP_503 = TaskError("Task:Http:503", 503, "HttpRequestException")
RETRY = {"action": 1, "defaultRetryPolicy": {"maxRetries": 2, "initialDelay": "PT5S"}}


def boundary(*rules: dict[str, Any], on_timeout: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"onError": list(rules), "onTimeout": on_timeout}


def decide(
    error: TaskError,
    task: Any = None,
    state: Any = None,
    workflow: Any = None,
    *,
    without_retry: bool = False,
) -> tuple[str, str, str] | None:
    """(action, level, onTimeout/onError) of the deciding rule, or None."""
    levels = boundary_levels({"errorBoundary": task}, state, workflow)
    decision = levels.decide(error, without_retry=without_retry)
    if decision is None:
        return None
    return decision.action.title, str(decision.level), decision.rule.source


def test_the_timeout_codes_are_the_http_binding_script_and_fan_out_timeouts():
    assert sorted(TIMEOUT_CODES) == [
        "FanOut:BatchTimeout",
        "FanOut:ItemTimeout",
        "Script:Timeout",
        "Task:Binding:Timeout",
        "Task:Http:Timeout",
    ]
    assert {code.code for code in all_codes() if "Timeout" in code.code} == TIMEOUT_CODES
    assert not is_timeout("Task:Http:503")
    assert not is_timeout("Task:Http:Transport")
    assert not is_timeout(Codes.FAN_OUT_JOIN_FAILED.code)


@pytest.mark.parametrize("code", sorted(TIMEOUT_CODES))
def test_every_timeout_is_a_timeout_exception_for_error_types(code):
    assert error_type_of(code) == "TimeoutException"


def test_at_a_level_with_a_policy_a_timeout_goes_to_it_before_its_on_error_rules():
    task = boundary(
        {"action": 0, "errorCodes": ["Task:Http:Timeout"], "priority": 1},
        on_timeout={"action": 3},
    )
    assert decide(HTTP_TIMEOUT, task) == ("Ignore", "Task", "onTimeout")
    assert decide(SCRIPT_TIMEOUT, task) == ("Ignore", "Task", "onTimeout")


def test_a_policy_is_not_offered_other_failures():
    task = boundary({"action": 5}, on_timeout={"action": 3})
    assert decide(HTTP_503, task) == ("Log", "Task", "onError")
    assert decide(HTTP_503, boundary(on_timeout={"action": 3})) is None


def test_a_level_without_a_policy_matches_the_timeout_with_its_on_error_rules_first():
    task = boundary({"action": 0, "errorTypes": ["TimeoutException"]})
    state = boundary(on_timeout={"action": 3})
    assert decide(HTTP_TIMEOUT, task, state) == ("Abort", "Task", "onError")
    # A task-level rule that does not match leaves the timeout to the state's policy.
    task = boundary({"action": 0, "errorCodes": ["Task:Http:503"]})
    assert decide(HTTP_TIMEOUT, task, state) == ("Ignore", "State", "onTimeout")


def test_levels_keep_their_order_task_state_workflow():
    workflow = boundary(on_timeout={"action": 2, "transition": "back"})
    state = boundary(on_timeout={"action": 4, "transition": "tell"})
    assert decide(HTTP_TIMEOUT, None, state, workflow) == ("Notify", "State", "onTimeout")
    assert decide(HTTP_TIMEOUT, None, None, workflow) == ("Rollback", "Global", "onTimeout")
    task = boundary(on_timeout={"action": 5})
    assert decide(HTTP_TIMEOUT, task, state, workflow) == ("Log", "Task", "onTimeout")


def test_a_spent_retry_policy_falls_to_the_levels_on_error_rules_then_the_next_levels():
    task = boundary({"action": 1, "retryPolicy": {"initialDelay": "PT1S"}}, on_timeout=RETRY)
    state = boundary({"action": 2, "transition": "back"})
    assert decide(HTTP_TIMEOUT, task, state) == ("Retry", "Task", "onTimeout")
    # Spent: Retry rules are left out, onError's included; the state's Rollback decides.
    assert decide(HTTP_TIMEOUT, task, state, without_retry=True) == ("Rollback", "State", "onError")
    task = boundary({"action": 3, "errorCodes": ["Task:Http:*"]}, on_timeout=RETRY)
    assert decide(HTTP_TIMEOUT, task, state, without_retry=True) == ("Ignore", "Task", "onError")
    assert decide(HTTP_TIMEOUT, boundary(on_timeout=RETRY), without_retry=True) is None


def test_the_policy_reads_action_default_retry_policy_and_transition():
    policy = ErrorRule.parse_timeout_policy(RETRY)
    assert policy is not None
    assert (policy.action, policy.on_timeout, policy.transition) == (
        BoundaryAction.RETRY,
        True,
        "",
    )
    assert policy.retry_policy == RetryPolicy.parse({"maxRetries": 2, "initialDelay": "PT5S"})
    rollback = ErrorRule.parse_timeout_policy({"action": 2, "transition": "failed"})
    assert rollback is not None
    assert (rollback.action, rollback.retry_policy, rollback.transition) == (
        BoundaryAction.ROLLBACK,
        None,
        "failed",
    )
    for nothing in (None, {}, {"action": 9}, "abort"):
        assert ErrorRule.parse_timeout_policy(nothing) is None


def test_an_on_timeout_alone_defines_a_boundary_for_timeouts_only():
    levels = boundary_levels({}, boundary(on_timeout={"action": 3}), None)
    assert not levels.defined
    assert levels.defined_for(HTTP_TIMEOUT)
    assert not levels.defined_for(HTTP_503)
    assert boundary_levels({}, boundary({"action": 3}), None).defined_for(HTTP_503)


# --- through the pipeline -----------------------------------------------------------------------

STUCK = "def input_handler(task, context):\n    while True:\n        pass\n"
FAILING = "def input_handler(task, context):\n    raise ValueError('no')\n"


def stuck_ref(on_timeout: dict[str, Any], source: str = STUCK) -> dict[str, Any]:
    return {
        "order": 1,
        "task": {"key": "script-task", "domain": "core", "version": "1.0.0", "flow": "sys-tasks"},
        "mapping": script(source),
        "errorBoundary": {"onTimeout": on_timeout},
    }


def harness(on_timeout: dict[str, Any], source: str = STUCK) -> Harness:
    document = workflow(
        [
            state(
                "idle",
                1,
                [transition("go", "done", onExecutionTasks=[stuck_ref(on_timeout, source)])],
            ),
            state("done", 2),
            state("failed", 2),
        ]
    )
    return Harness(document, script_task(), timeout=0.3)


def test_an_ignore_policy_lets_the_transition_finish_past_a_script_timeout():
    h = harness({"action": 3})
    instance_id = h.start().instance.id

    h.fire(instance_id, "go")

    instance = h.load(instance_id)
    assert (instance.current_state, instance.status) == ("done", InstanceStatus.ACTIVE)
    (row,) = [t for t in h.store.tasks if t.task_key == "script-task"]
    assert (row.status, row.error_code) == ("failed", "Script:Timeout")


def test_a_retry_policy_leaves_a_due_retry_job_with_the_policy_delay():
    h = harness(RETRY)
    instance_id = h.start().instance.id

    execution = h.fire(instance_id, "go")

    assert execution.awaiting_retry is not None
    (job,) = [j for j in h.store.jobs if "boundaryRetry" in j["payload"]]
    assert job["payload"]["boundaryRetry"]["retry"] == 1
    delay = (job["run_at"] - execution.engine.clock()).total_seconds()
    assert 4 < delay <= 5 * 1.5  # PT5S, exponential, with jitter up to half of it
    assert h.load(instance_id).status == InstanceStatus.BUSY


def test_a_rollback_policy_naming_a_state_moves_the_instance_there():
    h = harness({"action": 2, "transition": "failed"})
    instance_id = h.start().instance.id

    h.fire(instance_id, "go")

    instance = h.load(instance_id)
    assert (instance.current_state, instance.status) == ("failed", InstanceStatus.ACTIVE)
    rows = sorted(h.store.transitions.values(), key=lambda row: row.started_at)
    assert [(row.transition_key, row.status, row.to_state) for row in rows[1:]] == [
        ("go", TransitionStatus.DIVERTED, "idle"),
        (ON_TIMEOUT_MOVE_KEY, TransitionStatus.COMPLETED, "failed"),
    ]
    (incident,) = h.store.incidents
    assert (incident.error_code, incident.boundary_action, incident.resolution) == (
        "Script:Timeout",
        "Rollback",
        "rollback to failed",
    )


def test_a_task_failing_otherwise_is_not_handled_by_an_on_timeout_policy():
    h = harness({"action": 3}, source=FAILING)
    instance_id = h.start().instance.id

    with pytest.raises(PipelineFault) as fault:
        h.fire(instance_id, "go")

    assert fault.value.code == "Task:Script:script-task:500"
    assert h.load(instance_id).status == InstanceStatus.FAULTED
