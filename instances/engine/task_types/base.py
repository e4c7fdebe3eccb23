"""What every task executor receives and returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from instances.engine.errors import Codes, ErrorCode
from instances.engine.ports import InstanceReader, InstanceWriter, SubprocessParent
from instances.engine.script_runner import ScriptHandle, ScriptRunner
from instances.engine.script_wire import ScriptObject


@dataclass
class StandardResponse:
    """A task's standard response; an output handler sees it as `context.body`."""

    status_code: int | None
    data: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    is_success: bool = True
    # Why the task failed (an HTTP call that answered 503, timed out, could not connect).
    error_message: str | None = None
    # What the task says of its execution besides the data (the pub/sub target and topic, a
    # state-store entry's etag, a cache hit), as vNext's `Metadata`; None: the task has none.
    metadata: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The response as scripts and the task journal see it."""
        answer = {
            "status_code": self.status_code,
            "data": self.data,
            "headers": self.headers,
            "is_success": self.is_success,
            "error_message": self.error_message,
        }
        if self.metadata is not None:
            answer["metadata"] = self.metadata
        return answer


class TaskFailure(Exception):
    """A task failed with a public error code from the table (`Task:Http:503`,
    `Task:Http:Timeout`, ...).

    A failure with a `response` got an answer (an HTTP call that answered 503, timed out or
    could not connect): the output handler sees that response like any other, and without an
    error boundary the pipeline goes on. `status` is what error boundaries match `500`-style
    codes against."""

    def __init__(
        self,
        error: ErrorCode,
        message: str,
        response: StandardResponse | None = None,
        *,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.error = error
        self.message = message
        self.response = response
        if status is None and response is not None:
            status = response.status_code
        self.status = status
        # The task that failed, set by the task runner (an incident names it).
        self.task_key = ""

    @property
    def code(self) -> str:
        """The public code, e.g. `Task:Http:503`."""
        return self.error.code

    @property
    def answered(self) -> bool:
        """True when the task got an answer its output handler can look at."""
        return self.response is not None


@dataclass(frozen=True)
class OutgoingNotification:
    """A message a task hands over for delivery on `channel`: a `task-notification` job
    committed with the hop, so it is sent only if the hop commits, and retried until it is.
    `content` None on the `state` channel: the platform shapes it (the state function) when it
    is delivered."""

    channel: str
    content: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HumanTaskOpen:
    """A human task (type 5) a task opens: its inbox entry, written with the hop."""

    id: Any
    task_key: str
    title: str
    instructions: str
    roles: list[str]
    users: list[str]
    form: Any = None
    context: Any = None
    due_at: Any = None


@dataclass
class TaskCall:
    """One execution of a task: its (possibly script-mutated) view, and what it may read."""

    task: ScriptObject
    input_data: Any
    domain: str
    reader: InstanceReader | None
    writer: InstanceWriter | None = None
    # The running instance's workflow key (which other domains it may reach).
    workflow: str = ""
    # The running instance and its state (a SubProcess task's parent).
    parent: SubprocessParent | None = None
    # The reference's mapping and the context its handlers get: the notification task calls
    # its own handlers on them (`channel_handler`, `enrich`).
    mapping: ScriptHandle | None = None
    context: ScriptObject | None = None
    # What the task hands over for delivery once the hop commits (notification tasks).
    outbox: list[OutgoingNotification] = field(default_factory=list)
    # The human tasks it opens (type 5): committed with the hop as inbox entries.
    human_tasks: list[HumanTaskOpen] = field(default_factory=list)
    # Runs a published task (`{key, domain, flow, version}`) with a mapping as its own input
    # and output handlers, and returns the output handler's value (else the response's data);
    # raises its `TaskFailure`. A cache-aside task's source on a miss (type 18).
    run_source: Callable[[dict[str, Any], dict[str, Any] | None], Any] | None = None

    # The script pool's runner: a Python task (type 23) runs its own code through it.
    scripts: ScriptRunner | None = None


def accepted(status: int, patterns: list[str]) -> bool:
    """True when `status` matches an `acceptedStatusCodes` entry (`404`, `4xx`, `40x`)."""
    text = str(status)
    return any(
        len(p) == 3 and all(c in ("x", s) for c, s in zip(p.lower(), text, strict=True))
        for p in patterns
    )


def own_domain(call: TaskCall) -> str:
    """The domain a task reaches: its `domain` setting, which must be its workflow's own unless
    an operator granted the workflow that domain (a domain reach)."""
    asked = str(call.task.get("domain") or call.domain)
    granted = call.reader is not None and call.reader.may_reach(call.domain, call.workflow, asked)
    if asked != call.domain and not granted:
        raise TaskFailure(
            Codes.TASK_DOMAIN_DENIED,
            f"task {call.task.get('task_key')} reaches domain {asked!r}; a workflow of "
            f"{call.domain!r} may only reach its own domain unless granted another",
        )
    return asked
