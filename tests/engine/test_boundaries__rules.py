"""Which error-boundary rule handles a failed task (seed 001 "Error Boundary"): matching on
codes, statuses, patterns and error types; level dominance before priority; priority, then
specificity, then order within a level; the wildcard demotion; Retry left out once exhausted;
and the retry policy's delays."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest

from instances.engine.boundaries import (
    BoundaryAction,
    BoundaryLevel,
    RetryPolicy,
    TaskError,
    boundary_levels,
    error_type_of,
    parse_boundary,
)

HTTP_500 = TaskError("Task:Http:500", 500, "HttpRequestException")
HTTP_503 = TaskError("Task:Http:503", 503, "HttpRequestException")
TIMEOUT = TaskError("Task:Http:Timeout", None, "TimeoutException")


def rules(*items: dict[str, Any]) -> dict[str, Any]:
    return {"onError": list(items)}


def decide(
    error: TaskError,
    task: Any = None,
    state: Any = None,
    workflow: Any = None,
    *,
    without_retry: bool = False,
) -> tuple[str, str, int] | None:
    """(action, level, index of the rule in its list) of the deciding rule, or None."""
    levels = boundary_levels({"errorBoundary": task}, state, workflow)
    decision = levels.decide(error, without_retry=without_retry)
    if decision is None:
        return None
    return decision.action.title, str(decision.level), decision.rule.index


@pytest.mark.parametrize(
    ("codes", "error", "matches"),
    [
        (["*"], HTTP_500, True),
        ([], HTTP_500, True),
        (["500"], HTTP_500, True),
        (["Task:500"], HTTP_500, True),
        (["Task:Http:500"], HTTP_500, True),
        (["Task:Http:5*"], HTTP_503, True),
        (["503"], HTTP_500, False),
        (["Task:Http:503"], HTTP_500, False),
        (["500"], TIMEOUT, False),
        (["Task:Http:Timeout"], TIMEOUT, True),
    ],
)
def test_error_codes_match_the_code_its_status_or_a_pattern(codes, error, matches):
    assert (decide(error, rules({"action": 0, "errorCodes": codes})) is not None) is matches


@pytest.mark.parametrize(
    ("types", "matches"),
    [
        (["HttpRequestException"], True),
        (["httprequest"], True),
        (["*"], True),
        (["TimeoutException"], False),
    ],
)
def test_error_types_match_by_name_with_or_without_the_suffix(types, matches):
    assert (decide(HTTP_500, rules({"action": 0, "errorTypes": types})) is not None) is matches


def test_codes_and_types_must_both_match():
    both = rules({"action": 0, "errorCodes": ["500"], "errorTypes": ["TimeoutException"]})
    assert decide(HTTP_500, both) is None


def test_the_task_level_decides_before_a_higher_priority_state_rule():
    task = rules({"action": 0, "priority": 999})
    state = rules({"action": 2, "errorCodes": ["500"], "transition": "back", "priority": 1})
    assert decide(HTTP_500, task, state) == ("Abort", "Task", 0)


def test_a_level_without_a_match_defers_to_the_next():
    task = rules({"action": 0, "errorCodes": ["503"]})
    state = rules({"action": 4, "errorCodes": ["500"], "transition": "tell"})
    workflow = rules({"action": 2, "transition": "back"})
    assert decide(HTTP_500, task, state, workflow) == ("Notify", "State", 0)
    assert decide(HTTP_503, None, None, workflow) == ("Rollback", "Global", 0)


def test_lower_priority_number_wins_within_a_level():
    task = rules(
        {"action": 2, "errorCodes": ["500"], "transition": "back", "priority": 200},
        {"action": 4, "errorCodes": ["500"], "transition": "tell", "priority": 50},
    )
    assert decide(HTTP_500, task) == ("Notify", "Task", 1)


def test_a_default_priority_wildcard_counts_as_999_so_a_specific_rule_wins():
    task = rules({"action": 0}, {"action": 2, "errorCodes": ["500"], "transition": "back"})
    assert decide(HTTP_500, task) == ("Rollback", "Task", 1)
    # A wildcard given an explicit priority keeps it.
    task = rules(
        {"action": 0, "priority": 10}, {"action": 2, "errorCodes": ["500"], "transition": "b"}
    )
    assert decide(HTTP_500, task) == ("Abort", "Task", 0)


def test_at_equal_priority_the_more_specific_rule_wins_then_the_first():
    task = rules(
        {"action": 3, "errorCodes": ["Task:Http:5*"], "priority": 5},
        {"action": 5, "errorCodes": ["500"], "priority": 5},
        {"action": 0, "errorCodes": ["Task:Http:500"], "priority": 5},
    )
    assert decide(HTTP_500, task) == ("Abort", "Task", 2)
    task = rules({"action": 3, "priority": 5}, {"action": 5, "priority": 5})
    assert decide(HTTP_500, task) == ("Ignore", "Task", 0)


def test_exhausted_retries_fall_through_to_the_next_rule_on_any_level():
    retry = {"action": 1, "errorCodes": ["500"], "retryPolicy": {"initialDelay": "PT1S"}}
    task = rules(retry)
    workflow = rules({"action": 2, "transition": "back"})
    assert decide(HTTP_500, task, None, workflow) == ("Retry", "Task", 0)
    assert decide(HTTP_500, task, None, workflow, without_retry=True) == ("Rollback", "Global", 0)
    assert decide(HTTP_500, task, without_retry=True) is None


def test_log_only_turns_a_rule_into_log():
    assert decide(HTTP_500, rules({"action": 0, "logOnly": True})) == ("Log", "Task", 0)


def test_no_rules_is_no_boundary():
    empties: list[Any] = [None, {}, {"onError": []}, {"onError": "junk"}]
    for empty in empties:
        levels = boundary_levels({"errorBoundary": empty}, empty, empty)
        assert not levels.defined
    assert boundary_levels({}, None, rules({"action": 5})).defined


def test_a_rule_without_a_valid_action_is_left_out():
    assert [r.action for r in parse_boundary(rules({"action": 9}, {"action": "x"}, {}))] == []
    assert [r.action for r in parse_boundary(rules({"action": 3}))] == [BoundaryAction.IGNORE]


@pytest.mark.parametrize(
    ("code", "error_type"),
    [
        ("Task:Http:503", "HttpRequestException"),
        ("Task:Http:Transport", "HttpRequestException"),
        ("Task:Http:Timeout", "TimeoutException"),
        ("Script:Timeout", "TimeoutException"),
        ("Task:Script:fail-task:500", "ScriptException"),
        ("Task:400008", "MappingException"),
        ("Script:ResourceLimit", "ScriptResourceException"),
        ("Task:NotFound", "TaskNotFoundException"),
        ("Something:Else", "TaskException"),
    ],
)
def test_every_failure_code_has_an_error_type(code, error_type):
    assert error_type_of(code) == error_type


# --- retry policy --------------------------------------------------------------------------------


def seconds(policy: RetryPolicy, retries: int, rng: random.Random | None = None) -> list[float]:
    return [policy.delay(n, rng).total_seconds() for n in range(1, retries + 1)]


def test_fixed_backoff_waits_the_initial_delay_every_time():
    policy = RetryPolicy.parse(
        {"maxRetries": 2, "initialDelay": "PT0.2S", "backoffType": 0, "useJitter": False}
    )
    assert (policy.max_retries, seconds(policy, 3)) == (2, [0.2, 0.2, 0.2])


def test_exponential_backoff_multiplies_and_is_capped_by_max_delay():
    policy = RetryPolicy.parse(
        {
            "initialDelay": "PT1S",
            "backoffType": 1,
            "backoffMultiplier": 3,
            "maxDelay": "PT20S",
            "useJitter": False,
        }
    )
    assert seconds(policy, 5) == [1, 3, 9, 20, 20]


def test_jitter_adds_up_to_half_the_delay_and_never_passes_max_delay():
    policy = RetryPolicy.parse({"initialDelay": "PT2S", "maxDelay": "PT5S"})
    assert (policy.max_retries, policy.exponential, policy.jitter) == (3, True, True)
    rng = random.Random(7)
    for _ in range(200):
        first, second, third = seconds(policy, 3, rng)
        assert 2 <= first <= 3
        assert 4 <= second <= 5
        assert third == 5


def test_defaults_follow_the_schema():
    policy = RetryPolicy.parse({"initialDelay": "PT5S"})
    assert policy == RetryPolicy(
        max_retries=3,
        initial_delay=timedelta(seconds=5),
        exponential=True,
        multiplier=2.0,
        max_delay=None,
        jitter=True,
    )


def test_levels_are_task_state_global():
    assert [level for level, _ in boundary_levels({}, None, None).levels] == [
        BoundaryLevel.TASK,
        BoundaryLevel.STATE,
        BoundaryLevel.GLOBAL,
    ]
