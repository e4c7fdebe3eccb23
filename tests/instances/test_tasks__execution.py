"""Task execution against real endpoints and the database: HTTP (httpx) success, failure and
timeout codes, mapping handlers, same-order concurrency, Get-instance(s) tasks, the journal. A
failed HTTP call is an answer its output handler sees; with no error boundary anywhere it is
journalled `failed` and the run goes on, under a task-level Abort boundary it faults."""

from __future__ import annotations

import json
import time
from typing import Any
from unittest import mock

import pytest

from instances.models import Incident, Instance, InstanceTask
from tests.engine.builders import state, transition, workflow
from tests.instances.answers import fault, fault_code
from tests.instances.http_server import http_server
from tests.instances.workflows import http_ref, http_task, publish
from workflows.models import DomainReach

pytestmark = pytest.mark.django_db
BASE = "/api/v1/core/workflows/calls/instances"


def calls_workflow(tasks: list[dict]) -> dict:
    return workflow(
        [
            state("idle", 1, [transition("call", "called", onExecutionTasks=tasks)]),
            state("called", 2),
        ],
        key="calls",
    )


def run_call(client: Any) -> tuple[str, Any]:
    created = client.post(f"{BASE}/start?sync=true", {"customer": "c-9"}, format="json").json()
    response = client.patch(f"{BASE}/{created['id']}/transitions/call?sync=true", {}, format="json")
    return created["id"], response


MAPPING = """
def input_handler(task, context):
    task.url = task.url + "?customer=" + context.instance.data["customer"]
    task.headers["X-Test"] = "mapped"
    return ScriptResponse(data={"customer": context.instance.data["customer"]})

def output_handler(context):
    return {"echo": context.body["data"], "httpStatus": context.body["status_code"]}
"""


def test_http_task_with_input_and_output_mapping(operator_client):
    with http_server() as base:
        publish(
            http_task("echo", f"{base}/echo", "POST"),
            calls_workflow([http_ref("echo", mapping=MAPPING)]),
        )
        instance_id, response = run_call(operator_client)
    assert response.status_code == 200, response.json()
    assert response.json()["attributes"] == {
        "customer": "c-9",
        "echo": {"method": "POST", "body": {"customer": "c-9"}, "header": "mapped"},
        "httpStatus": 200,
    }
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert (journal.task_key, journal.status, journal.phase) == ("echo", "succeeded", "onExecute")
    assert journal.response is not None
    assert journal.response["status_code"] == 200


SEEN = """
def output_handler(context):
    return {"seen": {"status": context.body["status_code"], "ok": context.body["is_success"]}}
"""

# A failed call: the path on the loopback server, the task's config, the code and the status
# its output handler sees (None: no answer came).
HTTP_FAILURES = [
    pytest.param("status/503", {}, "Task:Http:503", 503, id="answered-503"),
    pytest.param("slow?ms=3000", {"timeoutSeconds": 1}, "Task:Http:Timeout", None, id="timeout"),
]


def abort_on_error(reference: dict[str, Any]) -> dict[str, Any]:
    """`reference` with a task-level error boundary that aborts on any error."""
    return {**reference, "errorBoundary": {"onError": [{"action": 0}]}}


@pytest.mark.parametrize(("path", "config", "code", "status"), HTTP_FAILURES)
def test_a_failed_http_call_with_no_error_boundary_is_journalled_and_the_run_goes_on(
    operator_client, path, config, code, status
):
    with http_server() as base:
        publish(
            http_task("broken", f"{base}/{path}", **config),
            calls_workflow([http_ref("broken", mapping=SEEN)]),
        )
        instance_id, response = run_call(operator_client)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["status"], "error" in body) == ("A", False), body
    # The output handler ran on the failed call's answer.
    assert body["attributes"] == {"customer": "c-9", "seen": {"status": status, "ok": False}}
    row = Instance.objects.get(pk=instance_id)
    assert (row.status, row.current_state, row.busy_owner) == ("A", "called", "")
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert (journal.task_key, journal.status, journal.error_code) == ("broken", "failed", code)
    assert journal.response is not None
    assert (journal.response["status_code"], journal.response["is_success"]) == (status, False)
    assert not Incident.objects.filter(instance_id=instance_id).exists()
    history = operator_client.get(f"{BASE}/{instance_id}/transitions").json()["items"]
    assert (history[-1]["status"], history[-1]["errorCode"]) == ("completed", None)


@pytest.mark.parametrize(("path", "config", "code", "status"), HTTP_FAILURES)
def test_a_failed_http_call_under_a_task_abort_boundary_faults_with_its_code_and_an_incident(
    operator_client, path, config, code, status
):
    with http_server() as base:
        reference = abort_on_error(http_ref("broken", mapping=SEEN))
        publish(http_task("broken", f"{base}/{path}", **config), calls_workflow([reference]))
        instance_id, response = run_call(operator_client)
    assert fault_code(response) == code
    assert response.json()["id"] == instance_id
    row = Instance.objects.get(pk=instance_id)
    assert (row.status, row.current_state, row.busy_owner) == ("F", "idle", "")
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert (journal.status, journal.error_code) == ("failed", code)
    assert journal.response is not None
    assert journal.response["status_code"] == status
    incident = Incident.objects.get(instance_id=instance_id)
    assert (incident.error_code, incident.layer, incident.transition_key) == (
        code,
        "task",
        "call",
    )
    assert "Traceback" not in incident.message
    active = operator_client.get(f"{BASE}/{instance_id}/incidents/active").json()
    assert (active["errorCode"], active["boundaryAction"], active["boundaryLevel"]) == (
        code,
        "Abort",
        "Task",
    )
    state_body = operator_client.get(f"{BASE}/{instance_id}/functions/state").json()
    assert state_body["incident"]["hasActiveIncident"] is True
    history = operator_client.get(f"{BASE}/{instance_id}/transitions").json()["items"]
    assert (history[-1]["status"], history[-1]["errorCode"]) == ("faulted", code)


def test_accepted_status_codes_turn_an_error_into_success(operator_client):
    with http_server() as base:
        task = http_task("lenient", f"{base}/status/404", acceptedStatusCodes=["4xx"])
        publish(task, calls_workflow([http_ref("lenient")]))
        _, response = run_call(operator_client)
    assert response.status_code == 200


@pytest.mark.django_db(transaction=True)
def test_tasks_of_the_same_order_run_concurrently(operator_client):
    with http_server() as base:
        publish(
            http_task("slow-a", f"{base}/slow?ms=1200"),
            http_task("slow-b", f"{base}/slow?ms=1200"),
            calls_workflow([http_ref("slow-a", order=1), http_ref("slow-b", order=1)]),
        )
        started = time.monotonic()
        instance_id, response = run_call(operator_client)
        elapsed = time.monotonic() - started
    assert response.status_code == 200
    assert elapsed < 2.2  # two 1.2 s calls side by side, not one after the other
    assert InstanceTask.objects.filter(instance_id=instance_id, status="succeeded").count() == 2


GET_DATA = """
def input_handler(task, context):
    task.instance_id = context.instance.data["other"]
    return None

def output_handler(context):
    return {"otherData": context.body["data"]}
"""


def read_other(domain: str) -> dict[str, Any]:
    """A Get-instance-data task (13) reading instances of `calls` in `domain`."""
    return {
        "key": "read-other",
        "domain": "core",
        "version": "1.0.0",
        "flow": "sys-tasks",
        "flowVersion": "1.0.0",
        "tags": ["test"],
        "attributes": {"type": "13", "config": {"domain": domain, "flow": "calls"}},
    }


def test_get_instance_data_task_reads_another_instance(operator_client):
    publish(read_other("core"), calls_workflow([http_ref("read-other", mapping=GET_DATA)]))
    other = operator_client.post(
        f"{BASE}/start?sync=true", {"customer": "other-one"}, format="json"
    ).json()
    created = operator_client.post(
        f"{BASE}/start?sync=true", {"customer": "me", "other": other["id"]}, format="json"
    ).json()
    response = operator_client.patch(
        f"{BASE}/{created['id']}/transitions/call?sync=true", {}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert response.json()["attributes"]["otherData"] == {"customer": "other-one"}


def test_an_instance_data_task_may_not_read_another_domain(operator_client):
    publish(read_other("payments"), calls_workflow([http_ref("read-other", mapping=GET_DATA)]))
    other = operator_client.post(f"{BASE}/start?sync=true", {"customer": "x"}, format="json")
    created = operator_client.post(
        f"{BASE}/start?sync=true", {"customer": "me", "other": other.json()["id"]}, format="json"
    ).json()
    operator_client.patch(f"{BASE}/{created['id']}/transitions/call?sync=true", {}, format="json")
    (row,) = InstanceTask.objects.filter(instance_id=created["id"], task_key="read-other")
    assert (row.status, row.error_code) == ("failed", "Task:DomainDenied")


def test_a_domain_reach_lets_the_task_read_the_other_domain(operator_client):
    DomainReach.objects.create(domain="core", workflow="calls", target_domain="payments")
    publish(read_other("payments"), calls_workflow([http_ref("read-other", mapping=GET_DATA)]))
    created = operator_client.post(
        f"{BASE}/start?sync=true", {"customer": "me", "other": "p-1"}, format="json"
    ).json()
    operator_client.patch(f"{BASE}/{created['id']}/transitions/call?sync=true", {}, format="json")
    (row,) = InstanceTask.objects.filter(instance_id=created["id"], task_key="read-other")
    # Past the domain gate: the payments domain simply has no such instance.
    assert (row.status, row.error_code) == ("failed", "Task:Instance:404")


def test_unsupported_task_type_fails_clearly(operator_client):
    # A type without an executor is refused at publish (tests/workflows/
    # test_validation__task_types.py); one stored before that check still fails clearly.
    conversation = {
        "key": "llm-call",
        "domain": "core",
        "version": "1.0.0",
        "flow": "sys-tasks",
        "flowVersion": "1.0.0",
        "tags": ["test"],
        "attributes": {"type": "20", "config": {}},
    }
    with mock.patch("workflows.services.component_validate"):
        publish(conversation, calls_workflow([http_ref("llm-call")]))
    _, response = run_call(operator_client)
    # Not an HTTP answer: it faults the instance though no error boundary is defined.
    error = fault(response)
    assert error["errorCode"] == "Task:Unsupported"
    assert "task type 20" in error["detail"]


def on_entry_workflow(reference: dict[str, Any]) -> dict[str, Any]:
    """`idle --call--> called`, `called` running `reference` on entry."""
    return workflow(
        [
            state("idle", 1, [transition("call", "called")]),
            state("called", 2, onEntries=[reference]),
        ],
        key="calls",
    )


def test_a_failing_on_entry_http_task_with_no_boundary_lets_the_instance_enter_the_state(
    operator_client,
):
    with http_server() as base:
        publish(http_task("broken", f"{base}/status/500"), on_entry_workflow(http_ref("broken")))
        instance_id, response = run_call(operator_client)
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "A"
    row = Instance.objects.get(pk=instance_id)
    assert (row.current_state, row.status, row.data) == ("called", "A", {"customer": "c-9"})
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert (journal.task_key, journal.phase, journal.status, journal.error_code) == (
        "broken",
        "onEntry",
        "failed",
        "Task:Http:500",
    )
    incidents = operator_client.get(f"{BASE}/{instance_id}/incidents").json()
    assert (incidents["hasActiveIncident"], incidents["items"]) == (False, [])
    active = operator_client.get(f"{BASE}/{instance_id}/incidents/active")
    assert (active.status_code, active.json()["errorCode"]) == (404, "Instance:100037")


def test_a_failing_on_entry_task_leaves_the_instance_faulted_in_the_target_state(operator_client):
    with http_server() as base:
        reference = abort_on_error(http_ref("broken"))
        publish(http_task("broken", f"{base}/status/500"), on_entry_workflow(reference))
        instance_id, response = run_call(operator_client)
    assert fault_code(response) == "Task:Http:500"
    row = Instance.objects.get(pk=instance_id)
    assert (row.current_state, row.status, row.data) == ("called", "F", {"customer": "c-9"})
    incidents = operator_client.get(f"{BASE}/{instance_id}/incidents").json()
    assert incidents["hasActiveIncident"] is True
    assert [i["errorCode"] for i in incidents["items"]] == ["Task:Http:500"]
    active = operator_client.get(f"{BASE}/{instance_id}/incidents/active")
    assert (active.status_code, active.json()["state"]) == (200, "called")
    assert (active.json()["boundaryAction"], active.json()["boundaryLevel"]) == ("Abort", "Task")


def test_no_open_incident_is_a_404_with_its_code(operator_client):
    publish(calls_workflow([]))
    created = operator_client.post(f"{BASE}/start?sync=true", {}, format="json").json()
    response = operator_client.get(f"{BASE}/{created['id']}/incidents/active")
    assert (response.status_code, response.json()["errorCode"]) == (404, "Instance:100037")


def test_scripts_never_see_the_callers_credentials(operator_client):
    # A subflow mapping that hands every request header to the child as its data: the caller's
    # Authorization, Cookie and API key must not be among them (another user could read them).
    from instances.models import Instance
    from tests.engine.builders import script, state, transition, workflow
    from tests.instances.workflows import publish as publish_documents

    child = workflow([state("c", 1)], key="snooped")
    child["attributes"]["type"] = "S"
    subflow = {
        "type": "S",
        "process": {"key": "snooped", "domain": "core", "version": "1.0.0", "flow": "sys-flows"},
        "mapping": script(
            "def input_handler(context):\n"
            "    return ScriptResponse(data={'seen': dict(context.headers)})\n"
        ),
    }
    parent = workflow(
        [state("a", 1, [transition("go", "b")]), state("b", 4, subFlow=subflow)], key="snoop"
    )
    publish_documents(child, parent)
    base = "/api/v1/core/workflows/snoop/instances"
    instance_id = operator_client.post(f"{base}/start?sync=true", {}, format="json").json()["id"]
    answer = operator_client.patch(
        f"{base}/{instance_id}/transitions/go?sync=true",
        {},
        format="json",
        headers={
            "Authorization": "Token secret-token",
            "Cookie": "sessionid=secret",
            "X-Api-Key": "secret-key",
            "X-Trace": "kept",
        },
    )
    assert answer.status_code == 200, answer.json()
    seen = Instance.objects.get(workflow_key="snooped").data["seen"]
    assert seen["x-trace"] == "kept"
    assert not {"authorization", "cookie", "x-api-key"} & set(seen)
    assert "secret" not in json.dumps(seen)
