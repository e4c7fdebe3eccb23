"""The payload of each job kind as a typed record: written with `to_json()`, read back with
`from_json()`. The JSON keys are the camelCase ones jobs have always stored (a field's name in
camelCase), so a job already in the table loads as it is; a reader ignores keys it does not know
(the request id, marks).

Plain Python: the engine, the store and the services write these, the job handlers read them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Self


def _unset(default: Any) -> Any:
    # An optional part: left out of the JSON while it holds its default, as writers always did.
    return field(default=default, metadata={"omitted_unset": True})


def _json_key(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


@dataclass(frozen=True)
class JobPayload:
    """A job payload record: its fields are the JSON's keys, in camelCase."""

    def to_json(self) -> dict[str, Any]:
        """The job row's payload; an optional part only when it is set."""
        built: dict[str, Any] = {}
        for each in fields(self):
            value = getattr(self, each.name)
            if each.metadata.get("omitted_unset") and value == each.default:
                continue
            built[_json_key(each.name)] = (
                value.to_json() if isinstance(value, JobPayload) else value
            )
        return built

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> Self:
        """The record of a stored payload (opened, when its request was sealed); a missing
        optional part takes its default."""
        return cls(
            **{
                each.name: payload[_json_key(each.name)]
                for each in fields(cls)
                if _json_key(each.name) in payload
            }
        )


# --- the `transition` kind: an accepted request, an operator's retry, an error-boundary retry -----


@dataclass(frozen=True)
class TransitionJob(JobPayload):
    """An accepted start or transition (also the `update-data` write-lane ticket): what the
    client sent (`attributes`, `body`, credential-free `headers`, `query`) and how the job
    takes the instance over. A synchronous run builds its request from the same record."""

    transition: str
    # The workflow's start transition (the instance was inserted reserved for this job).
    start: bool = _unset(False)
    attributes: Any = None
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    query: dict[str, Any] = field(default_factory=dict)
    actor: str = ""
    stage: str = ""
    # The state the transition was admitted in (its definition is looked up there).
    from_state: str | None = _unset(None)
    # The Busy claim the accept took for this job (None: the job takes none).
    reservation: str | None = _unset(None)
    # The instance whose run queued this job (a SubFlow child's start): `relays_run` follows it.
    origin: str | None = _unset(None)
    # `int(Trigger.EVENT)` for an event's transition; None for a client's.
    trigger: int | None = _unset(None)
    # The instance the client addressed when the transition was forwarded to its subflow leaf.
    chain_reserved: str | None = _unset(None)
    # An updateData: no lock, a ticket in the instance's write lane.
    lock_free: bool = _unset(False)
    # The parent's own transition while its SubFlow child runs: it takes the correlation's Busy.
    waiting_parent: bool = _unset(False)


@dataclass(frozen=True)
class FaultToRetry:
    """The faulted transition a retry re-runs and the step it resumes at (empty: from the
    start)."""

    transition_key: str
    from_state: str
    trigger: int
    step: str


@dataclass(frozen=True)
class RetryJob(JobPayload):
    """An operator's async retry of a Faulted instance (the instance is Busy for `reservation`).
    Its fault is stored under `retry` with the field names as they are (`transition_key`)."""

    fault: FaultToRetry
    transition: str
    reservation: str
    actor: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    query: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The job row's payload."""
        built = super().to_json()
        del built["fault"]
        return {"retry": asdict(self.fault), **built}

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> Self:
        """The record of a stored payload."""
        return super().from_json({**payload, "fault": FaultToRetry(**payload["retry"])})


@dataclass(frozen=True)
class BoundaryRetry(JobPayload):
    """Where an error boundary's retry re-enters its hop: the failed step and task (`phase`,
    `order`, `tasks`), the retries before it and the history row of the hop."""

    transition: str
    from_state: str
    trigger: int
    step: str
    phase: str
    order: int
    tasks: list[str]
    retry: int
    row_id: str
    resolves_incidents: str = ""

    @property
    def fault(self) -> FaultToRetry:
        """The transition and step it re-runs, as an operator's retry names them."""
        return FaultToRetry(self.transition, self.from_state, self.trigger, self.step)


@dataclass(frozen=True)
class BoundaryRetryJob(JobPayload):
    """An error boundary's retry of a failed task, due later, under the run's own Busy."""

    boundary_retry: BoundaryRetry
    reservation: str
    actor: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    query: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> Self:
        """The record of a stored payload."""
        boundary = BoundaryRetry.from_json(payload["boundaryRetry"])
        return super().from_json({**payload, "boundaryRetry": boundary})


def transition_job_of(payload: dict[str, Any]) -> TransitionJob | RetryJob | BoundaryRetryJob:
    """The record a `transition` job's (opened) payload holds: a retry, a boundary retry, or an
    accepted request."""
    if isinstance(payload.get("retry"), dict):
        return RetryJob.from_json(payload)
    if isinstance(payload.get("boundaryRetry"), dict):
        return BoundaryRetryJob.from_json(payload)
    return TransitionJob.from_json(payload)


# --- the other kinds ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TimerJob(JobPayload):
    """`timer`: a state's timer fires `transition` (`state` set); `timeout`: the workflow
    timeout does (no state)."""

    transition: str
    state: str | None = _unset(None)
    # A cron timer: its expression and IANA zone, so the next occurrence is armed after a
    # firing without calling the script again, and the occurrence this job stands for (ISO
    # 8601, UTC), which a retry's later `run_at` does not move.
    cron: str | None = _unset(None)
    time_zone: str | None = _unset(None)
    occurrence: str | None = _unset(None)


@dataclass(frozen=True)
class AutomaticJob(JobPayload):
    """`automatic`: the automatic transitions of `state` run again once the instance is free
    (`after`: the one that fired when the update staged it)."""

    state: str
    after: str = ""


@dataclass(frozen=True)
class LongPollFallbackJob(JobPayload):
    """`longpoll-fallback`: no acknowledgement of the long-poll paused in `state` came in time;
    `token` names the pause (its Busy owner is `LONG_POLL_OWNER_PREFIX + token`)."""

    token: str
    state: str = ""


@dataclass(frozen=True)
class NotificationJob(JobPayload):
    """`notification`: a state's notification entry `index`, entered by `transition`."""

    state: str
    index: int
    transition: str = ""
    entered_at: str = ""


@dataclass(frozen=True)
class TaskNotificationJob(JobPayload):
    """`task-notification`: a notification task's message on one channel, shaped when the task
    ran (`at`)."""

    task: str
    channel: str
    content: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    state: str = ""
    transition: str = ""
    at: str = ""


@dataclass(frozen=True)
class SubflowResumeJob(JobPayload):
    """`subflow-resume`: a SubFlow child ended and its parent resumes (`origin`: the child, for
    `relays_run`)."""

    child: str
    correlation: int = 0
    origin: str = ""


@dataclass(frozen=True)
class SubflowEndJob(JobPayload):
    """`subflow-end`: the parent ended and its SubFlow child runs its cancel (or, when
    `transition_kind` is exit, its exit)."""

    transition_kind: str
    correlation: int = 0
    origin: str = ""


@dataclass(frozen=True)
class EventTransitionJob(JobPayload):
    """`event-transition`: an event whose instance was Busy when it came; its transition is
    admitted once the instance is free (`attributes` sealed as a transition job's are)."""

    event_id: str
    domain: str
    workflow: str
    transition: str
    attributes: dict[str, Any] = field(default_factory=dict)
    actor: str = ""


@dataclass(frozen=True)
class EventReceipt(JobPayload):
    """`event-receipt`: the row that records an event delivery was processed (never run; its
    dedupe key is the receipt)."""

    event_id: str
    action: str
    workflow: str
