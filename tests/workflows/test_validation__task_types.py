"""No task type publishes that does not run: every type of the (extended) task schema either has
an executor, or is refused at publish at `/attributes/type`; a workflow or Fan-Out referring to a
stored task of such a type is refused too."""

from __future__ import annotations

import copy
from typing import Any
from unittest import mock

import pytest

from instances.engine.task_types import EXECUTORS
from instances.status import TaskType
from tests.conftest import DictResolver
from tests.engine.builders import state, transition, workflow
from workflows.documents import ComponentKind
from workflows.models import Component
from workflows.services import component_publish
from workflows.validation import validate_component
from workflows.validation.structural import schema_for
from workflows.validation.task_types import RUN_BY_THE_RUNNER, refused_types

PUBLISH = "/api/v1/definitions/publish"
HEADER = {"domain": "core", "version": "1.0.0", "flowVersion": "1.0.0", "tags": ["test"]}
CONVERSATION = (
    "task type 20 (DaprConversationTask) needs an LLM conversation component, which this "
    "runtime does not provide"
)


def schema_types() -> list[str]:
    """The task types the task-definition schema (with this runtime's extensions) accepts."""
    attributes = schema_for(ComponentKind.TASK)["properties"]["attributes"]
    return [str(value) for value in attributes["properties"]["type"]["enum"]]


def task(key: str, task_type: str, config: Any = None) -> dict[str, Any]:
    return {
        "key": key,
        "flow": "sys-tasks",
        **HEADER,
        "attributes": {"type": task_type, "config": config if config is not None else {}},
    }


def ref(key: str) -> dict[str, str]:
    return {"key": key, "domain": "core", "version": "1.0.0", "flow": "sys-tasks"}


def type_findings(document: dict[str, Any]) -> list[str]:
    violations = validate_component(document, DictResolver([]))
    return [v.message for v in violations if v.pointer == "/attributes/type"]


def test_every_type_of_the_schema_has_an_executor_or_is_refused_at_publish():
    types = schema_types()
    assert set(types) <= {str(member) for member in TaskType}  # none escapes the table unknown
    refused = refused_types()
    for task_type in types:
        runs = task_type in EXECUTORS or task_type in RUN_BY_THE_RUNNER
        findings = type_findings(task(f"probe-{task_type}", task_type))
        if runs:
            assert task_type not in refused
            assert findings == [], task_type
        else:
            assert findings == [refused[task_type]], task_type
    # The refusals are derived from EXECUTORS: exactly the schema's types without one.
    assert set(refused) == set(types) - set(EXECUTORS) - RUN_BY_THE_RUNNER


def test_a_type_stops_being_refused_once_it_has_an_executor():
    with mock.patch.dict(EXECUTORS, {TaskType.DAPR_CONVERSATION: lambda call: None}):
        assert TaskType.DAPR_CONVERSATION not in refused_types()
        assert type_findings(task("llm", "20")) == []
    assert refused_types()[TaskType.DAPR_CONVERSATION] == CONVERSATION


def test_the_timer_task_is_refused_as_the_system_task_vnext_documents():
    # doc/en/flow/tasks/timer-task.md: "only used by the system and cannot be defined manually".
    assert TaskType.TIMER not in EXECUTORS
    (message,) = type_findings(task("wait", "9"))
    assert "cannot be defined by hand" in message
    assert "scheduled transition (triggerType 2)" in message


@pytest.mark.django_db
def test_publishing_a_task_of_every_refused_type_answers_400_at_its_type(operator_client):
    refused = refused_types()
    assert TaskType.DAPR_CONVERSATION in refused
    for task_type, message in refused.items():
        response = operator_client.post(
            PUBLISH, task(f"refused-{task_type}", task_type), format="json"
        )
        assert response.status_code == 400, task_type
        body = response.json()
        assert body["errorCode"] == "App:900006"
        assert {"pointer": "/attributes/type", "message": message} in body["errors"]
    assert not Component.objects.filter(key__startswith="refused-").exists()


def stored_before_the_check(document: dict[str, Any]) -> None:
    """Store `document` as a runtime without this check would have (an older registry row)."""
    with mock.patch("workflows.services.component_validate"):
        component_publish(document=copy.deepcopy(document))


def test_a_fan_out_whose_inner_task_has_a_refused_type_is_refused():
    fan = task("fan", "21", {"mode": "inline", "itemsPath": "$.items", "task": ref("llm")})
    violations = validate_component(fan, DictResolver([task("llm", "20")]))
    assert [(v.pointer, v.message) for v in violations] == [
        ("/attributes/config/task", f"task task:core/llm@1.0.0 cannot run: {CONVERSATION}")
    ]


@pytest.mark.django_db
def test_over_http_a_fan_out_and_a_workflow_referring_to_a_stored_refused_task_are_refused(
    operator_client,
):
    stored_before_the_check(task("llm", "20"))
    fan = task("fan", "21", {"mode": "inline", "itemsPath": "$.items", "task": ref("llm")})
    response = operator_client.post(PUBLISH, fan, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {
            "pointer": "/attributes/config/task",
            "message": f"task task:core/llm@1.0.0 cannot run: {CONVERSATION}",
        }
    ]
    calls = workflow(
        [
            state(
                "idle",
                1,
                [transition("call", "called", onExecutionTasks=[{"order": 1, "task": ref("llm")}])],
            ),
            state("called", 2),
        ],
        key="calls",
    )
    response = operator_client.post(PUBLISH, calls, format="json")
    assert response.status_code == 400
    pointer = "/attributes/states/0/transitions/0/onExecutionTasks/0/task"
    assert {
        "pointer": pointer,
        "message": f"task task:core/llm@1.0.0 cannot run: {CONVERSATION}",
    } in response.json()["errors"]
    assert not Component.objects.filter(key__in=["fan", "calls"]).exists()


@pytest.mark.django_db
def test_a_batch_with_a_refused_task_and_its_workflow_publishes_neither(operator_client):
    calls = workflow(
        [
            state(
                "idle",
                1,
                [transition("call", "called", onExecutionTasks=[{"order": 1, "task": ref("llm")}])],
            ),
            state("called", 2),
        ],
        key="calls",
    )
    response = operator_client.post(PUBLISH, [task("llm", "20"), calls], format="json")
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert {"pointer": "/0/attributes/type", "message": CONVERSATION} in errors
    assert not Component.objects.filter(key__in=["llm", "calls"]).exists()
