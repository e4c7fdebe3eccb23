"""Task type 23 (Python Task, this runtime's own): `main(input)` of the task's code, run in the
script pool like any script (RestrictedPython, the default modules, the script timeout).

`config` is a script object: `code` (`encoding` B64, the default, NAT or REF) and an optional
`location`. `input` is the reference's input handler's value (None without one); what `main`
returns is the standard response's `data`. `main` raising fails the task with
`Task:Python:<taskKey>:500` (as a Script Task's input handler fails with `Task:Script:...`); a
script stopped by the platform keeps its own code (`Script:Timeout`, `Script:ResourceLimit`,
`Script:Unavailable`), which error boundaries tell apart.
"""

from __future__ import annotations

import copy
from typing import Any

from instances.engine.errors import Codes, ErrorCode
from instances.engine.script_runner import ScriptHandle, response_data, stopped_code
from instances.engine.scripts import (
    DEFAULT_ALLOWED_MODULES,
    ScriptError,
    ScriptTextMissing,
    compile_script,
    script_text,
)
from instances.engine.task_types.base import StandardResponse, TaskCall, TaskFailure

ENTRY_POINT = "main"


def python_task_error(key: str) -> ErrorCode:
    """The code of a Python task whose `main` raised (`Task:Python:<taskKey>:500`)."""
    return ErrorCode(f"Task:Python:{key}:500", 500, "Python task failed")


def execute_python(call: TaskCall) -> StandardResponse:
    """`main(input)` in a script worker; its value is the response's data."""
    key = str(call.task.get("task_key") or "?")
    runner = call.scripts
    if runner is None:
        raise TaskFailure(Codes.TASK_UNSUPPORTED, f"task {key}: no script runner to run it on")
    config = call.task.get("config")
    node: dict[str, Any] = config if isinstance(config, dict) else {}
    location = str(node.get("location") or f"{key}:main")
    try:
        source = script_text(node, lambda ref: runner.components.component("mapping", ref))
        handle = ScriptHandle(
            runner, compile_script(source, location), source, DEFAULT_ALLOWED_MODULES
        )
        if not handle.has(ENTRY_POINT):
            raise ScriptError("the task's code defines no main(input)", location=location)
        value = handle.call(ENTRY_POINT, copy.deepcopy(call.input_data))
    except ScriptTextMissing as exc:
        raise TaskFailure(python_task_error(key), f"{location}: {exc}", status=500) from exc
    except ScriptError as exc:
        code = stopped_code(exc, python_task_error(key))
        status = 500 if code.code.startswith("Task:Python:") else None
        raise TaskFailure(code, str(exc), status=status) from exc
    return StandardResponse(status_code=200, data=response_data(value))
