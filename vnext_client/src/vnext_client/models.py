"""Typed results of the vNext API: frozen dataclasses read from the server's JSON, each keeping
the whole answer in `raw` for fields this version does not name."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol


class InstanceStatus(StrEnum):
    """An instance's status letter as the API sends it."""

    ACTIVE = "A"  # waiting for input; accepts a transition
    BUSY = "B"  # a run owns it (or it waits for a subflow): transitions get 409 Busy
    COMPLETED = "C"  # reached a final state, was cancelled or timed out
    FAULTED = "F"  # a step failed; an incident says why; retry resumes it
    PASSIVE = "P"  # suspended by an operator


class InstanceLike(Protocol):
    """Anything that names an instance: an `InstanceRef`, `Instance`, `TransitionResult` or
    `InstanceState`."""

    @property
    def domain(self) -> str: ...

    @property
    def workflow(self) -> str: ...

    @property
    def id(self) -> str: ...


@dataclass(frozen=True)
class InstanceRef:
    """An instance by domain, workflow and id (its UUID or business key)."""

    domain: str
    workflow: str
    id: str


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any) -> str:
    return "" if value is None else str(value)


@dataclass(frozen=True)
class Metadata:
    """The `metadata` block of an instance."""

    current_state: str
    effective_state: str
    status: str
    effective_state_type: Any
    effective_state_sub_type: Any
    created_at: datetime | None
    modified_at: datetime | None
    completed_at: datetime | None
    duration: float | None
    created_by: str | None
    modified_by: str | None
    stage: str | None
    incident: dict[str, Any]

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Metadata:
        """Read the `metadata` object."""
        return cls(
            current_state=_text(body.get("currentState")),
            effective_state=_text(body.get("effectiveState")),
            status=_text(body.get("status")),
            effective_state_type=body.get("effectiveStateType"),
            effective_state_sub_type=body.get("effectiveStateSubType"),
            created_at=_time(body.get("createdAt")),
            modified_at=_time(body.get("modifiedAt")),
            completed_at=_time(body.get("completedAt")),
            duration=body.get("duration"),
            created_by=body.get("createdBy"),
            modified_by=body.get("modifiedBy"),
            stage=body.get("stage"),
            incident=_dict(body.get("incident")),
        )


@dataclass(frozen=True)
class Instance:
    """`GET …/instances/{instance}` (and each item of a page of instances)."""

    domain: str
    workflow: str
    id: str
    key: str | None
    flow_version: str | None
    etag: str
    entity_etag: str
    tags: list[Any]
    attributes: dict[str, Any]
    extensions: dict[str, Any]
    metadata: Metadata
    raw: dict[str, Any] = field(repr=False)

    @property
    def status(self) -> str:
        """The status letter (`InstanceStatus`)."""
        return self.metadata.status

    @property
    def state(self) -> str:
        """The current state's key."""
        return self.metadata.current_state

    @classmethod
    def from_json(cls, body: dict[str, Any], *, domain: str = "", workflow: str = "") -> Instance:
        """Read an instance; `domain` / `workflow` where the body does not say."""
        return cls(
            domain=_text(body.get("domain") or domain),
            workflow=_text(body.get("flow") or workflow),
            id=_text(body.get("id")),
            key=body.get("key"),
            flow_version=body.get("flowVersion"),
            etag=_text(body.get("eTag")),
            entity_etag=_text(body.get("entityEtag")),
            tags=_list(body.get("tags")),
            attributes=_dict(body.get("attributes")),
            extensions=_dict(body.get("extensions")),
            metadata=Metadata.from_json(_dict(body.get("metadata"))),
            raw=body,
        )


@dataclass(frozen=True)
class RunError:
    """The `error` block of a run that faulted its instance (answered 200, status `F`) or was
    superseded by a cancel, exit or timeout."""

    code: str
    detail: str
    incident_href: str | None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> RunError:
        """Read the `error` block."""
        return cls(
            code=_text(body.get("errorCode")),
            detail=_text(body.get("detail")),
            incident_href=_dict(body.get("incident")).get("href"),
        )


@dataclass(frozen=True)
class TransitionResult:
    """What a start, transition, retry or long-poll acknowledgement answered.

    `accepted` is True when the server took the request as a job (202); then `location` is the
    instance's URL and, unless the client was told not to follow, the other fields describe the
    instance once the job has run. A run whose work failed answers with `status` `F` and
    `error` (a normal answer, not an exception)."""

    domain: str
    workflow: str
    id: str
    status: str
    key: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    etag: str = ""
    entity_etag: str = ""
    extensions: dict[str, Any] = field(default_factory=dict)
    error: RunError | None = None
    retried_transition_id: str | None = None
    accepted: bool = False
    location: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def faulted(self) -> bool:
        """The run faulted its instance."""
        return self.status == InstanceStatus.FAULTED

    @classmethod
    def from_json(
        cls,
        body: dict[str, Any],
        *,
        domain: str,
        workflow: str,
        accepted: bool = False,
        location: str | None = None,
    ) -> TransitionResult:
        """Read an envelope (`{id, key, status, attributes, eTag, entityEtag, extensions}`) or a
        202's `{id, status}`."""
        error = body.get("error")
        return cls(
            domain=domain,
            workflow=workflow,
            id=_text(body.get("id")),
            status=_text(body.get("status")),
            key=body.get("key"),
            attributes=_dict(body.get("attributes")),
            etag=_text(body.get("eTag")),
            entity_etag=_text(body.get("entityEtag")),
            extensions=_dict(body.get("extensions")),
            error=RunError.from_json(error) if isinstance(error, dict) else None,
            retried_transition_id=body.get("retriedTransitionId"),
            accepted=accepted,
            location=location,
            raw=body,
        )


@dataclass(frozen=True)
class AvailableTransition:
    """One entry of the state function's `transitions`: what the caller may fire now."""

    name: str
    href: str
    kind: str | None
    has_view: bool
    has_schema: bool
    execute_at_utc: datetime | None
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> AvailableTransition:
        """Read a `transitions` entry."""
        return cls(
            name=_text(body.get("name")),
            href=_text(body.get("href")),
            kind=body.get("kind"),
            has_view=bool(_dict(body.get("view")).get("hasView")),
            has_schema=bool(_dict(body.get("schema")).get("hasSchema")),
            execute_at_utc=_time(body.get("executeAtUtc")),
            raw=body,
        )


@dataclass(frozen=True)
class ActiveCorrelation:
    """A subflow the instance waits for (the state function's `activeCorrelations`)."""

    correlation_id: str
    parent_state: str
    sub_flow_instance_id: str
    sub_flow_type: str
    sub_flow_domain: str
    sub_flow_name: str
    is_completed: bool
    status: str
    current_state: str
    href: str

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> ActiveCorrelation:
        """Read an `activeCorrelations` entry."""
        return cls(
            correlation_id=_text(body.get("correlationId")),
            parent_state=_text(body.get("parentState")),
            sub_flow_instance_id=_text(body.get("subFlowInstanceId")),
            sub_flow_type=_text(body.get("subFlowType")),
            sub_flow_domain=_text(body.get("subFlowDomain")),
            sub_flow_name=_text(body.get("subFlowName")),
            is_completed=bool(body.get("isCompleted")),
            status=_text(body.get("status")),
            current_state=_text(body.get("currentState")),
            href=_text(body.get("href")),
        )


@dataclass(frozen=True)
class Interaction:
    """A state's long-poll interaction: whether the long-poll stops here and waits for an
    acknowledgement (`ack_href`), and how long the server waits before it goes on alone."""

    terminate_long_poll: bool
    fallback_timeout_seconds: int | None
    ack_href: str | None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Interaction:
        """Read the `interaction` block."""
        return cls(
            terminate_long_poll=bool(body.get("terminateLongPoll")),
            fallback_timeout_seconds=body.get("fallbackTimeoutSeconds"),
            ack_href=_dict(body.get("ack")).get("href"),
        )


@dataclass(frozen=True)
class InstanceState:
    """The state function (`functions/state`): where the instance is (for a parent waiting on
    subflows: the deepest active one) and what the caller may do next."""

    domain: str
    workflow: str
    id: str
    state: str
    status: str
    label: str | None
    state_type: Any
    state_sub_type: Any
    transitions: list[AvailableTransition]
    active_correlations: list[ActiveCorrelation]
    interaction: Interaction | None
    timeout: dict[str, Any] | None
    incident: dict[str, Any]
    data_href: str
    view: dict[str, Any]
    etag: str
    raw: dict[str, Any] = field(repr=False)

    @property
    def completed(self) -> bool:
        """The instance reached a final state (status `C`): nothing more will change."""
        return self.status == InstanceStatus.COMPLETED

    @property
    def transition_names(self) -> list[str]:
        """The names of the transitions the caller may fire now."""
        return [transition.name for transition in self.transitions]

    @classmethod
    def from_json(
        cls, body: dict[str, Any], *, domain: str, workflow: str, instance_id: str
    ) -> InstanceState:
        """Read a state function answer for the instance it was asked of."""
        interaction = body.get("interaction")
        timeout = body.get("timeout")
        return cls(
            domain=domain,
            workflow=workflow,
            id=instance_id,
            state=_text(body.get("state")),
            status=_text(body.get("status")),
            label=body.get("label"),
            state_type=body.get("stateType"),
            state_sub_type=body.get("stateSubType"),
            transitions=[
                AvailableTransition.from_json(item)
                for item in _list(body.get("transitions"))
                if isinstance(item, dict)
            ],
            active_correlations=[
                ActiveCorrelation.from_json(item)
                for item in _list(body.get("activeCorrelations"))
                if isinstance(item, dict)
            ],
            interaction=Interaction.from_json(interaction)
            if isinstance(interaction, dict)
            else None,
            timeout=timeout if isinstance(timeout, dict) else None,
            incident=_dict(body.get("incident")),
            data_href=_text(_dict(body.get("data")).get("href")),
            view=_dict(body.get("view")),
            etag=_text(body.get("eTag")),
            raw=body,
        )


@dataclass(frozen=True)
class InstanceData:
    """The data function (`functions/data`): the data the caller may see."""

    data: Any
    etag: str
    extensions: dict[str, Any]

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> InstanceData:
        """Read a data function answer."""
        return cls(
            data=body.get("data"),
            etag=_text(body.get("eTag")),
            extensions=_dict(body.get("extensions")),
        )


@dataclass(frozen=True)
class View:
    """The view function (`functions/view`): what to render for the state or a transition."""

    key: str
    content: Any
    type: Any
    display: Any
    label: Any
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> View:
        """Read a view function answer."""
        return cls(
            key=_text(body.get("key")),
            content=body.get("content"),
            type=body.get("type"),
            display=body.get("display"),
            label=body.get("label"),
            raw=body,
        )


@dataclass(frozen=True)
class Schema:
    """The schema function (`functions/schema`): a transition's (or the master) JSON Schema."""

    key: str
    type: Any
    schema: Any

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Schema:
        """Read a schema function answer."""
        return cls(key=_text(body.get("key")), type=body.get("type"), schema=body.get("schema"))


@dataclass(frozen=True)
class HistoryEntry:
    """One row of an instance's transition history (`GET …/transitions`), oldest first."""

    transition_key: str
    from_state: str | None
    to_state: str | None
    status: str
    started_at: datetime | None
    finished_at: datetime | None
    error_code: str | None
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> HistoryEntry:
        """Read a history row."""
        return cls(
            transition_key=_text(body.get("transitionKey")),
            from_state=body.get("fromState"),
            to_state=body.get("toState"),
            status=_text(body.get("status")),
            started_at=_time(body.get("startedAt")),
            finished_at=_time(body.get("finishedAt")),
            error_code=body.get("errorCode"),
            raw=body,
        )


@dataclass(frozen=True)
class Page:
    """One page of `GET …/instances`: its items, its number and size, whether another follows,
    the cursor of the next one and the server's `links` (`""` where there is no such page)."""

    items: list[Instance]
    page: int
    page_size: int
    has_next: bool
    next_cursor: str | None
    links: dict[str, str]
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, body: dict[str, Any], *, domain: str, workflow: str) -> Page:
        """Read a page of instances of `workflow` in `domain`."""
        return cls(
            items=[
                Instance.from_json(item, domain=domain, workflow=workflow)
                for item in _list(body.get("items"))
                if isinstance(item, dict)
            ],
            page=int(body.get("page") or 1),
            page_size=int(body.get("pageSize") or 0),
            has_next=bool(body.get("hasNext")),
            next_cursor=body.get("nextCursor") or None,
            links={str(k): _text(v) for k, v in _dict(body.get("links")).items()},
            raw=body,
        )
