"""When a timer fires: a scheduled transition's or the workflow timeout's timer script result as
a due time, and the workflow timeout armed at the start or re-armed when its `timer.reset` says so
(seed 001)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.utils.dateparse import parse_datetime, parse_duration

from instances.engine.definition import StateDef, TransitionDef, TransitionKind
from instances.engine.errors import Codes, VNextError
from instances.engine.script_runner import response_data
from instances.engine.scripts import ScriptError
from instances.engine.step_support import hop_context
from instances.engine.timeouts import TimerReset, timeout_reset

if TYPE_CHECKING:
    from instances.engine.execution import Execution, Hop

logger = logging.getLogger("vnext.pipeline")


def rearm_workflow_timeout(execution: Execution, hop: Hop, entered: StateDef) -> None:
    """A workflow timeout whose `timer.reset` is `transition` (or `state-change`, when the hop
    enters another state) gets a new deadline, its full duration from now: the pending timeout
    job is moved in the transaction that commits the state change (`reschedule_timeout`). The
    start arms it, the timeout's own hop spends it, and a final state cancels it instead."""
    kind = hop.transition.kind
    if kind in (TransitionKind.START, TransitionKind.TIMEOUT) or entered.is_final:
        return
    timeout = execution.definition.timeout_for(execution.instance.extra)
    if timeout is None:
        return
    reset = timeout_reset(timeout.raw)
    if reset is TimerReset.NEVER:
        return
    if reset is TimerReset.STATE_CHANGE and hop.source_state == entered.key:
        return
    due = workflow_timeout_due(execution, hop, timeout)
    if due is not None:
        execution.writes.reschedule_timeout = due


def workflow_timeout_due(execution: Execution, hop: Hop, timeout: TransitionDef) -> datetime | None:
    """When the workflow timeout armed now is due: its mapping's answer, else (no mapping, or
    the mapping failed) its static `timer.duration` from now; None when it has neither."""
    now = execution.engine.clock()
    static = (timeout.raw.get("timer") or {}).get("duration")
    mapping = timeout.raw.get("mapping")
    if isinstance(mapping, dict) and mapping.get("code"):
        try:
            return timer_due(
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
    return timer_due(str(static), now)


def timer_due(value: Any, now: datetime) -> datetime:
    """When a timer script's result fires: a timedelta or ISO 8601 duration from now, an aware
    datetime (or ISO 8601 text of one), or None / zero for immediately."""
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
        "duration such as 'PT5M', or None",
    )
