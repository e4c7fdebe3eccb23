"""The master schema (vNext `flow/schema.md`): every write of instance data — the start's, a
transition's payload, a mapping's, a task's output — keeps to the workflow's master schema; a
write that would break it faults the instance with the pointers and writes nothing of itself.
An updateData (which holds no Busy) breaking it is refused with 422 instead. Its properties'
`roles` grant lists hide fields like `x-roles`; the reference may be written nested."""

from __future__ import annotations

from typing import Any

import pytest

from instances.engine.visibility import shown_data, unreadable_paths
from instances.models import Incident, Instance
from tests.engine.builders import script, state, task_ref, transition, workflow
from tests.instances.workflows import publish
from workflows.services import component_publish

pytestmark = pytest.mark.django_db
BASE = "/api/v1/core/workflows/mastered/instances"
MASTER = {
    "key": "mastered-master",
    "domain": "core",
    "version": "1.0.0",
    "flow": "sys-schemas",
    "flowVersion": "1.0.0",
    "tags": ["test"],
    "attributes": {
        "type": "schema",
        "schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "required": ["customerId"],
            "properties": {
                "customerId": {"type": "string"},
                "amount": {"type": "number", "maximum": 1000},
                "note": {"type": "string"},
            },
        },
    },
}
REFERENCE = {"key": "mastered-master", "domain": "core", "version": "1.0.0", "flow": "sys-schemas"}


def mastered(reference: dict[str, Any] | None = None) -> dict[str, Any]:
    document = workflow(
        [
            state(
                "open",
                1,
                [
                    transition("set", "open"),
                    transition(
                        "double",
                        "open",
                        mapping=script(
                            "def handler(context):\n"
                            "    return {'amount': context.instance.data['amount'] * 2}\n"
                        ),
                    ),
                    transition("tag", "open", onExecutionTasks=[task_ref({"note": 42})]),
                ],
            ),
        ],
        key="mastered",
        schema=reference or REFERENCE,
        updateData={
            "key": "update-data",
            "target": "$self",
            "triggerType": 0,
            "versionStrategy": "Patch",
            "labels": [{"label": "x", "language": "en"}],
        },
    )
    return document


@pytest.fixture
def published() -> None:
    component_publish(document=MASTER)
    publish(mastered())


def fire(client: Any, instance_id: str, key: str, body: Any) -> Any:
    url = f"{BASE}/{instance_id}/transitions/{key}?sync=true"
    return client.patch(url, {"attributes": body}, format="json")


def started(client: Any, body: dict[str, Any]) -> Any:
    return client.post(f"{BASE}/start?sync=true", {"attributes": body}, format="json")


def test_a_start_breaking_the_master_schema_faults_the_instance_with_the_pointer(
    operator_client, published
):
    answer = started(operator_client, {"amount": 5})
    assert answer.status_code == 200, answer.json()
    body = answer.json()
    assert body["status"] == "F"
    assert body["error"]["errorCode"] == "Instance:SchemaViolation"
    assert "/customerId: is required" in body["error"]["detail"]
    instance = Instance.objects.get(pk=body["id"])
    assert (instance.status, instance.data) == ("F", {})
    incident = Incident.objects.get(instance=instance)
    assert incident.error_code == "Instance:SchemaViolation"
    assert "/customerId" in incident.message


@pytest.mark.parametrize(
    ("key", "payload", "pointer"),
    [
        ("set", {"amount": "a lot"}, "/amount"),  # a transition's payload
        ("double", {}, "/amount"),  # a mapping: 600 * 2 > 1000
        ("tag", {}, "/note"),  # a task's output
    ],
    ids=["payload", "mapping", "task-output"],
)
def test_a_write_breaking_the_master_schema_faults_and_writes_nothing(
    operator_client, published, key, payload, pointer
):
    created = started(operator_client, {"customerId": "C-1", "amount": 600})
    instance_id = created.json()["id"]
    assert created.json()["status"] == "A", created.json()
    answer = fire(operator_client, instance_id, key, payload)
    assert answer.status_code == 200, answer.json()
    assert answer.json()["error"]["errorCode"] == "Instance:SchemaViolation"
    assert pointer in answer.json()["error"]["detail"]
    instance = Instance.objects.get(pk=instance_id)
    assert instance.status == "F"
    assert instance.data == {"customerId": "C-1", "amount": 600}


def test_writes_that_keep_to_the_master_schema_apply(operator_client, published):
    created = started(operator_client, {"customerId": "C-1", "amount": 100})
    instance_id = created.json()["id"]
    assert fire(operator_client, instance_id, "double", {}).json()["status"] == "A"
    assert fire(operator_client, instance_id, "set", {"note": "fine"}).json()["status"] == "A"
    instance = Instance.objects.get(pk=instance_id)
    assert instance.data == {"customerId": "C-1", "amount": 200, "note": "fine"}


def test_an_update_data_breaking_the_master_schema_is_refused_and_changes_nothing(
    operator_client, published
):
    created = started(operator_client, {"customerId": "C-1"})
    instance_id = created.json()["id"]
    answer = fire(operator_client, instance_id, "update-data", {"amount": 5000})
    assert answer.status_code == 422, answer.json()
    assert answer.json()["errorCode"] == "Instance:SchemaViolation"
    assert [error["pointer"] for error in answer.json()["errors"]] == ["/amount"]
    instance = Instance.objects.get(pk=instance_id)
    assert (instance.status, instance.data) == ("A", {"customerId": "C-1"})


def test_a_nested_schema_reference_publishes_and_is_enforced(operator_client):
    component_publish(document=MASTER)
    publish(mastered({"schema": REFERENCE}))
    assert started(operator_client, {"amount": 1}).json()["status"] == "F"
    assert started(operator_client, {"customerId": "C-2"}).json()["status"] == "A"


def test_a_properties_roles_grant_list_hides_it_like_x_roles():
    schema = {
        "type": "object",
        "properties": {
            "amount": {"type": "number", "roles": [{"role": "maker", "grant": "allow"}]},
            "notes": {"type": "string", "x-roles": [{"role": "maker", "grant": "allow"}]},
            "status": {"type": "string"},
        },
    }
    data = {"amount": 5, "notes": "n", "status": "open"}
    assert shown_data(schema, data, frozenset({"maker"})) == data
    assert shown_data(schema, data, frozenset({"viewer"})) == {"status": "open"}
    assert unreadable_paths(schema, frozenset({"viewer"})) == {("amount",), ("notes",)}
