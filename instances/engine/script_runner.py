"""Running a definition's script objects: decode (REF through the registry), compile (cached),
load into the sandbox with the workflow's allow-list, call a handler. Also the context objects
scripts receive (`context.instance.data`, `context.body`, ...)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from instances.engine.definition import WorkflowDefinition
from instances.engine.errors import Codes, VNextError
from instances.engine.ports import Components
from instances.engine.records import InstanceSnapshot
from instances.engine.scripts import (
    LoadedScript,
    Sandbox,
    ScriptResponse,
    ScriptTextMissing,
    compile_script,
    script_text,
)


class ScriptObject:
    """An attribute bag scripts read (`context.instance.state`) and may write to."""

    _guarded_writes = True

    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:
        # Only reached for missing attributes: keep Python's error, give type checkers `Any`.
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        self.__dict__[name] = value

    def get(self, name: str, default: Any = None) -> Any:
        """`context.get("body")`: attribute access for scripts written dict-style."""
        return self.__dict__.get(name, default)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"{type(self).__name__}({fields})"


def instance_view(instance: InstanceSnapshot) -> ScriptObject:
    """`context.instance`: id, key, data (a copy), state, status, domain, flow, version."""
    return ScriptObject(
        id=str(instance.id),
        key=instance.key,
        data=copy.deepcopy(instance.data),
        state=instance.current_state,
        status=str(instance.status),
        domain=instance.domain,
        flow=instance.workflow_key,
        version=instance.workflow_version,
        tags=list(instance.tags),
    )


def script_context(
    instance: InstanceSnapshot,
    *,
    transition_key: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    query: dict[str, Any] | None = None,
    task_responses: dict[str, Any] | None = None,
    event_payload: Any = None,
) -> ScriptObject:
    """The `context` argument of every handler."""
    return ScriptObject(
        instance=instance_view(instance),
        body=copy.deepcopy(body) if body is not None else {},
        headers=dict(headers or {}),
        query=dict(query or {}),
        transition=ScriptObject(key=transition_key),
        task_responses=dict(task_responses or {}),
        event_payload=event_payload,
    )


def response_data(value: Any) -> Any:
    """The data part of what a handler returned: a `ScriptResponse`'s `data`, else the value."""
    return value.data if isinstance(value, ScriptResponse) else value


@dataclass
class ScriptRunner:
    """Loads definition script objects into the sandbox."""

    components: Components
    timeout_seconds: float = 2.0

    def load(self, node: dict[str, Any], definition: WorkflowDefinition) -> LoadedScript:
        """Decode, compile (cached by content) and load a script object of `definition`."""
        source = self._source(node)
        location = str(node.get("location") or f"{definition.key}:script")
        compiled = compile_script(source, location)
        local = node.get("scripts") if isinstance(node.get("scripts"), dict) else {}
        extra = frozenset(m for m in (local or {}).get("allowedModules", []) if isinstance(m, str))
        sandbox = Sandbox(
            allowed_modules=definition.allowed_modules | extra,
            timeout_seconds=self.timeout_seconds,
        )
        return sandbox.load(compiled)

    def call(
        self, node: dict[str, Any], definition: WorkflowDefinition, handler: str, *args: Any
    ) -> Any:
        """Load the script and call `handler(*args)`."""
        return self.load(node, definition).call(handler, *args)

    def _source(self, node: dict[str, Any]) -> str:
        try:
            return script_text(node, lambda ref: self.components.component("mapping", ref))
        except ScriptTextMissing as exc:
            raise VNextError(Codes.SCRIPT_FAILED, str(exc)) from exc
