"""`timer.reset` of a workflow timeout (seed 001, the timeout structure): whether the deadline is an
absolute budget from the instance's start or is re-armed as the instance moves on.

The schema types `reset` as a free string ("Timer reset strategy"). The vNext runtime reads it
nowhere: its workflow timeout is armed once, when the instance starts (for a SubFlow child, with
the parent's `subFlow.overrides.timeout`, when the parent's SubFlow state starts it), and never
re-armed. The documents' values all name that deadline: `None` (seed 001), `workflow-start`
(the vNext docs' flow.md), `OnEntry` (the vNext runtime's OTP sub-flow sample: a five-minute OTP
expiry counted from entering the sub-flow, which a retry must not extend), `N`, `never` and
`false` (vnext-example). This runtime adds two strategies that re-arm the deadline, spelled in
the docs' kebab-case: `transition` (after every transition the instance completes) and
`state-change` (when it enters another state). Values are matched case-insensitively and without
`-`, `_` or spaces (`StateChange`, `on-entry`); anything else is refused at publish, since
vNext would run a misspelt re-arming strategy as a deadline from the start.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class TimerReset(StrEnum):
    """When a workflow timeout's deadline is re-armed (its full duration from that moment)."""

    NEVER = "never"  # an absolute deadline from the instance's start (its entry), as in vNext
    TRANSITION = "transition"  # after every transition the instance completes
    STATE_CHANGE = "state-change"  # when the instance enters another state


_SPELLINGS: dict[str, TimerReset] = {
    **dict.fromkeys(
        ("", "none", "n", "never", "false", "workflowstart", "onentry"), TimerReset.NEVER
    ),
    **dict.fromkeys(("transition", "ontransition"), TimerReset.TRANSITION),
    **dict.fromkeys(("statechange", "onstatechange"), TimerReset.STATE_CHANGE),
}

# What a publish-time violation lists as the accepted values.
ACCEPTED = (
    "None (also N, never, false, workflow-start, OnEntry: an absolute deadline from the "
    "instance's start), transition (re-armed after every transition) or state-change (re-armed "
    "when the instance enters another state)"
)

# What the vNext runtime does with a value it does not know (it reads no `timer.reset`).
VNEXT_READING = "vNext reads no timer.reset and would keep an absolute deadline from the start"


def parse_reset(value: Any) -> TimerReset | None:
    """The strategy a `timer.reset` value names; a missing or non-text value is `NEVER` (the
    schema reports it), an unknown text None."""
    if not isinstance(value, str):
        return TimerReset.NEVER
    normalized = "".join(c for c in value.strip().lower() if c not in "-_ ")
    return _SPELLINGS.get(normalized)


def timeout_reset(timeout: dict[str, Any]) -> TimerReset:
    """The reset strategy of a workflow timeout object (`NEVER` for an unknown value, which
    publish refuses)."""
    timer = timeout.get("timer")
    return parse_reset(timer.get("reset") if isinstance(timer, dict) else None) or TimerReset.NEVER
