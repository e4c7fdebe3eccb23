"""Python Task (type 23) over HTTP on the database: `main(input)` of the task's code runs in the
script pool, the input handler's value as `input`; its result is the task's data (merged into
the instance data, journalled); `main` raising fails with `Task:Python:<taskKey>:500`, which an
error boundary matches; the sandbox's limits hold (no `os` at publish, an allocation refused at
run time, the script timeout as `Script:Timeout`)."""

from __future__ import annotations

import base64
from typing import Any
from unittest import mock

import pytest

from instances.models import Incident, Instance, InstanceTask
from instances.wiring import engine
from tests.engine.builders import script, state, task_component, transition, workflow
from tests.instances.answers import fault
from workflows.models import Component
from workflows.services import component_publish

pytestmark = pytest.mark.django_db
PUBLISH = "/api/v1/definitions/publish"
BASE = "/api/v1/core/workflows/scoring/instances"

MAIN = """
import json

def main(input):
    if input["amount"] < 0:
        raise ValueError("amount must not be negative")
    if input["amount"] == 0:
        return "x" * (10 ** 9)
    if input["amount"] == 1:
        while True:
            pass
    return {"score": input["amount"] * 2, "echo": json.dumps(input, sort_keys=True)}
"""
INPUT = """
def input_handler(task, context):
    return {"amount": context.instance.data["amount"], "who": context.instance.data["who"]}
"""
BOUNDARY = {
    "onError": [
        {"action": 3, "errorCodes": ["Task:Python:*"], "priority": 1},
        {"action": 0, "errorCodes": ["Script:Timeout"], "priority": 2},
    ]
}


def python_task(code: str, key: str = "score") -> dict[str, Any]:
    encoded = base64.b64encode(code.encode()).decode()
    return task_component(key, "23", {"location": "./src/Score.py", "code": encoded})


def scoring_workflow() -> dict[str, Any]:
    reference = {
        "order": 1,
        "task": {"key": "score", "domain": "core", "version": "1.0.0", "flow": "sys-tasks"},
        "mapping": script(INPUT),
        "errorBoundary": BOUNDARY,
    }
    return workflow(
        [
            state("idle", 1, [transition("score", "scored", onExecutionTasks=[reference])]),
            state("scored", 2),
        ],
        key="scoring",
    )


@pytest.fixture
def published(operator_client: Any) -> None:
    response = operator_client.post(PUBLISH, [python_task(MAIN), scoring_workflow()], format="json")
    assert response.status_code == 200, response.json()


def run(client: Any, amount: int) -> tuple[str, Any]:
    created = client.post(
        f"{BASE}/start?sync=true", {"amount": amount, "who": "ayse"}, format="json"
    ).json()
    response = client.patch(
        f"{BASE}/{created['id']}/transitions/score?sync=true", {}, format="json"
    )
    return created["id"], response


def journal(instance_id: str) -> InstanceTask:
    (row,) = InstanceTask.objects.filter(instance_id=instance_id, task_key="score")
    return row


def test_main_result_becomes_the_instance_data_and_the_journalled_response(
    operator_client, published
):
    instance_id, response = run(operator_client, 21)
    assert response.status_code == 200, response.json()
    instance = Instance.objects.get(pk=instance_id)
    assert instance.current_state == "scored"
    assert instance.data == {
        "amount": 21,
        "who": "ayse",
        "score": 42,
        "echo": '{"amount": 21, "who": "ayse"}',
    }
    row = journal(instance_id)
    assert (row.status, row.error_code, row.phase) == ("succeeded", "", "onExecute")
    answer = row.response or {}
    assert (answer["is_success"], answer["status_code"]) == (True, 200)
    assert answer["data"] == {"score": 42, "echo": '{"amount": 21, "who": "ayse"}'}


def test_main_raising_fails_the_task_with_its_code_which_the_boundary_ignores(
    operator_client, published
):
    instance_id, response = run(operator_client, -5)
    assert response.status_code == 200, response.json()
    instance = Instance.objects.get(pk=instance_id)
    # The Ignore rule for Task:Python:* matched: the transition went on, no data from main.
    assert instance.current_state == "scored"
    assert "score" not in instance.data
    row = journal(instance_id)
    assert (row.status, row.error_code) == ("failed", "Task:Python:score:500")
    assert "amount must not be negative" in row.error_message
    assert not Incident.objects.filter(instance_id=instance_id).exists()


def test_a_huge_allocation_is_refused_by_the_sandbox_at_run_time(operator_client, published):
    instance_id, _ = run(operator_client, 0)
    row = journal(instance_id)
    assert (row.status, row.error_code) == ("failed", "Task:Python:score:500")
    assert "exceeds the sandbox limit" in row.error_message
    assert Instance.objects.get(pk=instance_id).current_state == "scored"


def test_main_past_the_script_timeout_faults_as_script_timeout_through_abort(
    operator_client, published, monkeypatch
):
    monkeypatch.setattr(engine().scripts, "timeout_seconds", 0.5)
    instance_id, response = run(operator_client, 1)
    error = fault(response)
    assert error["errorCode"] == "Script:Timeout"
    row = journal(instance_id)
    assert (row.status, row.error_code) == ("failed", "Script:Timeout")
    instance = Instance.objects.get(pk=instance_id)
    assert (instance.status, instance.current_state) == ("F", "idle")
    incident = Incident.objects.get(instance_id=instance_id)
    assert (incident.error_code, incident.boundary_action) == ("Script:Timeout", "Abort")


def test_publish_refuses_code_importing_os_or_without_main(operator_client):
    importing = python_task("import os\n\ndef main(input):\n    return os.getcwd()\n", "bad-os")
    response = operator_client.post(PUBLISH, importing, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["errorCode"] == "App:900006"
    ((pointer, message),) = [(e["pointer"], e["message"]) for e in body["errors"]]
    assert pointer == "/attributes/config/code"
    assert "module 'os' is not one scripts may import" in message

    no_main = python_task("def handler(input):\n    return 1\n", "no-main")
    response = operator_client.post(PUBLISH, no_main, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {
            "pointer": "/attributes/config/code",
            "message": "./src/Score.py: script must define main()",
        }
    ]
    # Code alone (B64, the default encoding) is checked as well.
    bare = task_component("bare", "23", {"code": base64.b64encode(b"x = 1\n").decode()})
    response = operator_client.post(PUBLISH, bare, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {
            "pointer": "/attributes/config/code",
            "message": "/attributes/config: script must define main()",
        }
    ]
    assert not Component.objects.filter(key__in=["bad-os", "no-main", "bare"]).exists()


def test_plain_text_code_runs_too(operator_client):
    nat = {
        "code": "def main(input):\n    return {'score': input['amount'] + 1}\n",
        "encoding": "NAT",
    }
    component_publish(document=task_component("score", "23", nat))
    component_publish(document=scoring_workflow())
    instance_id, response = run(operator_client, 3)
    assert response.status_code == 200, response.json()
    assert Instance.objects.get(pk=instance_id).data["score"] == 4
    assert journal(instance_id).status == "succeeded"


ITEM_MAPPING = """
def item_input_handler(task, context, item):
    return ScriptResponse(data={"amount": item.value, "who": "item"})
"""


def test_a_fan_out_runs_a_python_inner_task_per_item(operator_client, published):
    inner = {"key": "score", "domain": "core", "version": "1.0.0", "flow": "sys-tasks"}
    fan = task_component("fan", "21", {"itemsPath": "$.amounts", "task": inner})
    reference = {
        "order": 1,
        "task": {**inner, "key": "fan"},
        "mapping": script(ITEM_MAPPING),
    }
    flow = workflow(
        [
            state("ready", 1, [transition("go", "done", onExecutionTasks=[reference])]),
            state("done", 2),
        ],
        key="fanning",
    )
    response = operator_client.post(PUBLISH, [fan, flow], format="json")
    assert response.status_code == 200, response.json()
    base = "/api/v1/core/workflows/fanning/instances"
    created = operator_client.post(
        f"{base}/start?sync=true", {"amounts": [2, 5, -1]}, format="json"
    ).json()
    response = operator_client.patch(
        f"{base}/{created['id']}/transitions/go?sync=true", {}, format="json"
    )
    assert response.status_code == 200, response.json()
    data = Instance.objects.get(pk=created["id"]).data
    assert [r.get("data", {}).get("score") for r in data["fanOutResults"][:2]] == [4, 10]
    assert data["fanOutResultsSummary"]["succeeded"] == 2
    rows = InstanceTask.objects.filter(instance_id=created["id"], task_key__startswith="fan#")
    by_key = {row.task_key: (row.status, row.error_code) for row in rows}
    assert by_key == {
        "fan#0": ("succeeded", ""),
        "fan#1": ("succeeded", ""),
        "fan#2": ("failed", "Task:Python:score:500"),
    }


def test_an_import_of_os_is_refused_at_run_time_too(operator_client):
    # Stored without the publish check (as a row from an older runtime): the worker refuses it.
    code = "import os\n\ndef main(input):\n    return {'cwd': os.getcwd()}\n"
    with mock.patch("workflows.services.component_validate"):
        component_publish(document=python_task(code))
    component_publish(document=scoring_workflow())
    instance_id, _ = run(operator_client, 3)
    row = journal(instance_id)
    assert (row.status, row.error_code) == ("failed", "Task:Python:score:500")
    assert "module 'os' is not one scripts may import" in row.error_message
    assert "cwd" not in Instance.objects.get(pk=instance_id).data
