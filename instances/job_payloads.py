"""The payload of each job kind as a typed record: written with `to_json()`, read back with
`from_json()`. The JSON keys are the camelCase ones jobs have always stored, so a job already in
the table loads as it is; a reader ignores keys it does not know (the request id, marks).

Plain Python: the engine, the store and the services write these, the job handlers read them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# --- the `transition` kind: an accepted request, an operator's retry, an error-boundary retry -----


@dataclass(frozen=True)
class TransitionJob:
    """An accepted start or transition (also the `update-data` write-lane ticket): what the
    client sent (`attributes`, `body`, credential-free `headers`, `query`) and how the job
    takes the instance over. A synchronous run builds its request from the same record."""

    transition: str
    attributes: Any = None
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    query: dict[str, Any] = field(default_factory=dict)
    actor: str = ""
    stage: str = ""
    # The workflow's start transition (the instance was inserted reserved for this job).
    start: bool = False
    # The state the transition was admitted in (its definition is looked up there).
    from_state: str | None = None
    # The Busy claim the accept took for this job (None: the job takes none).
    reservation: str | None = None
    # `int(Trigger.EVENT)` for an event's transition; None for a client's.
    trigger: int | None = None
    # The instance the client addressed when the transition was forwarded to its subflow leaf.
    chain_reserved: str | None = None
    # An updateData: no lock, a ticket in the instance's write lane.
    lock_free: bool = False
    # The parent's own transition while its SubFlow child runs: it takes the correlation's Busy.
    waiting_parent: bool = False
    # The instance whose run queued this job (a SubFlow child's start): `relays_run` follows it.
    origin: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The job row's payload; optional parts only when set."""
        built: dict[str, Any] = {"transition": self.transition}
        if self.start:
            built["start"] = True
        built.update(
            attributes=self.attributes,
            body=self.body,
            headers=self.headers,
            query=self.query,
            actor=self.actor,
            stage=self.stage,
        )
        optional = {
            "fromState": self.from_state,
            "reservation": self.reservation,
            "origin": self.origin,
            "trigger": self.trigger,
            "chainReserved": self.chain_reserved,
        }
        built.update({key: value for key, value in optional.items() if value is not None})
        if self.lock_free:
            built["lockFree"] = True
        if self.waiting_parent:
            built["waitingParent"] = True
        return built

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> TransitionJob:
        """The record of a stored payload (opened, when its request was sealed)."""
        trigger = payload.get("trigger")
        return cls(
            transition=str(payload["transition"]),
            attributes=payload.get("attributes"),
            body=payload.get("body"),
            headers=payload.get("headers") or {},
            query=payload.get("query") or {},
            actor=payload.get("actor") or "",
            stage=payload.get("stage") or "",
            start=bool(payload.get("start")),
            from_state=payload.get("fromState"),
            reservation=_text_or_none(payload.get("reservation")),
            trigger=int(trigger) if trigger is not None else None,
            chain_reserved=_text_or_none(payload.get("chainReserved")),
            lock_free=bool(payload.get("lockFree")),
            waiting_parent=bool(payload.get("waitingParent")),
            origin=_text_or_none(payload.get("origin")),
        )


@dataclass(frozen=True)
class FaultToRetry:
    """The faulted transition a retry re-runs and the step it resumes at (empty: from the
    start)."""

    transition_key: str
    from_state: str
    trigger: int
    step: str


@dataclass(frozen=True)
class RetryJob:
    """An operator's async retry of a Faulted instance (the instance is Busy for `reservation`)."""

    fault: FaultToRetry
    transition: str
    reservation: str
    actor: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    query: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The job row's payload (the fault under `retry`, its field names as they are)."""
        return {
            "retry": asdict(self.fault),
            "transition": self.transition,
            "reservation": self.reservation,
            "actor": self.actor,
            "headers": self.headers,
            "query": self.query,
        }

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> RetryJob:
        """The record of a stored payload."""
        return cls(
            fault=FaultToRetry(**payload["retry"]),
            transition=str(payload.get("transition") or ""),
            reservation=str(payload.get("reservation") or ""),
            actor=payload.get("actor") or "",
            headers=payload.get("headers") or {},
            query=payload.get("query") or {},
        )


@dataclass(frozen=True)
class BoundaryRetry:
    """Where an error boundary's retry re-enters its hop: the failed step and task (`phase`,
    `order`, `tasks`), the retries before it and the history row of the hop."""

    transition: str
    from_state: str
    trigger: int
    step: str
    phase: str
    order: int
    tasks: tuple[str, ...]
    retry: int
    row_id: str
    resolves_incidents: str = ""

    @property
    def fault(self) -> FaultToRetry:
        """The transition and step it re-runs, as an operator's retry names them."""
        return FaultToRetry(self.transition, self.from_state, self.trigger, self.step)

    def to_json(self) -> dict[str, Any]:
        """The `boundaryRetry` part of the job's payload."""
        return {
            "transition": self.transition,
            "fromState": self.from_state,
            "trigger": self.trigger,
            "step": self.step,
            "phase": self.phase,
            "order": self.order,
            "tasks": list(self.tasks),
            "retry": self.retry,
            "rowId": self.row_id,
            "resolvesIncidents": self.resolves_incidents,
        }

    @classmethod
    def from_json(cls, retry: dict[str, Any]) -> BoundaryRetry:
        """The record of a stored `boundaryRetry` part."""
        return cls(
            transition=str(retry["transition"]),
            from_state=str(retry.get("fromState") or ""),
            trigger=int(retry.get("trigger") or 0),
            step=str(retry.get("step") or ""),
            phase=str(retry["phase"]),
            order=int(retry["order"]),
            tasks=tuple(str(key) for key in retry.get("tasks") or []),
            retry=int(retry["retry"]),
            row_id=str(retry["rowId"]),
            resolves_incidents=str(retry.get("resolvesIncidents") or ""),
        )


@dataclass(frozen=True)
class BoundaryRetryJob:
    """An error boundary's retry of a failed task, due later, under the run's own Busy."""

    boundary: BoundaryRetry
    reservation: str
    actor: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    query: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The job row's payload."""
        return {
            "boundaryRetry": self.boundary.to_json(),
            "reservation": self.reservation,
            "actor": self.actor,
            "headers": self.headers,
            "query": self.query,
        }

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> BoundaryRetryJob:
        """The record of a stored payload."""
        return cls(
            boundary=BoundaryRetry.from_json(payload["boundaryRetry"]),
            reservation=str(payload.get("reservation") or ""),
            actor=payload.get("actor") or "",
            headers=payload.get("headers") or {},
            query=payload.get("query") or {},
        )


def transition_job_of(payload: dict[str, Any]) -> TransitionJob | RetryJob | BoundaryRetryJob:
    """The record a `transition` job's (opened) payload holds: a retry, a boundary retry, or an
    accepted request."""
    if isinstance(payload.get("retry"), dict):
        return RetryJob.from_json(payload)
    if isinstance(payload.get("boundaryRetry"), dict):
        return BoundaryRetryJob.from_json(payload)
    return TransitionJob.from_json(payload)


# --- scheduled kinds: `timer`, `timeout`, `automatic`, `longpoll-fallback` ---------------------


@dataclass(frozen=True)
class TimerJob:
    """A state's timer (`state` set) or the workflow timeout (no state) fires `transition`."""

    transition: str
    state: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The job row's payload."""
        built: dict[str, Any] = {"transition": self.transition}
        if self.state is not None:
            built["state"] = self.state
        return built

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> TimerJob:
        """The record of a stored payload."""
        state = payload.get("state")
        return cls(transition=str(payload["transition"]), state=_text_or_none(state))


@dataclass(frozen=True)
class AutomaticJob:
    """The automatic transitions of `state` run again once the instance is free (`after`: the
    one that fired when the update staged it)."""

    state: str
    after: str

    def to_json(self) -> dict[str, Any]:
        """The job row's payload."""
        return {"state": self.state, "after": self.after}

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> AutomaticJob:
        """The record of a stored payload."""
        return cls(state=str(payload.get("state") or ""), after=str(payload.get("after") or ""))


@dataclass(frozen=True)
class LongPollFallbackJob:
    """No acknowledgement of the long-poll paused in `state` came in time; `token` names the
    pause (its Busy owner is `LONG_POLL_OWNER_PREFIX + token`)."""

    token: str
    state: str

    def to_json(self) -> dict[str, Any]:
        """The job row's payload."""
        return {"token": self.token, "state": self.state}

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> LongPollFallbackJob:
        """The record of a stored payload."""
        return cls(token=str(payload.get("token")), state=str(payload.get("state") or ""))


# --- notifications: `notification`, `task-notification` ---------------------------------------


@dataclass(frozen=True)
class NotificationJob:
    """A state's notification entry `index`, entered by `transition` at `entered_at`."""

    state: str
    index: int
    transition: str
    entered_at: str

    def to_json(self) -> dict[str, Any]:
        """The job row's payload."""
        return {
            "state": self.state,
            "index": self.index,
            "transition": self.transition,
            "enteredAt": self.entered_at,
        }

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> NotificationJob:
        """The record of a stored payload (`index` -1 when it is not a number)."""
        index = payload.get("index")
        return cls(
            state=str(payload.get("state", "")),
            index=index if isinstance(index, int) and not isinstance(index, bool) else -1,
            transition=str(payload.get("transition", "")),
            entered_at=str(payload.get("enteredAt", "")),
        )


@dataclass(frozen=True)
class TaskNotificationJob:
    """A notification task's message on one channel, shaped when the task ran."""

    task: str
    channel: str
    content: Any
    headers: dict[str, str]
    state: str
    transition: str
    at: str

    def to_json(self) -> dict[str, Any]:
        """The job row's payload."""
        return {
            "task": self.task,
            "channel": self.channel,
            "content": self.content,
            "headers": self.headers,
            "state": self.state,
            "transition": self.transition,
            "at": self.at,
        }

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> TaskNotificationJob:
        """The record of a stored payload (headers that are not an object: none)."""
        headers = payload.get("headers")
        return cls(
            task=str(payload.get("task", "")),
            channel=str(payload.get("channel") or ""),
            content=payload.get("content"),
            headers=(
                {str(name): str(value) for name, value in headers.items()}
                if isinstance(headers, dict)
                else {}
            ),
            state=str(payload.get("state", "")),
            transition=str(payload.get("transition", "")),
            at=str(payload.get("at", "")),
        )


# --- subflows: `subflow-resume`, `subflow-end` ---------------------------------------------------


@dataclass(frozen=True)
class SubflowResumeJob:
    """A SubFlow child ended: its parent resumes (`origin`: the child, for `relays_run`)."""

    child: str
    correlation: int
    origin: str

    def to_json(self) -> dict[str, Any]:
        """The job row's payload."""
        return {"child": self.child, "correlation": self.correlation, "origin": self.origin}

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> SubflowResumeJob:
        """The record of a stored payload."""
        return cls(
            child=str(payload["child"]),
            correlation=int(payload.get("correlation") or 0),
            origin=str(payload.get("origin") or ""),
        )


@dataclass(frozen=True)
class SubflowEndJob:
    """The parent ended: its SubFlow child runs its cancel (or, `transition_kind` exit, exit)."""

    transition_kind: str
    correlation: int
    origin: str

    def to_json(self) -> dict[str, Any]:
        """The job row's payload."""
        return {
            "transitionKind": self.transition_kind,
            "correlation": self.correlation,
            "origin": self.origin,
        }

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> SubflowEndJob:
        """The record of a stored payload."""
        return cls(
            transition_kind=str(payload.get("transitionKind") or ""),
            correlation=int(payload.get("correlation") or 0),
            origin=str(payload.get("origin") or ""),
        )


# --- events: `event-transition`, `event-receipt` -------------------------------------------------


@dataclass(frozen=True)
class EventTransitionJob:
    """An event whose instance was Busy when it came: its transition, admitted once it is free."""

    event_id: str
    domain: str
    workflow: str
    transition: str
    attributes: dict[str, Any]
    actor: str

    def to_json(self) -> dict[str, Any]:
        """The job row's payload (its `attributes` sealed like a transition job's when the
        workflow encrypts fields at rest)."""
        return {
            "eventId": self.event_id,
            "domain": self.domain,
            "workflow": self.workflow,
            "transition": self.transition,
            "attributes": self.attributes,
            "actor": self.actor,
        }

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> EventTransitionJob:
        """The record of a stored (opened) payload."""
        return cls(
            event_id=str(payload.get("eventId") or ""),
            domain=str(payload["domain"]),
            workflow=str(payload["workflow"]),
            transition=str(payload["transition"]),
            attributes=payload.get("attributes") or {},
            actor=str(payload.get("actor") or "event"),
        )


@dataclass(frozen=True)
class EventReceipt:
    """The row that records an event delivery was processed (never run; its dedupe key is the
    receipt)."""

    event_id: str
    action: str
    workflow: str

    def to_json(self) -> dict[str, Any]:
        """The receipt row's payload."""
        return {"eventId": self.event_id, "action": self.action, "workflow": self.workflow}

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> EventReceipt:
        """The record of a stored payload."""
        return cls(
            event_id=str(payload.get("eventId") or ""),
            action=str(payload.get("action") or ""),
            workflow=str(payload.get("workflow") or ""),
        )


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)
