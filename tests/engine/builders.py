"""Small builders of workflow and task documents for engine tests."""

from __future__ import annotations

import uuid
from typing import Any

from instances.engine.definition import WorkflowDefinition
from instances.engine.execution import EngineConfig, Execution, TransitionRequest
from instances.engine.pipeline import Engine
from instances.engine.ports import InMemoryComponents, InMemoryStore
from instances.engine.records import InstanceSnapshot
from instances.status import Trigger

LABELS = [{"label": "x", "language": "en"}]


def workflow(
    states: list[dict[str, Any]], *, key: str = "wf", start_target: str | None = None, **extra: Any
) -> dict[str, Any]:
    """A workflow document; the first state is the Initial one unless another has stateType 1."""
    initial = next((s["key"] for s in states if s["stateType"] == 1), states[0]["key"])
    start = {
        "key": "start",
        "target": start_target or initial,
        "triggerType": 0,
        "versionStrategy": "Minor",
        "labels": LABELS,
    }
    start.update(extra.pop("start", {}))
    return {
        "key": key,
        "domain": "core",
        "version": "1.0.0",
        "flow": "sys-flows",
        "flowVersion": "1.0.0",
        "tags": ["test"],
        "attributes": {
            "type": "F",
            "labels": LABELS,
            "startTransition": start,
            "states": states,
            **extra,
        },
    }


def state(
    key: str, state_type: int = 2, transitions: list[dict[str, Any]] | None = None, **extra: Any
) -> dict[str, Any]:
    """A state."""
    return {
        "key": key,
        "stateType": state_type,
        "versionStrategy": "None",
        "labels": LABELS,
        "transitions": transitions or [],
        **extra,
    }


def transition(key: str, target: str, trigger: int = 0, **extra: Any) -> dict[str, Any]:
    """A transition."""
    return {
        "key": key,
        "target": target,
        "triggerType": trigger,
        "versionStrategy": "Minor",
        "labels": LABELS,
        **extra,
    }


def script(source: str) -> dict[str, str]:
    """A script object with plain-text code."""
    return {"location": "./src/Test.py", "code": source, "encoding": "NAT"}


def task_component(key: str, task_type: str, config: dict[str, Any]) -> dict[str, Any]:
    """A task component of `task_type` with `config`."""
    return {
        "key": key,
        "domain": "core",
        "version": "1.0.0",
        "flow": "sys-tasks",
        "flowVersion": "1.0.0",
        "tags": ["test"],
        "attributes": {"type": task_type, "config": config},
    }


def script_task(key: str = "script-task") -> dict[str, Any]:
    """A type-7 task component."""
    return task_component(key, "7", {})


def task_ref(
    output: dict[str, Any] | str, order: int = 1, key: str = "script-task"
) -> dict[str, Any]:
    """An onExecutionTasks/onEntries item running `key` whose output handler returns `output`
    (a dict literal, or Python source of the handler's return expression)."""
    expression = output if isinstance(output, str) else repr(output)
    source = (
        "def input_handler(task, context):\n    return ScriptResponse()\n\n"
        f"def output_handler(context):\n    return {expression}\n"
    )
    return {
        "order": order,
        "task": {"key": key, "domain": "core", "version": "1.0.0", "flow": "sys-tasks"},
        "mapping": script(source),
    }


class Harness:
    """An engine on the in-memory store with some documents published."""

    def __init__(self, *documents: dict[str, Any], timeout: float = 1.0) -> None:
        self.store = InMemoryStore()
        self.components = InMemoryComponents(list(documents))
        self.engine = Engine(
            self.store, self.components, config=EngineConfig(script_timeout_seconds=timeout)
        )

    def definition(self, key: str = "wf") -> WorkflowDefinition:
        found = self.components.workflow("core", key, None)
        assert found is not None
        return found

    def load(self, instance_id: uuid.UUID) -> InstanceSnapshot:
        found = self.store.load(instance_id)
        assert found is not None
        return found

    def start(self, attributes: Any = None, key: str = "wf") -> Execution:
        definition = self.definition(key)
        snapshot = InstanceSnapshot(
            id=uuid.uuid4(),
            domain="core",
            workflow_key=key,
            workflow_version="1.0.0",
            current_state=definition.initial_state.key,
        )
        request = TransitionRequest(definition.start, attributes=attributes or {})
        return self.engine.execute(definition, snapshot, request, is_new=True)

    def fire(
        self,
        instance_id: uuid.UUID,
        transition_key: str,
        attributes: Any = None,
        trigger: Trigger = Trigger.MANUAL,
        key: str = "wf",
    ) -> Execution:
        definition = self.definition(key)
        instance = self.store.load(instance_id)
        assert instance is not None
        found = definition.transition_for(instance.current_state, transition_key)
        assert found is not None, transition_key
        request = TransitionRequest(found, trigger=trigger, attributes=attributes or {})
        return self.engine.execute(definition, instance, request)
