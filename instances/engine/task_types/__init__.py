"""Task executors, one module per task type; `EXECUTORS` maps a type number to its executor."""

from __future__ import annotations

from collections.abc import Callable

from instances.engine.task_types.base import (
    HumanTaskOpen,
    OutgoingNotification,
    StandardResponse,
    TaskCall,
    TaskFailure,
)
from instances.engine.task_types.binding import execute_binding
from instances.engine.task_types.cache_aside import execute_cache_aside
from instances.engine.task_types.flows import (
    execute_direct_trigger,
    execute_start_flow,
    execute_subprocess,
)
from instances.engine.task_types.http import execute_http
from instances.engine.task_types.human import execute_human
from instances.engine.task_types.instance_data import (
    execute_get_instance,
    execute_get_instance_data,
    execute_get_instances,
)
from instances.engine.task_types.named import execute_dapr_http_endpoint, execute_dapr_service
from instances.engine.task_types.notification import execute_notification
from instances.engine.task_types.pubsub import execute_pubsub
from instances.engine.task_types.python import execute_python
from instances.engine.task_types.script import execute_condition, execute_script
from instances.engine.task_types.soap import execute_soap
from instances.engine.task_types.state_store import execute_state_store
from instances.status import TaskType

Executor = Callable[[TaskCall], StandardResponse]

EXECUTORS: dict[str, Executor] = {
    TaskType.HTTP: execute_http,
    TaskType.HUMAN: execute_human,
    TaskType.SCRIPT: execute_script,
    TaskType.CONDITION: execute_condition,
    TaskType.NOTIFICATION: execute_notification,
    TaskType.START_FLOW: execute_start_flow,
    TaskType.DIRECT_TRIGGER: execute_direct_trigger,
    TaskType.GET_INSTANCE_DATA: execute_get_instance_data,
    TaskType.SUBPROCESS: execute_subprocess,
    TaskType.GET_INSTANCES: execute_get_instances,
    TaskType.GET_INSTANCE: execute_get_instance,
    TaskType.DAPR_SERVICE: execute_dapr_service,
    TaskType.DAPR_HTTP_ENDPOINT: execute_dapr_http_endpoint,
    TaskType.DAPR_BINDING: execute_binding,
    TaskType.SOAP: execute_soap,
    TaskType.PYTHON: execute_python,
    TaskType.DAPR_PUBSUB: execute_pubsub,
    TaskType.STATE_STORE: execute_state_store,
    TaskType.CACHE_ASIDE: execute_cache_aside,
}

# Task types whose work is their input handler's value, with no I/O (Script, Condition): their
# input and output handlers can run back to back in one script-worker round trip.
PURE_TASK_TYPES = frozenset({TaskType.SCRIPT, TaskType.CONDITION})

__all__ = [
    "EXECUTORS",
    "PURE_TASK_TYPES",
    "Executor",
    "HumanTaskOpen",
    "OutgoingNotification",
    "StandardResponse",
    "TaskCall",
    "TaskFailure",
]
