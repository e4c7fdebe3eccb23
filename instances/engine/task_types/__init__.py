"""Task executors, one module per task type; `EXECUTORS` maps a type number to its executor."""

from __future__ import annotations

from collections.abc import Callable

from instances.engine.task_types.base import (
    OutgoingNotification,
    StandardResponse,
    TaskCall,
    TaskFailure,
)
from instances.engine.task_types.flows import (
    execute_direct_trigger,
    execute_start_flow,
    execute_subprocess,
)
from instances.engine.task_types.http import execute_http
from instances.engine.task_types.instance_data import (
    execute_get_instance,
    execute_get_instance_data,
    execute_get_instances,
)
from instances.engine.task_types.notification import NOTIFICATION_TYPE, execute_notification
from instances.engine.task_types.script import execute_condition, execute_script

Executor = Callable[[TaskCall], StandardResponse]

EXECUTORS: dict[str, Executor] = {
    "6": execute_http,
    "7": execute_script,
    "8": execute_condition,
    NOTIFICATION_TYPE: execute_notification,
    "11": execute_start_flow,
    "12": execute_direct_trigger,
    "13": execute_get_instance_data,
    "14": execute_subprocess,
    "15": execute_get_instances,
    "19": execute_get_instance,
}

# Task types whose work is their input handler's value, with no I/O (Script, Condition): their
# input and output handlers can run back to back in one script-worker round trip.
PURE_TASK_TYPES = frozenset({"7", "8"})

__all__ = [
    "EXECUTORS",
    "NOTIFICATION_TYPE",
    "PURE_TASK_TYPES",
    "Executor",
    "OutgoingNotification",
    "StandardResponse",
    "TaskCall",
    "TaskFailure",
]
