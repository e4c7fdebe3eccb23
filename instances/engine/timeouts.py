"""`timer.reset` of a workflow timeout (seed 001, the timeout structure): whether the deadline is an
absolute budget from the start or is re-armed as the instance moves on.

The schema types `reset` as a free string ("Timer reset strategy") and the documents only ever
write values meaning "never": `None` (seed 001), `N` and `workflow-start` (the vNext docs),
`never` and `false` (vnext-example). This runtime adds two strategies that re-arm the deadline,
spelled in the docs' kebab-case: `transition` (after every transition the instance completes)
and `state-change` (when it enters another state). Values are matched case-insensitively and
without `-`, `_` or spaces (`StateChange`, `on-state-change`); anything else is refused at publish.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class TimerReset(StrEnum):
    """When a workflow timeout's deadline is re-armed (its full duration from that moment)."""

    NEVER = "never"  # an absolute deadline from the start
    TRANSITION = "transition"  # after every transition the instance completes
    STATE_CHANGE = "state-change"  # when the instance enters another state


_SPELLINGS: dict[str, TimerReset] = {
    **dict.fromkeys(("", "none", "n", "never", "false", "workflowstart"), TimerReset.NEVER),
    **dict.fromkeys(("transition", "ontransition"), TimerReset.TRANSITION),
    **dict.fromkeys(("statechange", "onstatechange"), TimerReset.STATE_CHANGE),
}

# What a publish-time violation lists as the accepted values.
ACCEPTED = (
    "None (also N, never, false, workflow-start: an absolute deadline from the start), "
    "transition (re-armed after every transition) or state-change (re-armed when the instance "
    "enters another state)"
)


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
