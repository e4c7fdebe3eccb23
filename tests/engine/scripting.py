"""Running scripts the way the engine does: one `ScriptCall` through a worker pool."""

from __future__ import annotations

from typing import Any

from instances.engine.script_pool import ScriptCall, ScriptPool
from instances.engine.script_wire import ScriptObject
from instances.engine.scripts import DEFAULT_ALLOWED_MODULES

LOCATION = "./src/Probe.py"


def run(
    pool: ScriptPool,
    source: str,
    *args: Any,
    handler: str = "handler",
    timeout: float = 0.5,
    allowed: frozenset[str] | set[str] = DEFAULT_ALLOWED_MODULES,
) -> Any:
    """Call `handler(*args)` of `source` in a worker and return its value (or raise)."""
    call = ScriptCall(
        source=source,
        location=LOCATION,
        handler=handler,
        args=args or (context(),),
        allowed_modules=frozenset(allowed),
        timeout_seconds=timeout,
    )
    return pool.run(call).value


def context(**data: Any) -> ScriptObject:
    """A context as the engine builds it, with `data` as the instance data."""
    return ScriptObject(
        instance=ScriptObject(id="i-1", key="k", data=data, state="start", status="A"),
        body={},
        headers={},
        query={},
        transition=ScriptObject(key="go"),
        task_responses={},
        event_payload=None,
    )


def handler_of(body: str) -> str:
    """A module defining `handler(context)` with `body` as its code."""
    lines = "\n".join(f"    {line}" for line in body.strip().splitlines())
    return f"def handler(context):\n{lines}\n"
