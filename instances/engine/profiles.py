"""Lifecycle orders, step outcomes and pipeline profiles (seed 000: the step table, the profiles,
the "+Self" composition). The inbound trigger picks the profile, not the transition's own type."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any

from instances.status import Trigger


class Order(IntEnum):
    """`LifecycleOrder`: the position of each pipeline step. There is no 9."""

    PREFLIGHT = 5
    FORWARD_TO_ACTIVE_SUBFLOW = 10
    SET_BUSY = 19
    CREATE_TRANSITION = 20
    PARENT_UPDATE_DATA_DATA_ONLY = 21
    RESOURCE_LOCK = 25
    ON_EXECUTE = 30
    APPLY_TIMEOUT_STATE = 38
    CANCEL_SCHEDULED_JOBS = 39
    ON_EXIT = 40
    CHANGE_STATE = 50
    ON_ENTRY = 60
    SUB_FLOW = 70
    LONG_POLL_TERMINATION = 75
    CLEAR_BUSY_ON_RESUME = 79  # Auto - 1
    AUTO = 80
    SCHEDULE = 90
    FINISH = 100
    FINALIZE = 110
    RESOLVE_AVAILABLE = 112


class OutcomeKind(StrEnum):
    """How the runner goes on after a step."""

    CONTINUE = "continue"
    STOP = "stop"
    SKIP_TO = "skip_to"
    WITH = "with"


@dataclass(frozen=True)
class Outcome:
    """What a step tells the runner: continue, stop, skip to an order, or skip to Finalize."""

    kind: OutcomeKind
    order: Order | None = None
    directives: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def proceed() -> Outcome:
        """`Continue()`: run the next step."""
        return _CONTINUE

    @staticmethod
    def stop() -> Outcome:
        """`Stop()`: leave this pipeline run."""
        return Outcome(OutcomeKind.STOP)

    @staticmethod
    def skip_to(order: Order) -> Outcome:
        """`SkipTo(order)`: resume at the first step at or after `order`."""
        return Outcome(OutcomeKind.SKIP_TO, order)

    @staticmethod
    def skip_to_finalize() -> Outcome:
        """`SkipToFinalize()`: jump straight to Finalize."""
        return Outcome(OutcomeKind.SKIP_TO, Order.FINALIZE)

    @staticmethod
    def with_directives(**directives: Any) -> Outcome:
        """`With(...)`: set typed directives, then continue."""
        return Outcome(OutcomeKind.WITH, directives=directives)


_CONTINUE = Outcome(OutcomeKind.CONTINUE)


@dataclass(frozen=True)
class Profile:
    """The steps a run leaves out, and whether it may start subflows or chain automatics."""

    name: str
    excluded: frozenset[Order]
    allow_subflow: bool
    allow_auto_chain: bool = True

    def runs(self, order: Order) -> bool:
        """True when the step at `order` is part of this profile."""
        return order not in self.excluded

    def with_self(self) -> Profile:
        """`+Self` (updateData only): no state is left or entered, timers stay as they are.
        ChangeState (50) and OnExecute (30) still run."""
        return Profile(
            name=f"{self.name}+Self",
            excluded=self.excluded | SELF_EXCLUDED,
            allow_subflow=self.allow_subflow,
            allow_auto_chain=self.allow_auto_chain,
        )


SELF_EXCLUDED = frozenset(
    {Order.CANCEL_SCHEDULED_JOBS, Order.ON_EXIT, Order.ON_ENTRY, Order.SCHEDULE}
)

MANUAL = Profile("Manual", frozenset(), allow_subflow=True)
AUTO_CHAIN = Profile(
    "AutoChain",
    frozenset(
        {
            Order.PREFLIGHT,
            Order.FORWARD_TO_ACTIVE_SUBFLOW,
            Order.SET_BUSY,
            Order.APPLY_TIMEOUT_STATE,
        }
    ),
    allow_subflow=False,
)
SCHEDULED = Profile(
    "Scheduled",
    frozenset({Order.PREFLIGHT, Order.FORWARD_TO_ACTIVE_SUBFLOW}),
    allow_subflow=False,
)
EVENT = Profile(
    "Event", frozenset({Order.PREFLIGHT, Order.FORWARD_TO_ACTIVE_SUBFLOW}), allow_subflow=True
)
ERROR_BOUNDARY = Profile(
    "ErrorBoundary",
    frozenset({Order.PREFLIGHT, Order.FORWARD_TO_ACTIVE_SUBFLOW, Order.RESOURCE_LOCK}),
    allow_subflow=False,
    allow_auto_chain=True,
)

PROFILE_BY_TRIGGER = {
    Trigger.MANUAL: MANUAL,
    Trigger.AUTOMATIC: AUTO_CHAIN,
    Trigger.SCHEDULED: SCHEDULED,
    Trigger.EVENT: EVENT,
    Trigger.ERROR_BOUNDARY: ERROR_BOUNDARY,
}


def resolve_profile(trigger: Trigger, *, is_update_data: bool) -> Profile:
    """The profile of a run: chosen by the inbound trigger; updateData composes `+Self`."""
    profile = PROFILE_BY_TRIGGER[trigger]
    return profile.with_self() if is_update_data else profile
