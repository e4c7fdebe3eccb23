"""What the pub/sub, state-store and cache-aside end-to-end tests share: a workflow whose
`call` transition runs one task reference, settings naming the real RabbitMQ and Redis running
here (or a closed port: a target that is down), and an error boundary matching one code."""

from __future__ import annotations

import socket
from typing import Any

from tests.engine.builders import script, state, transition, workflow
from workflows.services import component_publish

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672//"
REDIS_URL = "redis://127.0.0.1:6379/0"
BASE = "/api/v1/core/workflows/calls/instances"


def publish(*documents: dict[str, Any]) -> None:
    """Publish `documents` in order."""
    for document in documents:
        component_publish(document=document)


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def calls_workflow(*references: dict[str, Any]) -> dict[str, Any]:
    """idle --call--> called, `references` on the transition's onExecutionTasks."""
    return workflow(
        [
            state("idle", 1, [transition("call", "called", onExecutionTasks=list(references))]),
            state("called", 2),
        ],
        key="calls",
    )


def reference(key: str, mapping: str, order: int = 1, **extra: Any) -> dict[str, Any]:
    """An onExecutionTasks item running task `key` with a mapping (plain Python)."""
    return {
        "order": order,
        "task": {"key": key, "domain": "core", "version": "1.0.0", "flow": "sys-tasks"},
        "mapping": script(mapping),
        **extra,
    }


def abort_on(code: str) -> dict[str, Any]:
    """A task-level error boundary that aborts on `code` (and on nothing else)."""
    return {"errorBoundary": {"onError": [{"action": 0, "errorCodes": [code]}]}}


def run_call(client: Any, body: dict[str, Any] | None = None) -> tuple[str, Any]:
    """Start an instance (data `body`) and run `call` on it, both synchronously."""
    created = client.post(f"{BASE}/start?sync=true", body or {"customer": "c-9"}, format="json")
    assert created.status_code in (200, 201), created.json()
    instance_id = created.json()["id"]
    response = client.patch(f"{BASE}/{instance_id}/transitions/call?sync=true", {}, format="json")
    return instance_id, response


def active_incident(client: Any, instance_id: str) -> dict[str, Any]:
    """The instance's open incident as the API shows it."""
    answer = client.get(f"{BASE}/{instance_id}/incidents/active")
    assert answer.status_code == 200, answer.json()
    body: dict[str, Any] = answer.json()
    return body


def answer_of(row: Any) -> dict[str, Any]:
    """A task journal row's recorded response (asserted present)."""
    assert row.response is not None, row
    answer: dict[str, Any] = row.response
    return answer
