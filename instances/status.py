"""The vocabulary: instance, transition, task, job and correlation statuses, state, task, flow
and execution types, triggers and job kinds, each defined once.

Plain Python enums (the engine imports them and stays free of Django); models take their
`choices(...)`. Every status write in SQL is guarded by the status it expects to replace
(compare-and-set).
"""

from __future__ import annotations

from enum import Enum, IntEnum, StrEnum
from typing import Any, Self, cast


class TextChoices(StrEnum):
    """A string enum whose members are declared `NAME = "value", "Label"`."""

    label: str

    def __new__(cls, value: str, label: str) -> TextChoices:
        member = str.__new__(cls, value)
        member._value_ = value
        member.label = label
        return member


class IntegerChoices(IntEnum):
    """An integer enum whose members are declared `NAME = value, "Label"`."""

    label: str

    @classmethod
    def of(cls, value: int) -> Self:
        """The member whose value is `value` (ValueError when there is none)."""
        found = cls._value2member_map_.get(value)
        if found is None:
            raise ValueError(f"{value!r} is not a valid {cls.__name__}")
        return cast(Self, found)

    def __new__(cls, value: int, label: str) -> IntegerChoices:
        member = int.__new__(cls, value)
        member._value_ = value
        member.label = label
        return member


def choices(enum: type[Enum]) -> list[tuple[Any, str]]:
    """`(value, label)` pairs for a model field's `choices`."""
    return [(member.value, getattr(member, "label", member.name)) for member in enum]


class InstanceStatus(TextChoices):
    """One letter per instance status (DESIGN section 5)."""

    ACTIVE = "A", "Active"  # waiting for input; accepts a transition
    BUSY = "B", "Busy"  # a pipeline owns the instance (busy_owner); others get 409
    COMPLETED = "C", "Completed"  # reached a final state, was cancelled or timed out (terminal)
    FAULTED = "F", "Faulted"  # a step failed; an incident says why; retry resumes it
    PASSIVE = "P", "Passive"  # suspended by an operator


class StateType(IntegerChoices):
    """`stateType` of a state definition (seed 001)."""

    INITIAL = 1, "Initial"
    INTERMEDIATE = 2, "Intermediate"
    FINAL = 3, "Final"
    SUBFLOW = 4, "SubFlow"
    WIZARD = 5, "Wizard"


# `subType` numbers of states, and the names the API reports (`effectiveStateSubType`).
STATE_SUBTYPE_NAMES = {
    0: "none",
    1: "success",
    2: "error",
    3: "terminated",
    4: "suspended",
    5: "busy",
    6: "human",
    7: "cancelled",
    8: "timeout",
}
STATE_TYPE_NAMES = {1: "initial", 2: "intermediate", 3: "final", 4: "subflow", 5: "wizard"}


class TaskType(TextChoices):
    """`type` of a task definition: vNext's task codes (`task-definition.schema.json`), and the
    fan-out task this runtime adds (seed 002). `EXECUTORS` says which of them run here."""

    DAPR_HTTP_ENDPOINT = "1", "Dapr HTTP Endpoint"
    DAPR_BINDING = "2", "Dapr Binding"
    DAPR_SERVICE = "3", "Dapr Service"
    DAPR_PUBSUB = "4", "Dapr PubSub"
    HUMAN = "5", "Human Task"
    HTTP = "6", "HTTP Task"
    SCRIPT = "7", "Script Task"
    CONDITION = "8", "Condition Task"
    TIMER = "9", "Timer Task"
    NOTIFICATION = "10", "Notification Task"
    START_FLOW = "11", "Start Flow Task"
    DIRECT_TRIGGER = "12", "Trigger Transition Task"
    GET_INSTANCE_DATA = "13", "Get Instance Data Task"
    SUBPROCESS = "14", "SubProcess Task"
    GET_INSTANCES = "15", "Get Instances Task"
    SOAP = "16", "SOAP Task"
    STATE_STORE = "17", "State Store Task"
    CACHE_ASIDE = "18", "Cache Aside Task"
    GET_INSTANCE = "19", "Get Instance Task"
    DAPR_CONVERSATION = "20", "Dapr Conversation Task"
    FAN_OUT = "21", "Fan-Out Task"  # ours: one inner task per item of a collection
    PYTHON = "23", "Python Task"  # ours: `main(input)` in the script pool (config: its code)


class FlowType(TextChoices):
    """`subFlow.type` of a SubFlow state, and the type of a parent/child `Correlation`."""

    SUBFLOW = "S", "SubFlow"  # the parent waits, Busy, until its child ends
    SUBPROCESS = "P", "SubProcess"  # the child runs on its own; the parent goes on


class ExecutionType(TextChoices):
    """`executionType` of a workflow or a transition: it overrides the request's `?sync`."""

    SYNC = "S", "Synchronous"
    ASYNC = "A", "Asynchronous"


class Trigger(IntegerChoices):
    """`triggerType` of a transition, and the inbound trigger of a pipeline run (it picks the
    profile; an error-boundary run is triggered by the boundary)."""

    MANUAL = 0, "Manual"
    AUTOMATIC = 1, "Automatic"
    SCHEDULED = 2, "Scheduled"
    EVENT = 3, "Event"
    ERROR_BOUNDARY = 9, "Error boundary"


class JobKind(TextChoices):
    """What a `Job` row does."""

    TRANSITION = "transition", "Transition"  # an accepted async start or transition
    # An accepted updateData (sync or async): a ticket in the instance's write lane, which runs
    # them one after another in acceptance (job id) order.
    UPDATE_DATA = "update-data", "Data update"
    TIMER = "timer", "Timer"  # a state's scheduled transition
    TIMEOUT = "timeout", "Workflow timeout"
    SUBFLOW_RESUME = "subflow-resume", "Subflow resume"  # the child ended: the parent goes on
    SUBFLOW_END = "subflow-end", "Subflow end"  # the parent ended: the child is cancelled
    # A state paused for a long-poll acknowledgement goes on without it.
    LONG_POLL_FALLBACK = "longpoll-fallback", "Long-poll fallback"
    # A state's notification, after the hop that entered the state committed.
    NOTIFICATION = "notification", "State notification"
    # A notification task's message on one channel, after the hop that ran the task committed.
    TASK_NOTIFICATION = "task-notification", "Notification task"
    # A state's automatic transitions evaluated again once the instance is free: an updateData
    # that committed while another run held the instance made one of their rules hold.
    AUTOMATIC = "automatic", "Automatic transitions"
    # An event's receipt (its dedupe key), written with the work the event caused; never run.
    EVENT_RECEIPT = "event", "Event receipt"
    # An event whose instance was Busy: it waits for the instance, then admits its transition.
    EVENT_TRANSITION = "event-transition", "Event transition"
    # A chunk of an operator's batch operation (`instances/batches.py`); it runs again until
    # every item of the batch has its outcome.
    BATCH = "batch", "Batch operation"


class TransitionStatus(TextChoices):
    """An `InstanceTransition` row: one attempt to run a transition."""

    RUNNING = "running", "Running"  # admitted, pipeline in progress
    COMPLETED = "completed", "Completed"  # the pipeline finished the hop
    FAULTED = "faulted", "Faulted"  # a step failed; error code and message say why
    # A task failed and an error boundary sent the run on with its rollback/notify transition.
    DIVERTED = "diverted", "Diverted by an error boundary"
    # Another run (cancel, exit, timeout) took the instance over while this one ran: its late
    # results were dropped; the error message names who took over.
    CANCELLED = "cancelled", "Cancelled: superseded by another run"


class TaskStatus(TextChoices):
    """An `InstanceTask` journal row."""

    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


class HumanTaskStatus(TextChoices):
    """A `HumanTask` row (the inbox): open until someone claims it; claimed until the claimer
    completes or releases it; cancelled when its state is left another way."""

    OPEN = "open", "Open"
    CLAIMED = "claimed", "Claimed"
    COMPLETED = "completed", "Completed"
    CANCELLED = "cancelled", "Cancelled"


class JobStatus(TextChoices):
    """A `Job` row of the durable queue (claimed by CAS pending -> running with a lease)."""

    PENDING = "pending", "Pending"  # waiting for run_at and a worker
    RUNNING = "running", "Running"  # claimed; lease_owner holds it until lease_until
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"  # retries exhausted; an operator may replay it
    CANCELLED = "cancelled", "Cancelled"  # e.g. a timer of a state the instance has left
    # Ended without running: the instance was faulted, finished or had left the timer's state.
    SKIPPED = "skipped", "Skipped"
    # Ran, and its run faulted the instance: the error is on the instance; retry the instance.
    INSTANCE_FAULTED = "instance_faulted", "Faulted its instance"
    # Its instance is suspended: it waits, and is pending again (still due) when it resumes.
    HELD = "held", "Held: instance suspended"


class CorrelationStatus(TextChoices):
    """A parent/child `Correlation` (subflow S, subprocess P)."""

    ACTIVE = "active", "Active"  # the child runs; an S parent waits for it
    COMPLETED = "completed", "Completed"
    CANCELLED = "cancelled", "Cancelled"
    FAULTED = "faulted", "Faulted"


class BatchOperation(TextChoices):
    """What an operator's batch does to each instance it froze."""

    RETRY = "retry", "Retry"
    CANCEL = "cancel", "Cancel"
    SUSPEND = "suspend", "Suspend"
    RESUME = "resume", "Resume"
    MIGRATE = "migrate", "Migrate"


class BatchStatus(TextChoices):
    """A batch: running until every item has an outcome, or until an operator cancels it."""

    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    CANCELLED = "cancelled", "Cancelled"


class BatchOutcome(TextChoices):
    """One item of a batch: pending until its instance is handled, exactly once."""

    PENDING = "pending", "Pending"
    DONE = "done", "Done"
    REFUSED = "refused", "Refused"  # the operation does not apply to it (why: the error code)
    FAILED = "failed", "Failed"  # an unexpected error (why: the exception)
    CANCELLED = "cancelled", "Cancelled"  # the batch was cancelled before it was handled


class Channel(TextChoices):
    """Where an operator's action came from, in the audit."""

    ADMIN = "admin", "Admin"
    API = "api", "API"
    COMMAND = "command", "Command"
    BATCH = "batch", "Batch"
