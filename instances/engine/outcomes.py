"""How a run ends when it does not complete: refused before anything was written (`Rejected`),
or failed after admission with the instance Faulted (`PipelineFault`); and which transitions are
admitted while the instance is Busy."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from instances.engine.definition import TransitionKind
from instances.engine.errors import VNextError

# Transition kinds admitted while the instance is Busy (they take the Busy flag over).
BUSY_EXEMPT = frozenset({TransitionKind.CANCEL, TransitionKind.EXIT, TransitionKind.TIMEOUT})


class Rejected(VNextError):
    """The request is refused before anything was written (bad state, busy, ...)."""


@dataclass(eq=False)
class PipelineFault(Exception):
    """The pipeline failed after admission; the instance is Faulted and an incident says why."""

    code: str
    message: str
    http_status: int
    instance_id: uuid.UUID

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


@dataclass(eq=False)
class PipelineSuperseded(Exception):
    """The run lost the instance while it ran: a cancel, exit or timeout (or the reaper, or a
    job's re-claim) took its Busy ownership over. Its history rows were closed `cancelled`, its
    late results dropped; what the instance is now is the other run's doing."""

    code: str
    message: str
    instance_id: uuid.UUID

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class ForwardToSubflow(Exception):
    """Step 10: the instance waits for a SubFlow child and the transition is not its own: the
    caller sends it to `child_id` instead (nothing was written)."""

    def __init__(self, child_id: uuid.UUID) -> None:
        super().__init__(f"forwarded to the active subflow {child_id}")
        self.child_id = child_id
