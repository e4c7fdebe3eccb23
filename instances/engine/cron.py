"""Cron timers: the next occurrence of a timer script's cron schedule (`TimerSchedule.from_cron`,
vNext's `TimerSchedule.FromCronExpression`), in the schedule's IANA time zone.

Expressions have the five standard fields (minute hour day-of-month month day-of-week) or one of
the `@hourly`/`@daily`/`@weekly`/`@monthly`/`@yearly` nicknames; croniter computes the
occurrences. Six- and seven-field forms are refused: croniter reads a sixth field as seconds at
the end, Quartz and Dapr as seconds at the front, and a timer that fires at the wrong second is
worse than a clear refusal.

Daylight saving time, in the schedule's zone:
- a wall-clock time that the spring-forward gap skips fires once, at the end of the gap;
- in the repeated hour of a fall-back night, an expression with a fixed hour fires once (the
  first pass: a daily `30 2 * * *` does not fire twice), while an hourly or finer one
  (`*` or `*/n` in the hour field) keeps firing through both passes, as elapsed time goes on.
  This is what Vixie cron does for fixed-time and wildcard jobs.
"""

from __future__ import annotations

import ast
import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, CroniterError, croniter

from instances.engine.scripts import CronSchedule

_NICKNAMES = frozenset(
    {"@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually"}
)
MAX_EXPRESSION_LENGTH = 256
# croniter's random value (`R`, `R(1-5)`): an R that is not part of a name such as MAR or FRI.
_RANDOM = re.compile(r"(?<![A-Za-z])[Rr](?![A-Za-z])")

# More than the occurrences a fall-back night can repeat for a schedule that fires every minute.
_MAX_REPEATS_SKIPPED = 61


class CronError(ValueError):
    """A cron schedule that cannot be armed: a malformed expression, an unknown time zone, or
    an expression that never occurs (`0 0 30 2 *`)."""


def cron_checked(schedule: CronSchedule) -> tuple[str, ZoneInfo]:
    """The schedule's expression (trimmed) and zone, or `CronError` saying what is wrong."""
    expression = schedule.expression
    if not isinstance(expression, str) or not expression.strip():
        raise CronError("a cron timer needs an expression such as '0 9 * * 1-5'")
    if len(expression) > MAX_EXPRESSION_LENGTH:
        # croniter parses in time linear in the text, in the server: a script's long answer
        # must not stall it.
        raise CronError(
            f"a cron expression is at most {MAX_EXPRESSION_LENGTH} characters "
            f"(this one has {len(expression)})"
        )
    expression = " ".join(expression.split())
    if _RANDOM.search(expression):
        # croniter's `R` picks a random value at each parse: publish and every re-arm would
        # compute another schedule.
        raise CronError(f"cron expression {expression!r}: random values (R) are not supported")
    if expression.startswith("@"):
        if expression.lower() not in _NICKNAMES:
            raise CronError(
                f"unknown cron nickname {expression!r}; use one of {', '.join(sorted(_NICKNAMES))}"
            )
    elif len(expression.split(" ")) != 5:
        raise CronError(
            f"cron expression {expression!r} has {len(expression.split(' '))} fields; use five "
            "(minute hour day-of-month month day-of-week), e.g. '0 9 * * 1-5'"
        )
    elif not croniter.is_valid(expression):
        try:
            croniter(expression)
        except (CroniterError, ValueError, KeyError) as exc:
            raise CronError(f"invalid cron expression {expression!r}: {exc}") from None
        raise CronError(f"invalid cron expression {expression!r}")
    return expression, _zone(schedule.time_zone)


def cron_next(schedule: CronSchedule, after: datetime) -> datetime:
    """The schedule's first occurrence strictly after `after` (an aware datetime), in UTC."""
    expression, zone = cron_checked(schedule)
    try:
        occurrences = croniter(expression, after.astimezone(zone))
        repeat_skippable = _fixed_hour(expression)
        for _ in range(_MAX_REPEATS_SKIPPED):
            local = occurrences.get_next(datetime).astimezone(zone)
            if not (repeat_skippable and _second_pass_of_repeated_hour(local)):
                return local.astimezone(UTC)
    except (CroniterBadDateError, CroniterBadCronError, OverflowError) as exc:
        raise CronError(f"cron expression {expression!r} has no next occurrence: {exc}") from None
    raise CronError(f"cron expression {expression!r} found no occurrence past a repeated hour")


def cron_describe(schedule: CronSchedule) -> str:
    """The schedule in words, for operators ("Every minute", "At 09:00 AM, Monday through
    Friday"); the expression itself when cron-descriptor cannot read it."""
    try:
        from cron_descriptor import get_description

        return str(get_description(schedule.expression))
    except Exception:  # a description is a courtesy; the expression stands
        return schedule.expression


def _zone(name: object) -> ZoneInfo:
    if not isinstance(name, str) or not name.strip():
        raise CronError("a cron timer's time zone must be an IANA name such as 'Europe/Istanbul'")
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise CronError(
            f"unknown time zone {name!r}; use an IANA name such as 'Europe/Istanbul' or 'UTC'"
        ) from None


def _fixed_hour(expression: str) -> bool:
    # A nickname fires at midnight (fixed) except @hourly; an hour field of `*`/`*/n` is not.
    if expression.startswith("@"):
        return expression.lower() != "@hourly"
    return not expression.split(" ")[1].startswith("*")


def _second_pass_of_repeated_hour(local: datetime) -> bool:
    # fold=1 is the second reading of an ambiguous wall-clock time; it is a repeat only where
    # the two readings have different offsets (the fall-back hour).
    return local.fold == 1 and local.replace(fold=0).utcoffset() != local.utcoffset()


_CRON_BUILDERS = frozenset({"from_cron", "from_cron_expression"})


def static_cron_problems(source: str) -> list[tuple[int, str]]:
    """Publish-time check of the cron schedules a script spells out: every
    `TimerSchedule.from_cron("...", "...")` whose expression (and zone, when given) are literal
    text, as (line, reason) for each that `cron_checked` refuses. A computed expression is
    checked when the script runs."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # the compiler reports it
    problems = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _CRON_BUILDERS
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "TimerSchedule"
        ):
            continue
        arguments = [*node.args, *(keyword.value for keyword in node.keywords)]
        if not arguments or not all(
            isinstance(argument, ast.Constant) and isinstance(argument.value, str)
            for argument in arguments[:2]
        ):
            continue
        literal = [argument.value for argument in arguments[:2]]  # type: ignore[attr-defined]
        try:
            cron_checked(CronSchedule(*literal))
        except CronError as exc:
            problems.append((node.lineno, str(exc)))
    return problems
