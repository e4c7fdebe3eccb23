"""Error boundaries (seed 001 "Error Boundary"): which rule handles a failed task, and how.

A task failure is matched against the rules of three levels, most specific level first: the task
reference's own `errorBoundary`, then the state's, then the workflow's. The first level with a
matching rule decides (level dominance comes before priority); within a level the rule with the
lowest `priority` wins, then the more specific one (an exact code before a status, a status
before a pattern, any of those before a wildcard), then definition order. A wildcard rule left
at the default priority counts as 999, so a specific rule at the default priority beats it.

A timeout (`errors.is_timeout`: `Task:Http:Timeout`, `Script:Timeout`, `FanOut:ItemTimeout`,
`FanOut:BatchTimeout`) is first offered to a level's `onTimeout` policy: at a level that has one,
it decides (before that level's `onError` rules); a level without one matches the timeout with
its `onError` rules as any other failure, then the next level does the same. An `onTimeout`
policy is one rule with the same actions, its retry policy named `defaultRetryPolicy`; once its
retries are spent the failure goes on to that level's `onError` rules (without Retry), then to
the next levels, as an exhausted `onError` retry does.

When no level defines a rule at all (nor an `onTimeout` policy, for a timeout), nothing handles
the failure: a task that got an answer (an HTTP call that answered 500, timed out or could not
connect) hands it to its output handler and the pipeline goes on, as the vNext runtime does;
any other failure faults the instance. When some level defines rules but none matches, the
instance faults.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from enum import IntEnum, StrEnum
from fnmatch import fnmatchcase
from typing import Any

from django.utils.dateparse import parse_duration

from instances.engine.errors import is_timeout

DEFAULT_PRIORITY = 100
WILDCARD_PRIORITY = 999


class BoundaryAction(IntEnum):
    """`errorAction`: what a matching rule does."""

    ABORT = 0
    RETRY = 1
    ROLLBACK = 2
    IGNORE = 3
    NOTIFY = 4
    LOG = 5

    @property
    def title(self) -> str:
        """The name incidents and logs show (`Abort`, `Retry`, ...)."""
        return self.name.capitalize()


class BoundaryLevel(StrEnum):
    """Where the matching rule was defined."""

    TASK = "Task"
    STATE = "State"
    GLOBAL = "Global"


@dataclass(frozen=True)
class TaskError:
    """What a boundary matches a failed task on: its public code (`Task:Http:503`), the status
    it carries (503, or None when there was no answer) and its error type
    (`HttpRequestException`, ...)."""

    code: str
    status: int | None
    error_type: str


@dataclass(frozen=True)
class RetryPolicy:
    """`retryPolicy`: how many times to retry and how long to wait before each retry."""

    max_retries: int = 3
    initial_delay: timedelta = timedelta(seconds=1)
    exponential: bool = True
    multiplier: float = 2.0
    max_delay: timedelta | None = None
    jitter: bool = True

    @staticmethod
    def parse(raw: Any) -> RetryPolicy:
        """The policy of a rule's `retryPolicy` object (schema defaults for what is missing)."""
        raw = raw if isinstance(raw, dict) else {}
        max_delay = iso_duration(raw.get("maxDelay"))
        return RetryPolicy(
            max_retries=max(int(raw.get("maxRetries", 3) or 0), 0),
            initial_delay=iso_duration(raw.get("initialDelay")) or timedelta(seconds=1),
            exponential=_backoff_exponential(raw.get("backoffType", 1)),
            multiplier=max(float(raw.get("backoffMultiplier", 2.0) or 2.0), 1.0),
            max_delay=max_delay,
            jitter=bool(raw.get("useJitter", True)),
        )

    def allows(self, retry: int) -> bool:
        """Whether retry number `retry` (1 is the first) may run: at most `maxRetries` do."""
        return retry <= self.max_retries

    def delay(self, retry: int, rng: random.Random | None = None) -> timedelta:
        """The wait before retry number `retry` (1 is the first): the initial delay, multiplied
        by `multiplier` per earlier retry when exponential, plus up to half of it as jitter,
        never more than `maxDelay`."""
        base = self.initial_delay
        if self.exponential and retry > 1:
            factor = min(self.multiplier ** (retry - 1), 1e6)
            base = timedelta(seconds=base.total_seconds() * factor)
        if self.jitter:
            base += timedelta(seconds=(rng or random).uniform(0, base.total_seconds() / 2))
        if self.max_delay is not None and base > self.max_delay:
            return self.max_delay
        return base


def parse_action(value: Any) -> BoundaryAction | None:
    """An `action` as a number (`3`) or, as a fan-out item boundary may write it, by name
    (`"ignore"`, any case); None when it is neither."""
    if isinstance(value, str) and not value.strip().isdigit():
        return BoundaryAction.__members__.get(value.strip().upper())
    try:
        return BoundaryAction(int(value))
    except (TypeError, ValueError):
        return None


def _backoff_exponential(value: Any) -> bool:
    # `backoffType` 0/1, or by name ("fixed", "exponential") as fan-out item boundaries write it.
    if isinstance(value, str) and not value.strip().isdigit():
        return value.strip().lower() != "fixed"
    try:
        return int(value) != 0
    except (TypeError, ValueError):
        return True


def iso_duration(value: Any) -> timedelta | None:
    """An ISO 8601 duration (`PT0.2S`) as a timedelta; None when `value` is not one."""
    if not isinstance(value, str):
        return None
    try:
        return parse_duration(value)
    except (OverflowError, ValueError):
        return None


@dataclass(frozen=True)
class ErrorRule:
    """One `onError` rule."""

    action: BoundaryAction
    error_types: tuple[str, ...]
    error_codes: tuple[str, ...]
    transition: str
    priority: int
    retry_policy: RetryPolicy | None
    log_only: bool
    index: int
    # An `onTimeout` policy rather than an `onError` rule (it matches timeouts only).
    on_timeout: bool = False

    @staticmethod
    def parse(raw: dict[str, Any], index: int) -> ErrorRule | None:
        """The rule of an `onError` item; None for an item with no valid action (publish-time
        validation refuses those)."""
        action = parse_action(raw.get("action"))
        if action is None:
            return None
        types = tuple(str(t) for t in raw.get("errorTypes") or [] if str(t).strip())
        codes = tuple(str(c) for c in raw.get("errorCodes") or [] if str(c).strip())
        wildcard = all(c == "*" for c in codes) and all(t == "*" for t in types)
        explicit = raw.get("priority")
        if isinstance(explicit, int) and not isinstance(explicit, bool):
            priority = explicit
        else:
            priority = WILDCARD_PRIORITY if wildcard else DEFAULT_PRIORITY
        return ErrorRule(
            action=action,
            error_types=types,
            error_codes=codes,
            transition=str(raw.get("transition") or ""),
            priority=priority,
            retry_policy=RetryPolicy.parse(raw.get("retryPolicy"))
            if action is BoundaryAction.RETRY
            else None,
            log_only=bool(raw.get("logOnly")),
            index=index,
        )

    @staticmethod
    def parse_timeout_policy(raw: Any) -> ErrorRule | None:
        """The rule of an `onTimeout` policy (`action`, `defaultRetryPolicy`, `transition`);
        None for null or a policy with no valid action (publish-time validation refuses it)."""
        if not isinstance(raw, dict):
            return None
        action = parse_action(raw.get("action"))
        if action is None:
            return None
        return ErrorRule(
            action=action,
            error_types=(),
            error_codes=(),
            transition=str(raw.get("transition") or ""),
            priority=0,
            retry_policy=RetryPolicy.parse(raw.get("defaultRetryPolicy"))
            if action is BoundaryAction.RETRY
            else None,
            log_only=False,
            index=0,
            on_timeout=True,
        )

    @property
    def source(self) -> str:
        """Where the rule is written: `onTimeout` or `onError`."""
        return "onTimeout" if self.on_timeout else "onError"

    @property
    def effective_action(self) -> BoundaryAction:
        """`logOnly` turns any rule into Log: it writes the log and leaves the flow alone."""
        return BoundaryAction.LOG if self.log_only else self.action

    def specificity(self, error: TaskError) -> int | None:
        """How specifically this rule matches `error` (higher is more specific), or None when
        it does not match. Codes and types must both match when both are given."""
        codes = _code_match(self.error_codes, error)
        types = _type_match(self.error_types, error.error_type)
        if codes is None or types is None:
            return None
        return codes + types


def _code_match(patterns: Sequence[str], error: TaskError) -> int | None:
    if not patterns:
        return 0
    best: int | None = None
    status = str(error.status) if error.status is not None else None
    for pattern in patterns:
        if pattern == "*":
            score = 0
        elif pattern == error.code:
            score = 3
        elif status is not None and pattern in (status, f"Task:{status}"):
            score = 2
        elif any(c in pattern for c in "*?[") and fnmatchcase(error.code, pattern):
            score = 1
        else:
            continue
        best = score if best is None else max(best, score)
    return best


def _type_match(patterns: Sequence[str], error_type: str) -> int | None:
    if not patterns:
        return 0
    wanted = error_type.lower()
    short = wanted.removesuffix("exception")
    for pattern in patterns:
        if pattern == "*":
            return 0
        if pattern.lower() in (wanted, short):
            return 3
    return None


def parse_boundary(raw: Any) -> tuple[ErrorRule, ...]:
    """The rules of an `errorBoundary` object (none for null, `{}` or `{"onError": []}`)."""
    if not isinstance(raw, dict):
        return ()
    items = raw.get("onError") or []
    if not isinstance(items, list):
        return ()
    rules = (ErrorRule.parse(item, i) for i, item in enumerate(items) if isinstance(item, dict))
    return tuple(rule for rule in rules if rule is not None)


@dataclass(frozen=True)
class BoundaryLevels:
    """The rules that apply to one task, level by level (task, state, workflow), and the
    levels' `onTimeout` policies."""

    levels: tuple[tuple[BoundaryLevel, tuple[ErrorRule, ...]], ...] = field(default=())
    timeouts: tuple[tuple[BoundaryLevel, ErrorRule], ...] = field(default=())

    @property
    def defined(self) -> bool:
        """True when any level defines an `onError` rule: an unmatched failure then faults."""
        return any(rules for _, rules in self.levels)

    def defined_for(self, error: TaskError) -> bool:
        """True when some level has something for `error`: an `onError` rule, or an
        `onTimeout` policy when it is a timeout (an `onTimeout` alone leaves other failures
        unhandled, as if no boundary were defined)."""
        return self.defined or (bool(self.timeouts) and is_timeout(error.code))

    def decide(self, error: TaskError, *, without_retry: bool = False) -> Decision | None:
        """The rule that handles `error`: the first level with a match decides; a timeout goes
        to the level's `onTimeout` policy first, else its `onError` rules by priority, then
        specificity, then order. `without_retry` leaves Retry rules and policies out
        (exhausted)."""
        policies = dict(self.timeouts) if is_timeout(error.code) else {}
        for level, rules in self.levels:
            policy = policies.get(level)
            if policy is not None and not (
                without_retry and policy.effective_action is BoundaryAction.RETRY
            ):
                return Decision(policy, level)
            ranked = [
                (rule.priority, -score, rule.index, rule)
                for rule in rules
                if not (without_retry and rule.effective_action is BoundaryAction.RETRY)
                if (score := rule.specificity(error)) is not None
            ]
            if ranked:
                return Decision(min(ranked, key=lambda r: r[:3])[3], level)
        return None


@dataclass(frozen=True)
class Decision:
    """The rule that handles a failure and the level it came from."""

    rule: ErrorRule
    level: BoundaryLevel

    @property
    def action(self) -> BoundaryAction:
        """What happens (Log for a `logOnly` rule)."""
        return self.rule.effective_action


def boundary_levels(
    task_reference: dict[str, Any], state_boundary: Any, workflow_boundary: Any
) -> BoundaryLevels:
    """The levels that apply to a task reference run in a state of a workflow."""
    candidates: Iterable[tuple[BoundaryLevel, Any]] = (
        (BoundaryLevel.TASK, task_reference.get("errorBoundary")),
        (BoundaryLevel.STATE, state_boundary),
        (BoundaryLevel.GLOBAL, workflow_boundary),
    )
    candidates = tuple(candidates)
    timeouts = tuple(
        (level, policy)
        for level, raw in candidates
        if isinstance(raw, dict)
        if (policy := ErrorRule.parse_timeout_policy(raw.get("onTimeout"))) is not None
    )
    return BoundaryLevels(
        tuple((level, parse_boundary(raw)) for level, raw in candidates), timeouts
    )


# The error type of each failure, for `errorTypes` (matched case-insensitively, with or without
# the `Exception` suffix). Timeouts (`is_timeout`) are `TimeoutException`; codes not listed are
# `TaskException`.
_ERROR_TYPES: tuple[tuple[str, str], ...] = (
    ("Task:Http:*", "HttpRequestException"),
    ("Task:Script:*", "ScriptException"),
    ("Task:Soap:*", "SoapException"),
    ("Task:Binding:*", "DaprException"),
    ("Task:Python:*", "ScriptException"),
    ("Script:ResourceLimit", "ScriptResourceException"),
    ("Script:Unavailable", "ScriptResourceException"),
    ("Script:*", "ScriptException"),
    ("Task:400007", "MappingException"),
    ("Task:400008", "MappingException"),
    ("Task:NotFound", "TaskNotFoundException"),
    ("Task:Unsupported", "NotSupportedException"),
    # Dapr building blocks in vNext: their failures are the Dapr SDK's `DaprException`.
    ("Task:PubSub:*", "DaprException"),
    ("Task:StateStore:*", "DaprException"),
    ("Task:CacheAside:*", "DaprException"),
)


def error_type_of(code: str) -> str:
    """The `errorTypes` name of a failure code (`Task:Http:503` -> `HttpRequestException`)."""
    if is_timeout(code):
        return "TimeoutException"
    return next(
        (name for pattern, name in _ERROR_TYPES if fnmatchcase(code, pattern)), "TaskException"
    )
