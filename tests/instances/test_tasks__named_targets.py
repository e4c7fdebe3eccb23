"""DaprService (3) and DaprHttpEndpoint (1) end to end over the API on PostgreSQL: the task names
a service or endpoint of settings (`VNEXT["SERVICES"]`, `["HTTP_ENDPOINTS"]`), which holds its
URL and credentials; the call goes through the egress policy to a local echo peer. Asserted: the
instance data the output handler made from the answer, the task journal row, a 503 matched by
the error boundary's `Task:Http:503` rule (Rollback), a name settings lack refused at publish
with its pointer, and the refusal of the same call when the egress policy does not allow it."""

from __future__ import annotations

from typing import Any

import pytest

from instances.models import Incident, Instance, InstanceTask
from tests.instances.target_peers import (
    calls_workflow,
    echo_server,
    publish,
    run_call,
    task_component,
)

pytestmark = pytest.mark.django_db

SERVICE_MAPPING = """
def input_handler(task, context):
    task.method_name = task.method_name + "/" + context.instance.data["customer"]
    task.headers["X-Test"] = "mapped"
    return ScriptResponse(data={"customer": context.instance.data["customer"]})

def output_handler(context):
    return {"answer": context.body["data"], "status": context.body["status_code"],
            "ok": context.body["is_success"]}
"""


SEEN = """
def output_handler(context):
    return {"seen": context.body["status_code"]}
"""


def use_targets(settings: Any, **targets: Any) -> None:
    settings.VNEXT = {**settings.VNEXT, **targets}


def service(base: str) -> dict[str, Any]:
    return {
        "customer-api": {
            "url": f"{base}/api",
            "headers": {"Authorization": "Bearer from-settings"},
            "timeout": 5,
        }
    }


def test_a_dapr_service_task_calls_the_named_service_with_its_settings_credentials(
    operator_client: Any, settings: Any
):
    with echo_server() as base:
        use_targets(settings, SERVICES=service(base))
        publish(
            task_component(
                "profile",
                "3",
                {
                    "appId": "customer-api",
                    "methodName": "customers",
                    "httpVerb": "PUT",
                    "queryString": "version=v1&include=profile",
                    # The definition's header cannot replace the service's credentials.
                    "headers": {"Authorization": "Bearer from-definition"},
                },
            ),
            calls_workflow("profile", SERVICE_MAPPING, "Task:Http:503"),
        )
        instance_id, response = run_call(operator_client, {"customer": "c-9"})

    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["status"] == "A", body
    assert body["attributes"] == {
        "customer": "c-9",
        "answer": {
            "method": "PUT",
            "path": "/api/customers/c-9",
            "query": {"version": "v1", "include": "profile"},
            "authorization": "Bearer from-settings",
            "x_test": "mapped",
            "body": {"customer": "c-9"},
        },
        "status": 200,
        "ok": True,
    }
    assert Instance.objects.get(pk=instance_id).current_state == "called"
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert (journal.task_key, journal.status, journal.error_code) == ("profile", "succeeded", "")
    assert journal.response is not None
    assert (journal.response["status_code"], journal.response["is_success"]) == (200, True)


def test_a_service_answering_503_is_matched_by_the_error_boundary(
    operator_client: Any, settings: Any
):
    with echo_server() as base:
        use_targets(settings, SERVICES=service(base))
        publish(
            task_component("profile", "3", {"appId": "customer-api", "methodName": "status/503"}),
            calls_workflow("profile", SEEN, "Task:Http:503"),
        )
        instance_id, response = run_call(operator_client, {"customer": "c-9"})

    assert response.status_code == 200, response.json()
    instance = Instance.objects.get(pk=instance_id)
    # The Task:Http:503 rule rolled back to give-up (an unmatched code would have aborted).
    assert (instance.status, instance.current_state) == ("A", "gave-up")
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert (journal.status, journal.error_code) == ("failed", "Task:Http:503")
    assert journal.response is not None
    assert (journal.response["status_code"], journal.response["is_success"]) == (503, False)
    assert journal.error_message == "HTTP POST answered 503"
    incident = Incident.objects.get(instance_id=instance_id)
    assert (incident.error_code, incident.boundary_action, incident.resolved) == (
        "Task:Http:503",
        "Rollback",
        True,
    )


def test_a_service_the_egress_policy_refuses_is_never_called(
    operator_client: Any, settings: Any, egress_refuses_loopback: None
):
    with echo_server() as base:
        use_targets(settings, SERVICES=service(base))
        publish(
            task_component("profile", "3", {"appId": "customer-api", "methodName": "x"}),
            calls_workflow("profile", "def output_handler(context):\n    return {}\n", "x"),
        )
        instance_id, response = run_call(operator_client, {"customer": "c-9"})
    assert response.json()["error"]["errorCode"] == "Task:EgressRefused"
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert (journal.status, journal.error_code) == ("failed", "Task:EgressRefused")


ENDPOINT_MAPPING = """
def output_handler(context):
    return {"partner": context.body["data"], "status": context.body["status_code"]}
"""


def test_a_dapr_http_endpoint_task_calls_the_named_endpoint(operator_client: Any, settings: Any):
    with echo_server() as base:
        use_targets(
            settings,
            HTTP_ENDPOINTS={"partner": {"url": base, "headers": {"Authorization": "Basic cGFy"}}},
        )
        publish(
            task_component(
                "notify-partner",
                "1",
                {
                    "endpointName": "partner",
                    "path": "/v2/orders",
                    "method": "POST",
                    "body": {"order": 7},
                },
            ),
            calls_workflow("notify-partner", ENDPOINT_MAPPING, "Task:Http:503"),
        )
        instance_id, response = run_call(operator_client, {"customer": "c-9"})

    assert response.status_code == 200, response.json()
    assert response.json()["attributes"] == {
        "customer": "c-9",
        "partner": {
            "method": "POST",
            "path": "/v2/orders",
            "query": {},
            "authorization": "Basic cGFy",
            "x_test": None,
            "body": {"order": 7},
        },
        "status": 200,
    }
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert (journal.task_key, journal.status) == ("notify-partner", "succeeded")


def test_an_endpoint_answering_503_is_matched_by_the_error_boundary(
    operator_client: Any, settings: Any
):
    with echo_server() as base:
        use_targets(settings, HTTP_ENDPOINTS={"partner": {"url": base}})
        publish(
            task_component(
                "notify-partner",
                "1",
                {"endpointName": "partner", "path": "status/503", "method": "GET"},
            ),
            calls_workflow("notify-partner", ENDPOINT_MAPPING, "Task:Http:503"),
        )
        instance_id, response = run_call(operator_client, {"customer": "c-9"})

    assert response.status_code == 200, response.json()
    instance = Instance.objects.get(pk=instance_id)
    assert (instance.status, instance.current_state) == ("A", "gave-up")
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert (journal.status, journal.error_code) == ("failed", "Task:Http:503")


@pytest.mark.parametrize(
    ("task_type", "config", "pointer", "message", "setting"),
    [
        pytest.param(
            "3",
            {"appId": "billing", "methodName": "x"},
            "/attributes/config/appId",
            "the service 'billing' is not configured: add it to VNEXT['SERVICES'] "
            "(configured: customer-api)",
            "SERVICES",
            id="service",
        ),
        pytest.param(
            "1",
            {"endpointName": "billing", "path": "/", "method": "GET"},
            "/attributes/config/endpointName",
            "the HTTP endpoint 'billing' is not configured: add it to VNEXT['HTTP_ENDPOINTS'] "
            "(configured: none)",
            "HTTP_ENDPOINTS",
            id="endpoint",
        ),
    ],
)
def test_a_task_naming_an_unconfigured_target_is_refused_at_publish(
    operator_client: Any,
    settings: Any,
    task_type: str,
    config: dict[str, Any],
    pointer: str,
    message: str,
    setting: str,
):
    use_targets(settings, SERVICES=service("https://svc.example"), HTTP_ENDPOINTS={})
    document = task_component("unknown-target", task_type, config)
    response = operator_client.post("/api/v1/definitions/publish", document, format="json")
    assert response.status_code == 400, response.json()
    [error] = response.json()["errors"]
    assert error["pointer"] == pointer
    assert error["message"].startswith(message), error["message"]
    # Once settings name it, the same document publishes.
    use_targets(settings, **{setting: {"billing": {"url": "https://billing.example"}}})
    response = operator_client.post("/api/v1/definitions/publish", document, format="json")
    assert response.status_code < 300, response.json()
