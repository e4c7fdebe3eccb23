"""The public error-code table: every code a client can see, with its HTTP status, in one place."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ErrorCode:
    """A public error code (`Instance:100031`) with the HTTP status it answers with."""

    code: str
    http_status: int
    title: str


class Codes:
    """Every public error code. Add new codes here, nowhere else."""

    APP_INVALID_REQUEST = ErrorCode("App:900002", 400, "Request body is invalid")
    # The same code for a query parameter (`sync`, `wait`, `version`, ...), titled for what it is.
    APP_INVALID_QUERY = ErrorCode("App:900002", 400, "Query parameter is invalid")
    APP_INVALID_DEFINITION = ErrorCode("App:900006", 400, "Component definition is invalid")
    APP_NOT_FOUND = ErrorCode("App:900004", 404, "Not found")
    APP_AUTHENTICATION = ErrorCode("App:900001", 401, "Authentication required")
    APP_METHOD_NOT_ALLOWED = ErrorCode("App:900005", 405, "Method not allowed")
    APP_UNSUPPORTED_MEDIA = ErrorCode("App:900007", 415, "Unsupported media type")
    APP_THROTTLED = ErrorCode("App:900008", 429, "Too many requests")
    APP_PAYLOAD_TOO_LARGE = ErrorCode("App:900009", 413, "Request body too large")
    APP_INTERNAL = ErrorCode("App:900000", 500, "Internal error")
    APP_DATABASE_UNAVAILABLE = ErrorCode("App:900010", 503, "Database unavailable")
    # Answered by the serving layer (vnext/serving.py) before a request reaches Django.
    APP_BODY_TIMEOUT = ErrorCode("App:900011", 408, "Request body too slow")
    APP_HEADERS_TOO_LARGE = ErrorCode("App:900012", 431, "Request headers too large")
    AUTHORIZATION_DENIED = ErrorCode("Authorization:110001", 403, "Not allowed")

    COMPONENT_NOT_FOUND = ErrorCode("Component:100404", 404, "Component not found")
    PUBLISH_CONFLICT = ErrorCode(
        "Instance:100002", 409, "Same key and version already published with other content"
    )
    WORKFLOW_NOT_FOUND = ErrorCode("Instance:100015", 404, "Workflow not found")
    INSTANCE_NOT_FOUND = ErrorCode("Instance:100017", 404, "Instance not found")
    # Completed, then archived after its retention: the body's error block says where it went.
    INSTANCE_ARCHIVED = ErrorCode("Instance:Archived", 410, "Instance is archived")
    INSTANCE_COMPLETED = ErrorCode("Instance:100018", 400, "Instance is completed")
    INSTANCE_NOT_FAULTED = ErrorCode("Instance:100027", 400, "Instance is not faulted")
    INSTANCE_FAULTED = ErrorCode("Instance:100028", 409, "Instance is faulted; retry or cancel it")
    INSTANCE_PASSIVE = ErrorCode("Instance:100029", 409, "Instance is suspended")
    INSTANCE_BUSY = ErrorCode("Instance:100031", 409, "Instance is busy")
    INSTANCE_NOT_SUSPENDED = ErrorCode("Instance:NotSuspended", 409, "Instance is not suspended")
    INSTANCE_NOT_SUSPENDABLE = ErrorCode(
        "Instance:NotSuspendable", 409, "Only an Active instance is suspended"
    )
    # Migrating a running instance to another version of its workflow (`instances/repair.py`).
    MIGRATION_TARGET_NOT_FOUND = ErrorCode(
        "Migration:TargetNotFound", 404, "Target version is not published"
    )
    MIGRATION_SAME_VERSION = ErrorCode(
        "Migration:SameVersion", 400, "Instance already runs the target version"
    )
    MIGRATION_STATE_UNMAPPED = ErrorCode(
        "Migration:StateUnmapped", 409, "State has no counterpart in the target version"
    )
    MIGRATION_BAD_MAPPING = ErrorCode(
        "Migration:InvalidMapping", 400, "State mapping names a state that does not exist"
    )
    MIGRATION_NOT_MIGRATABLE = ErrorCode(
        "Migration:InstanceNotMigratable", 409, "Instance cannot be migrated in its status"
    )
    MIGRATION_SUBFLOW_INCOMPATIBLE = ErrorCode(
        "Migration:SubflowIncompatible", 409, "Open subflow's child workflow changes in the target"
    )
    MIGRATION_TIMER_UNARMABLE = ErrorCode(
        "Migration:TimerUnarmable", 409, "Target state's timer cannot be armed"
    )
    # Batch operations over a filter (`instances/batches.py`).
    BATCH_NOT_FOUND = ErrorCode("Batch:NotFound", 404, "Batch not found")
    BATCH_TOO_LARGE = ErrorCode("Batch:TooLarge", 400, "Filter matches too many instances")
    BATCH_FINISHED = ErrorCode("Batch:Finished", 409, "Batch has already finished")
    NO_ACK_PENDING = ErrorCode(
        "Instance:NoAckPending", 409, "The instance awaits no long-poll acknowledgement"
    )
    INSTANCE_KEY_EXISTS = ErrorCode(
        "Instance:KeyExists", 409, "A live instance of the workflow already has this key"
    )
    NO_ACTIVE_INCIDENT = ErrorCode("Instance:100037", 404, "No open incident")
    TRANSITION_NOT_FOUND = ErrorCode("Transition:100004", 404, "Transition not found")
    TRANSITION_FORBIDDEN = ErrorCode("Transition:100010", 403, "Transition not allowed")
    TRANSITION_CHAIN_TOO_DEEP = ErrorCode(
        "Transition:100017", 422, "Automatic transition chain deeper than 50"
    )
    TRANSITION_NOT_AVAILABLE = ErrorCode(
        "Transition:100020", 400, "Transition not available in the current state"
    )
    DATA_SCHEMA_VIOLATION = ErrorCode(
        "Instance:SchemaViolation", 422, "Instance data does not match the master schema"
    )
    TRANSITION_SUPERSEDED = ErrorCode(
        "Transition:Superseded",
        409,
        "Another run (a cancel, exit or timeout) took the instance over while this one ran",
    )
    TASK_INPUT_MAPPING_FAILED = ErrorCode("Task:400007", 502, "Task input mapping failed")
    TASK_OUTPUT_MAPPING_FAILED = ErrorCode("Task:400008", 502, "Task output mapping failed")
    TASK_HTTP_TIMEOUT = ErrorCode("Task:Http:Timeout", 504, "HTTP task timed out")
    TASK_HTTP_TRANSPORT = ErrorCode("Task:Http:Transport", 502, "HTTP task could not connect")
    TASK_EGRESS_REFUSED = ErrorCode(
        "Task:EgressRefused", 403, "The call goes to an address the egress policy refuses"
    )
    TASK_NOT_FOUND = ErrorCode("Task:NotFound", 502, "Task component is not published")
    TASK_INSTANCE_NOT_FOUND = ErrorCode(
        "Task:Instance:404", 502, "Instance the task reads is missing"
    )
    TASK_UNSUPPORTED = ErrorCode("Task:Unsupported", 502, "Task type is not supported here")
    TASK_DOMAIN_DENIED = ErrorCode(
        "Task:DomainDenied", 403, "A task may only reach instances of its workflow's domain"
    )
    TASK_TRIGGER_CONFIG = ErrorCode(
        "Task:Trigger:Config", 502, "Trigger task configuration is incomplete"
    )
    # Pub/sub (4), state store (17) and cache-aside (18) tasks, on the named targets of settings.
    TASK_PUBSUB_UNAVAILABLE = ErrorCode(
        "Task:PubSub:Unavailable", 502, "The pub/sub target is down, refused or timed out"
    )
    TASK_PUBSUB_UNKNOWN = ErrorCode(
        "Task:PubSub:UnknownTarget", 502, "No pub/sub target by that name is configured"
    )
    TASK_STATE_STORE_UNAVAILABLE = ErrorCode(
        "Task:StateStore:Unavailable", 502, "The state store is down, refused or timed out"
    )
    TASK_STATE_STORE_UNKNOWN = ErrorCode(
        "Task:StateStore:UnknownStore", 502, "No state store by that name is configured"
    )
    TASK_STATE_STORE_ETAG = ErrorCode(
        "Task:StateStore:ETagMismatch", 409, "The entry changed since the etag was read"
    )
    TASK_STATE_STORE_CONFIG = ErrorCode(
        "Task:StateStore:Config", 502, "State store task configuration is incomplete"
    )
    TASK_CACHE_ASIDE_KEY = ErrorCode(
        "Task:CacheAside:KeyMissing", 502, "CacheAside requires a non-empty 'key'"
    )
    TASK_CACHE_ASIDE_READ = ErrorCode("Task:CacheAside:ReadFailed", 502, "CacheAside read failed")
    TASK_CACHE_ASIDE_WRITE = ErrorCode(
        "Task:CacheAside:WriteFailed", 502, "CacheAside write failed"
    )
    TASK_CACHE_ASIDE_SOURCE = ErrorCode(
        "Task:CacheAside:Source", 502, "The cache-aside source task cannot run"
    )
    # Human tasks (task type 5) and their inbox (instances/human_tasks.py).
    TASK_HUMAN_UNASSIGNED = ErrorCode(
        "Task:Human:Unassigned", 502, "Human task is assigned to no role and no user"
    )
    TASK_HUMAN_CONFIG = ErrorCode("Task:Human:Config", 502, "Human task configuration is invalid")
    HUMAN_TASK_NOT_FOUND = ErrorCode("HumanTask:NotFound", 404, "Human task not found")
    HUMAN_TASK_CLAIMED = ErrorCode(
        "HumanTask:AlreadyClaimed", 409, "Human task is claimed by someone else"
    )
    HUMAN_TASK_NOT_OPEN = ErrorCode(
        "HumanTask:NotOpen", 409, "Human task is completed or cancelled"
    )
    HUMAN_TASK_NOT_CLAIMER = ErrorCode(
        "HumanTask:NotClaimer", 409, "Only the claimer acts on a claimed human task"
    )
    HUMAN_TASK_INVALID_FORM = ErrorCode(
        "HumanTask:InvalidForm", 400, "Form data does not match the human task's form"
    )
    HUMAN_TASK_NO_TRANSITION = ErrorCode(
        "HumanTask:NoTransition", 400, "Name the transition that completes the human task"
    )
    DATA_REFUSED = ErrorCode("Instance:DataRefused", 400, "The data cannot be stored")
    # The server's keys, not the request, are at fault: nothing is written, nothing is shown.
    ENCRYPTION_KEY_UNAVAILABLE = ErrorCode(
        "Encryption:KeyUnavailable",
        503,
        "Fields encrypted at rest cannot be sealed or opened with the configured keys",
    )
    STRANDED_BUSY = ErrorCode(
        "Instance:StrandedBusy", 500, "Busy with no live owner; faulted by the reaper"
    )
    SCRIPT_FAILED = ErrorCode("Script:100001", 422, "Script failed")
    SCRIPT_TIMEOUT = ErrorCode("Script:Timeout", 422, "Script ran past its time limit")
    SCRIPT_RESOURCE_LIMIT = ErrorCode(
        "Script:ResourceLimit", 422, "Script exceeded its memory or its worker died"
    )
    SCRIPT_UNAVAILABLE = ErrorCode("Script:Unavailable", 503, "No script worker is available")
    RESOURCE_LOCK_CONFLICT = ErrorCode("ResourceLockConflict", 409, "Resource is locked")
    RESOURCE_LOCK_NOT_AVAILABLE = ErrorCode(
        "ResourceLock:NotAvailable", 422, "Resource locks are not configured"
    )
    SUBFLOW_NOT_FOUND = ErrorCode(
        "SubFlow:NotFound", 422, "The subflow's workflow is not published"
    )
    SUBFLOW_MAPPING_FAILED = ErrorCode("SubFlow:MappingFailed", 422, "Subflow mapping failed")
    RESOURCE_LOCK_KEY_INVALID = ErrorCode(
        "ResourceLock:InvalidKey", 422, "The lock key script did not return a usable key"
    )
    FAN_OUT_ITEM_TIMEOUT = ErrorCode("FanOut:ItemTimeout", 500, "Fan-out item timed out")
    FAN_OUT_BATCH_TIMEOUT = ErrorCode("FanOut:BatchTimeout", 500, "Fan-out batch timed out")
    FAN_OUT_ITEM_CANCELLED = ErrorCode("FanOut:ItemCancelled", 500, "Fan-out item cancelled")
    FAN_OUT_ITEM_NOT_STARTED = ErrorCode("FanOut:ItemNotStarted", 500, "Fan-out item not started")
    FAN_OUT_ITEM_FAILED = ErrorCode("FanOut:ItemFailed", 500, "Fan-out item failed")
    FAN_OUT_JOIN_FAILED = ErrorCode(
        "FanOut:JoinFailed", 500, "Fan-out join policy not met by the item results"
    )
    FAN_OUT_INVALID = ErrorCode(
        "FanOut:InvalidConfiguration", 500, "Fan-out task cannot run as configured"
    )
    FAN_OUT_OUTPUT_FAILED = ErrorCode(
        "FanOut:OutputHandlerFailed", 500, "Fan-out output handler failed"
    )
    NOT_AN_EVENT_TRANSITION = ErrorCode("NotAnEventTransition", 400, "Not an event transition")
    FUNCTION_NOT_FOUND = ErrorCode("Function:NotFound", 404, "Function not found")
    FUNCTION_FAILED = ErrorCode("Function:ExecutionFailed", 502, "Function failed")
    FUNCTION_CACHE_FAILED = ErrorCode(
        "Function:CacheFailed", 503, "The function's cache is unavailable"
    )
    FUNCTION_VERB_NOT_ALLOWED = ErrorCode(
        "Function:VerbNotAllowed", 405, "The function does not answer this verb"
    )
    # The function's own answer breaks its declared outputSchema: the server's contract
    # failure, never sent to the client.
    FUNCTION_OUTPUT_INVALID = ErrorCode(
        "Function:OutputInvalid", 502, "The function's output breaks its output schema"
    )
    # Reported inside the `extensions` of an answer (the read itself succeeds).
    EXTENSION_NOT_FOUND = ErrorCode(
        "Extension:NotFound", 404, "No such extension for this workflow and read"
    )
    EXTENSION_FAILED = ErrorCode("Extension:ExecutionFailed", 502, "Extension failed")
    FILTER_INVALID = ErrorCode("invalid_filter", 400, "Invalid filter")
    FILTER_UNSUPPORTED_OPERATOR = ErrorCode(
        "unsupported_operator", 400, "Unsupported filter operator"
    )
    FILTER_INVALID_COLUMN = ErrorCode("invalid_column", 400, "Unknown filter or sort column")
    # Named services, endpoints and bindings (task types 1, 2, 3) and SOAP calls (16).
    TASK_TARGET_UNKNOWN = ErrorCode(
        "Task:Target:Unknown", 502, "The service, endpoint or binding named is not configured"
    )
    TASK_BINDING_REFUSED = ErrorCode("Task:Binding:Refused", 502, "The binding's peer refused")
    TASK_BINDING_UNAVAILABLE = ErrorCode(
        "Task:Binding:Unavailable", 502, "The binding's peer could not be reached"
    )
    TASK_BINDING_TIMEOUT = ErrorCode("Task:Binding:Timeout", 504, "The binding timed out")
    TASK_SOAP_FAULT = ErrorCode("Task:Soap:Fault", 502, "The SOAP service answered a fault")
    TASK_SOAP_INVALID = ErrorCode(
        "Task:Soap:InvalidMessage", 502, "The SOAP request or answer is not a SOAP envelope"
    )

    @staticmethod
    def script(code: str) -> ErrorCode:
        """The table entry of a script failure's code (`Script:Timeout`, ...)."""
        return next(
            (e for e in all_codes() if e.code == code and e.code.startswith("Script:")),
            Codes.SCRIPT_FAILED,
        )

    @staticmethod
    def task_trigger(status: int) -> ErrorCode:
        """The code of a start-flow, direct-trigger or subprocess task answered `status`."""
        return ErrorCode(f"Task:Trigger:{status}", 502, f"Trigger task answered {status}")

    @staticmethod
    def task_http(status: int) -> ErrorCode:
        """The code of an HTTP task that answered `status` (`Task:Http:503`)."""
        return ErrorCode(f"Task:Http:{status}", 502, f"HTTP task answered {status}")


# The failures that ran out of time: an HTTP call, a script stopped at its deadline, a fan-out
# item or batch. An error boundary's `onTimeout` policy handles these (and only these), and
# `errorTypes` matches them as `TimeoutException`.
TIMEOUT_CODES = frozenset(
    error.code
    for error in (
        Codes.TASK_HTTP_TIMEOUT,
        Codes.TASK_BINDING_TIMEOUT,
        Codes.SCRIPT_TIMEOUT,
        Codes.FAN_OUT_ITEM_TIMEOUT,
        Codes.FAN_OUT_BATCH_TIMEOUT,
    )
)


def is_timeout(code: str) -> bool:
    """True when a failure's public code says it timed out (`Task:Http:Timeout`, ...)."""
    return code in TIMEOUT_CODES


def all_codes() -> list[ErrorCode]:
    """Every static code in the table, for documentation and tests."""
    return [value for value in vars(Codes).values() if isinstance(value, ErrorCode)]


@dataclass(frozen=True)
class Violation:
    """One problem found in a document: where (a JSON pointer) and what."""

    pointer: str
    message: str

    def as_dict(self) -> dict[str, str]:
        """The `errors[]` item of the error body."""
        return {"pointer": self.pointer, "message": self.message}


@dataclass
class VNextError(Exception):
    """A business error carrying a public code; the API turns it into the RFC 7807 body."""

    error: ErrorCode
    detail: str
    violations: list[Violation] = field(default_factory=list)
    instance_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(f"{self.error.code}: {self.detail}")

    @property
    def code(self) -> str:
        """The public code, e.g. `Instance:100031`."""
        return self.error.code

    @property
    def http_status(self) -> int:
        """The HTTP status the code answers with."""
        return self.error.http_status


def refused_at(error: ErrorCode, pointer: str, detail: str) -> VNextError:
    """A refusal of one field of a request: `detail`, with the JSON pointer that failed."""
    return VNextError(error, detail, violations=[Violation(pointer, detail)])
