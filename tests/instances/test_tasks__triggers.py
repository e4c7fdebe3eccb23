"""Trigger task types: 11 starts an instance (idempotent by key: a duplicate is 409, which
`acceptedStatusCodes` may accept), 12 runs a transition on another instance (a child's updateData
reaches its waiting parent as data only, step 21), 14 starts a SubProcess child fire-and-forget
with a `P` correlation that closes when the child ends."""

from __future__ import annotations

from typing import Any

import pytest

from instances.job_handlers import jobs_run_due
from instances.models import Correlation, Instance, InstanceTask
from tests.engine.builders import script, script_task, state, transition, workflow
from tests.instances.scenario_api import WorkflowApi
from workflows.services import component_publish

pytestmark = pytest.mark.django_db


def trigger_task(name: str, task_type: str, **config: Any) -> dict[str, Any]:
    return {
        "key": name,
        "domain": "core",
        "version": "1.0.0",
        "flow": "sys-tasks",
        "flowVersion": "1.0.0",
        "tags": ["test"],
        "attributes": {"type": task_type, "config": {"domain": "core", **config}},
    }


def ref(key: str, mapping: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {
        "order": 1,
        "task": {"key": key, "domain": "core", "version": "1.0.0", "flow": "sys-tasks"},
    }
    if mapping:
        item["mapping"] = script(mapping)
    return item


# The child workflow every test starts: `waiting` until `finish`.
WORKER = workflow(
    [
        state("waiting", 1, [transition("finish", "done")]),
        state("done", 3, subType=1),
    ],
    key="worker",
)
RECORD = "def output_handler(context):\n    return {'answer': context.body}\n"


def publish(*documents: dict[str, Any]) -> None:
    for document in (script_task(), WORKER, *documents):
        component_publish(document=document)


def starter(task_key: str, **extra: Any) -> dict[str, Any]:
    return workflow(
        [
            state(
                "begin", 1, [transition("go", "started", onExecutionTasks=[ref(task_key, RECORD)])]
            ),
            state("started", 2),
        ],
        key="starter",
        **extra,
    )


def test_a_start_flow_task_starts_an_instance_and_a_duplicate_key_is_409(operator_client):
    publish(
        trigger_task("start-worker", "11", flow="worker", key="job-1", sync=True,
                     body={"from": "starter"}),
        starter("start-worker"),
    )  # fmt: skip
    api = WorkflowApi(operator_client, "starter")
    first = api.started()
    answer = api.fired(first, "go")
    assert (answer["status"], answer["attributes"]["answer"]["status_code"]) == ("A", 200)
    started = Instance.objects.get(workflow_key="worker")
    assert (started.key, started.current_state, started.data) == (
        "job-1",
        "waiting",
        {"from": "starter"},
    )

    # The same key again: the task answers 409 and, without acceptedStatusCodes, fails.
    second = api.started()
    answer = api.fired(second, "go")
    assert answer["attributes"]["answer"]["status_code"] == 409
    assert answer["attributes"]["answer"]["data"]["errorCode"] == "Instance:KeyExists"
    assert Instance.objects.filter(workflow_key="worker").count() == 1
    row = InstanceTask.objects.filter(instance_id=second, task_key="start-worker").get()
    assert (row.status, row.error_code) == ("failed", "Task:Trigger:409")


def test_accepted_status_codes_accept_the_duplicate_start(operator_client):
    publish(
        trigger_task("start-worker", "11", flow="worker", key="job-1",
                     acceptedStatusCodes=["409"]),
        starter("start-worker"),
    )  # fmt: skip
    api = WorkflowApi(operator_client, "starter")
    api.fired(api.started(), "go")
    second = api.started()
    api.fired(second, "go")
    row = InstanceTask.objects.filter(instance_id=second, task_key="start-worker").get()
    assert (row.status, row.error_code) == ("succeeded", "")


def test_a_direct_trigger_task_runs_a_transition_on_another_instance(operator_client):
    publish(
        trigger_task("finish-worker", "12", flow="worker", transitionName="finish", sync=True),
        workflow(
            [
                state(
                    "begin",
                    1,
                    [
                        transition(
                            "go",
                            "sent",
                            onExecutionTasks=[
                                ref(
                                    "finish-worker",
                                    "def input_handler(task, context):\n"
                                    "    task.instance_id = context.instance.data['target']\n"
                                    "    return ScriptResponse(data={'by': 'trigger'})\n\n"
                                    "def output_handler(context):\n"
                                    "    return {'answer': context.body}\n",
                                )
                            ],
                        )
                    ],
                ),
                state("sent", 2),
            ],
            key="trigger",
        ),
    )
    target = WorkflowApi(operator_client, "worker").started()
    api = WorkflowApi(operator_client, "trigger")
    answer = api.fired(api.started(), "go", {"target": target})
    assert answer["attributes"]["answer"]["data"]["state"] == "done"
    finished = Instance.objects.get(pk=target)
    assert (finished.current_state, finished.status, finished.data) == (
        "done",
        "C",
        {"by": "trigger"},
    )


def test_a_child_updates_its_waiting_parent_as_data_only(operator_client):
    # The child's task sends the parent's updateData: step 21 persists it on the parent,
    # which stays waiting (no automatic transition runs).
    child = workflow(
        [
            state(
                "c-begin",
                1,
                [
                    transition(
                        "report",
                        "c-begin",
                        onExecutionTasks=[
                            ref(
                                "update-parent",
                                "def input_handler(task, context):\n"
                                "    task.instance_id = context.instance.data['parent']\n"
                                "    return ScriptResponse(data={'progress': 50})\n",
                            )
                        ],
                    ),
                    transition("c-end", "c-done"),
                ],
            ),
            state("c-done", 3, subType=1),
        ],
        key="reporter",
    )
    child["attributes"]["type"] = "S"
    subflow = {
        "type": "S",
        "process": {"key": "reporter", "domain": "core", "version": "1.0.0", "flow": "sys-flows"},
        "mapping": script("def output_handler(context):\n    return {'childDone': True}\n"),
    }
    parent = workflow(
        [
            state("p-begin", 1, [transition("p-go", "p-wait", 1, triggerKind=10)]),
            state("p-wait", 4, [transition("p-end", "p-done", 1, triggerKind=10)], subFlow=subflow),
            state("p-done", 3, subType=1),
        ],
        key="overseer",
        updateData={
            "key": "progress",
            "target": "$self",
            "triggerType": 0,
            "versionStrategy": "Patch",
            "labels": [{"label": "Progress", "language": "en"}],
        },
    )
    publish(
        trigger_task("update-parent", "12", flow="overseer", transitionName="progress", sync=True),
        child,
        parent,
    )
    parent_id = WorkflowApi(operator_client, "overseer").started()
    kid = Instance.objects.get(parent_correlation__parent__pk=parent_id)
    WorkflowApi(operator_client, "reporter").fired(str(kid.pk), "report", {"parent": parent_id})
    top = Instance.objects.get(pk=parent_id)
    assert (top.current_state, top.status, top.data) == ("p-wait", "B", {"progress": 50})

    WorkflowApi(operator_client, "reporter").fired(str(kid.pk), "c-end")
    top = Instance.objects.get(pk=parent_id)
    assert (top.current_state, top.status) == ("p-done", "C")
    assert top.data == {"progress": 50, "childDone": True}


def test_a_subprocess_task_starts_a_child_fire_and_forget(operator_client):
    publish(
        trigger_task("spawn", "14", flow="worker", body={"spawned": True}),
        starter("spawn"),
    )
    api = WorkflowApi(operator_client, "starter")
    parent_id = api.started()
    answer = api.fired(parent_id, "go")
    # The parent did not wait: it is Active in `started`, the child not yet run.
    assert answer["status"] == "A"
    assert answer["attributes"]["answer"]["status_code"] == 202
    child = Instance.objects.get(workflow_key="worker")
    correlation = Correlation.objects.get(child=child)
    assert (correlation.type, correlation.status, str(correlation.parent_id)) == (
        "P",
        "active",
        parent_id,
    )
    assert correlation.parent_state == "begin"
    (listed,) = api.state(parent_id)["activeCorrelations"]
    assert (listed["subFlowType"], listed["subFlowInstanceId"], listed["isCompleted"]) == (
        "SubProcess",
        str(child.pk),
        False,
    )
    jobs_run_due()
    child = Instance.objects.get(pk=child.pk)
    assert (child.current_state, child.status, child.data) == ("waiting", "A", {"spawned": True})
    etag = api.function(parent_id, "state")["ETag"]
    WorkflowApi(operator_client, "worker").fired(str(child.pk), "finish")
    assert api.function(parent_id, "state", headers={"If-None-Match": etag}).status_code == 200
    assert Correlation.objects.get(pk=correlation.pk).status == "completed"
    assert api.state(parent_id)["activeCorrelations"] == []
    top = Instance.objects.get(pk=parent_id)
    assert (top.current_state, top.status) == ("started", "A")


def test_a_trigger_tasks_headers_reach_the_target_run_without_credentials(operator_client):
    # The target's rule passes only when the task's X-Source header arrived and its
    # Authorization header did not.
    rule = script(
        "def handler(context):\n"
        "    return context.headers.get('x-source') == 'trigger' and "
        "'authorization' not in context.headers\n"
    )
    gate = workflow(
        [
            state("waiting", 1, [transition("check", "checked")]),
            state("checked", 2, [transition("pass", "passed", 1, rule=rule)]),
            state("passed", 3, subType=1),
        ],
        key="gate",
    )
    caller = workflow(
        [
            state(
                "begin",
                1,
                [
                    transition(
                        "go",
                        "sent",
                        onExecutionTasks=[
                            ref(
                                "check-gate",
                                "def input_handler(task, context):\n"
                                "    task.instance_id = context.instance.data['target']\n"
                                "    return ScriptResponse()\n",
                            )
                        ],
                    )
                ],
            ),
            state("sent", 2),
        ],
        key="caller",
    )
    publish(
        trigger_task(
            "check-gate",
            "12",
            flow="gate",
            transitionName="check",
            sync=True,
            headers={"X-Source": "trigger", "Authorization": "Token leaked"},
        ),
        gate,
        caller,
    )
    target = WorkflowApi(operator_client, "gate").started()
    api = WorkflowApi(operator_client, "caller")
    api.fired(api.started(), "go", {"target": target})
    assert Instance.objects.get(pk=target).current_state == "passed"
