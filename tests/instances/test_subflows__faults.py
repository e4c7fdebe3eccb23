"""A SubFlow child that faults shows on its parent (the state function reports the child's
fault and its incident), and retrying the child resumes the parent; a child's workflow that is
not published faults the parent with `SubFlow:NotFound`."""

from __future__ import annotations

from typing import Any

import pytest

from instances.models import Correlation, Incident, Instance
from instances.registry import RegistryComponents
from instances.wiring import engine
from tests.engine.builders import script, script_task, state, transition, workflow
from tests.instances.scenario_api import WorkflowApi
from workflows.models import Component
from workflows.services import component_publish

pytestmark = pytest.mark.django_db

FAILING_ENTRY = {
    "order": 1,
    "task": {"key": "script-task", "domain": "core", "version": "1.0.0", "flow": "sys-tasks"},
    "mapping": script(
        "def input_handler(task, context):\n"
        "    if not get(context.instance.data, 'ok'):\n"
        "        raise ValueError('not ok yet')\n"
        "    return ScriptResponse()\n"
    ),
}


def documents(child_version: str = "1.0.0") -> tuple[dict[str, Any], dict[str, Any]]:
    child = workflow(
        [
            state(
                "c-check",
                1,
                [transition("c-finish", "c-done", 1, triggerKind=10)],
                onEntries=[FAILING_ENTRY],
            ),
            state("c-done", 3, subType=1),
        ],
        key="checker",
    )
    child["attributes"]["type"] = "S"
    subflow = {
        "type": "S",
        "process": {
            "key": "checker",
            "domain": "core",
            "version": child_version,
            "flow": "sys-flows",
        },
        "mapping": script("def output_handler(context):\n    return {'checked': True}\n"),
    }
    parent = workflow(
        [
            state("p-initial", 1, [transition("p-go", "p-check", 1, triggerKind=10)]),
            state(
                "p-check", 4, [transition("p-end", "p-done", 1, triggerKind=10)], subFlow=subflow
            ),
            state("p-done", 3, subType=1),
        ],
        key="asker",
    )
    return child, parent


def test_a_faulted_child_shows_on_the_parent_and_its_retry_resumes_the_parent(operator_client):
    child, parent = documents()
    for document in (script_task(), child, parent):
        component_publish(document=document)
    parent_api = WorkflowApi(operator_client, "asker")
    parent_id = parent_api.started()
    kid = Instance.objects.get(parent_correlation__parent__pk=parent_id)
    assert (kid.status, Instance.objects.get(pk=parent_id).status) == ("F", "B")

    state_body = parent_api.state(parent_id)
    assert (state_body["state"], state_body["status"]) == ("c-check", "F")
    assert state_body["activeCorrelations"][0]["status"] == "F"
    assert state_body["incident"]["hasActiveIncident"] is True

    retried = operator_client.post(
        f"/api/v1/core/workflows/checker/instances/{kid.pk}/retry?sync=true",
        {"attributes": {"ok": True}},
        format="json",
    )
    assert retried.status_code == 200, retried.json()

    kid = Instance.objects.get(pk=kid.pk)
    assert (kid.current_state, kid.status) == ("c-done", "C")
    top = Instance.objects.get(pk=parent_id)
    assert (top.current_state, top.status, top.data["checked"]) == ("p-done", "C", True)
    assert Correlation.objects.get(child=kid).status == "completed"
    assert not Incident.objects.filter(instance_id=kid.pk, resolved=False).exists()


def test_a_subflow_whose_workflow_is_not_published_faults_the_parent(operator_client):
    child, parent = documents()
    for document in (script_task(), child, parent):
        component_publish(document=document)
    # Publishing checks references; a registry edited behind its back (a restored backup,
    # say) can still lose the child. The run must fault clearly, not start a broken child.
    Component.objects.filter(key="checker").delete()
    components = engine().components
    assert isinstance(components, RegistryComponents)
    components.clear()

    response = WorkflowApi(operator_client, "asker").start()
    body = response.json()
    assert (response.status_code, body["status"]) == (200, "F")
    assert body["error"]["errorCode"] == "SubFlow:NotFound"
    assert not Correlation.objects.exists()
    assert not Instance.objects.filter(workflow_key="checker").exists()


def test_a_resume_that_faults_is_retried_with_the_childs_data(operator_client):
    child, parent = documents()
    # The child passes at once; the parent's output handler refuses until corrected.
    child["attributes"]["states"][0]["onEntries"] = []
    subflow = parent["attributes"]["states"][1]["subFlow"]
    subflow["mapping"] = script(
        "def output_handler(context):\n"
        "    if not get(context.instance.data, 'fixed'):\n"
        "        raise ValueError('not fixed')\n"
        "    return {'fromChild': context.body}\n"
    )
    child["attributes"]["states"][0]["transitions"][0]["onExecutionTasks"] = [
        {**FAILING_ENTRY, "mapping": script(
            "def input_handler(task, context):\n    return ScriptResponse()\n\n"
            "def output_handler(context):\n    return {'answer': 42}\n"
        )}
    ]  # fmt: skip
    for document in (script_task(), child, parent):
        component_publish(document=document)
    parent_api = WorkflowApi(operator_client, "asker")
    parent_id = parent_api.started()
    top = Instance.objects.get(pk=parent_id)
    assert (top.current_state, top.status) == ("p-check", "F")
    incident = Incident.objects.get(instance_id=parent_id, resolved=False)
    assert incident.error_code == "SubFlow:MappingFailed"

    retried = operator_client.post(
        f"/api/v1/core/workflows/asker/instances/{parent_id}/retry?sync=true",
        {"attributes": {"fixed": True}},
        format="json",
    )

    assert retried.status_code == 200, retried.json()
    top = Instance.objects.get(pk=parent_id)
    assert (top.current_state, top.status) == ("p-done", "C")
    assert top.data["fromChild"] == {"answer": 42}
