"""When a timer fires: a scheduled transition's or the workflow timeout's timer script result as
a due time, and the workflow timeout armed at the start or re-armed when its `timer.reset` says so
(seed 001).

A timer script may answer with a cron schedule (`TimerSchedule.from_cron(expr, zone)`): the job is
due at its next occurrence and carries the schedule, and the occurrence it stands for, in its
payload. After it fires, the next occurrence is armed from that payload without calling the
script: a scheduled transition's when its own hop brings the instance back to the timer's state,
the workflow timeout's when its own hop leaves the instance running. That next occurrence is the
first one after the occurrence that fired which is also after now: a worker that ran the job late
(or came back after downtime) neither drifts the schedule nor fires a burst of the occurrences it
missed (the late firing stands for them, once), and one that ran it early, by a clock a little
behind the queue's, does not fire the same occurrence twice."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.utils.dateparse import parse_datetime, parse_duration

from instances.engine.cron import CronError, cron_next
from instances.engine.definition import StateDef, TransitionDef, TransitionKind
from instances.engine.errors import Codes, VNextError
from instances.engine.records import JobRow
from instances.engine.script_runner import response_data
from instances.engine.scripts import CronSchedule, ScriptError
from instances.engine.step_support import hop_context
from instances.engine.timeouts import TimerReset, timeout_reset
from instances.job_payloads import TimerJob
from instances.status import JobKind

if TYPE_CHECKING:
    from instances.engine.execution import Execution, Hop

logger = logging.getLogger("vnext.pipeline")


@dataclass(frozen=True)
class TimerArm:
    """A timer to arm: when it is due and, for a cron timer, the schedule that due time is an
    occurrence of."""

    due: datetime
    cron: CronSchedule | None = None

    def payload(self, transition: str, state: str | None = None) -> dict[str, Any]:
        """The timer job's payload: the transition it fires (and the state it belongs to), and
        a cron timer's schedule and occurrence."""
        if self.cron is None:
            return TimerJob(transition, state=state).to_json()
        return TimerJob(
            transition,
            state=state,
            cron=self.cron.expression,
            time_zone=self.cron.time_zone,
            occurrence=self.due.isoformat(),
        ).to_json()


def scheduled_timer_job(
    execution: Execution, hop: Hop, state: StateDef, transition: TransitionDef
) -> JobRow | None:
    """The timer job of a scheduled transition of the state the hop entered: the next
    occurrence from the fired job's payload when this hop is that cron timer's own firing,
    else its timer script's answer from now. None when the transition has no timer script."""
    timer = transition.raw.get("timer")
    if not isinstance(timer, dict):
        return None
    now = execution.engine.clock()
    fired = hop.request.fired_timer
    arm = None
    if fired is not None and (fired.transition, fired.state) == (transition.key, state.key):
        arm = cron_rearmed(fired, now)
    if arm is None:
        value = execution.engine.scripts.call(
            timer, execution.definition, "handler", hop_context(execution, hop)
        )
        arm = timer_arm(value, now)
    return JobRow(
        kind=JobKind.TIMER,
        run_at=arm.due,
        state=state.key,
        payload=arm.payload(transition.key, state=state.key),
    )


def workflow_timeout_job(execution: Execution, hop: Hop, timeout: TransitionDef) -> JobRow | None:
    """The workflow timeout's job armed at the start (None: it has no mapping nor duration)."""
    arm = workflow_timeout_arm(execution, hop, timeout)
    if arm is None:
        return None
    return JobRow(kind=JobKind.TIMEOUT, run_at=arm.due, payload=arm.payload(timeout.key))


def rearm_workflow_timeout(execution: Execution, hop: Hop, entered: StateDef) -> None:
    """A workflow timeout whose `timer.reset` is `transition` (or `state-change`, when the hop
    enters another state) gets a new deadline, its full duration from now: the pending timeout
    job is moved in the transaction that commits the state change (`reschedule_timeout`). The
    start arms it, a final state cancels it, and the timeout's own hop spends it, unless it is a
    cron timeout leaving the instance running: its next occurrence is armed then."""
    kind = hop.transition.kind
    if entered.is_final:
        return
    if kind == TransitionKind.TIMEOUT:
        fired = hop.request.fired_timer
        arm = cron_rearmed(fired, execution.engine.clock()) if fired is not None else None
        if fired is not None and arm is not None:
            payload = arm.payload(fired.transition)
            execution.writes.jobs.append(
                JobRow(kind=JobKind.TIMEOUT, run_at=arm.due, payload=payload)
            )
        return
    if kind == TransitionKind.START:
        return
    timeout = execution.definition.timeout_for(execution.instance.extra)
    if timeout is None:
        return
    reset = timeout_reset(timeout.raw)
    if reset is TimerReset.NEVER:
        return
    if reset is TimerReset.STATE_CHANGE and hop.source_state == entered.key:
        return
    arm = workflow_timeout_arm(execution, hop, timeout)
    if arm is not None:
        execution.writes.reschedule_timeout = arm.due


def workflow_timeout_arm(execution: Execution, hop: Hop, timeout: TransitionDef) -> TimerArm | None:
    """The workflow timeout armed now: its mapping's answer (a duration, a moment or a cron
    schedule), else (no mapping, or the mapping failed) its static `timer.duration` from now;
    None when it has neither."""
    now = execution.engine.clock()
    static = (timeout.raw.get("timer") or {}).get("duration")
    mapping = timeout.raw.get("mapping")
    if isinstance(mapping, dict) and mapping.get("code"):
        try:
            return timer_arm(
                execution.engine.scripts.call(
                    mapping, execution.definition, "handler", hop_context(execution, hop)
                ),
                now,
            )
        except (VNextError, ScriptError) as exc:
            # The mapping is an override: on failure the static duration applies (seed 001).
            logger.warning("timeout mapping of %s failed, using %s: %s", timeout.key, static, exc)
    if not static:
        return None
    return TimerArm(timer_due(str(static), now))


def cron_rearmed(fired: TimerJob, now: datetime) -> TimerArm | None:
    """The next occurrence of the cron timer that fired (None when it was not a cron timer):
    the first after the occurrence it fired for that is also after `now`."""
    if not fired.cron:
        return None
    schedule = CronSchedule(fired.cron, fired.time_zone or "UTC")
    occurrence = parse_datetime(fired.occurrence or "")
    after = max(occurrence, now) if occurrence is not None and occurrence.tzinfo else now
    return TimerArm(_cron_due(schedule, after), schedule)


def timer_arm(value: Any, now: datetime) -> TimerArm:
    """What a timer script's answer arms: a cron schedule's next occurrence after `now`, or
    the one-shot due time of `timer_due`."""
    value = response_data(value)
    schedule = cron_schedule_of(value)
    if schedule is not None:
        return TimerArm(_cron_due(schedule, now), schedule)
    return TimerArm(timer_due(value, now))


def cron_schedule_of(value: Any) -> CronSchedule | None:
    """The cron schedule a timer answered with: a `TimerSchedule.from_cron(...)`, or its JSON
    form `{"cron": "0 9 * * 1-5", "timeZone": "Europe/Istanbul"}` (the zone defaults to UTC)."""
    if isinstance(value, CronSchedule):
        return value
    if isinstance(value, dict) and "cron" in value:
        zone = value.get("timeZone", value.get("timezone", "UTC"))
        return CronSchedule(value["cron"], zone if zone is not None else "UTC")
    return None


def _cron_due(schedule: CronSchedule, after: datetime) -> datetime:
    try:
        return cron_next(schedule, after)
    except CronError as exc:
        raise VNextError(Codes.SCRIPT_FAILED, f"a timer returned a cron schedule: {exc}") from None


def timer_due(value: Any, now: datetime) -> datetime:
    """When a one-shot timer fires: a timedelta or ISO 8601 duration from now, an aware
    datetime (or ISO 8601 text of one), or None / zero for immediately (a cron schedule is
    `timer_arm`'s: it re-arms)."""
    value = response_data(value)
    if value is None:
        return now
    if isinstance(value, timedelta):
        try:
            return now + max(value, timedelta(0))
        except OverflowError:
            raise VNextError(
                Codes.SCRIPT_FAILED, f"a timer returned {value}, past year 9999"
            ) from None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise VNextError(Codes.SCRIPT_FAILED, "a timer returned a naive datetime; use UTC")
        return value
    if isinstance(value, str):
        try:
            duration = parse_duration(value)
            due = now + duration if duration is not None else None
        except (OverflowError, ValueError):
            due = None
        if due is not None:
            return due
        moment = parse_datetime(value)
        if moment is not None and moment.tzinfo is not None:
            return moment
    raise VNextError(
        Codes.SCRIPT_FAILED,
        f"a timer returned {value!r}; expected a timedelta, an aware datetime, an ISO 8601 "
        "duration such as 'PT5M', TimerSchedule.from_cron('0 9 * * 1-5', 'Europe/Istanbul'), "
        "or None",
    )
