"""Task types 7 (Script) and 8 (Condition): the mapping is the work; no I/O."""

from __future__ import annotations

from instances.engine.task_types.base import StandardResponse, TaskCall


def execute_script(call: TaskCall) -> StandardResponse:
    """The input handler's data is the task's result."""
    return StandardResponse(status_code=200, data=call.input_data)


def execute_condition(call: TaskCall) -> StandardResponse:
    """The input handler's value, as a boolean `result`."""
    return StandardResponse(status_code=200, data={"result": bool(call.input_data)})
