"""Every error body keeps its RFC 7807 fields and carries vNext's `error` block too
(`{code, message, validationErrors?: [{members, message}]}`, SCENARIOS 4.3): a schema failure,
a filter error, a 404 and a 409, and the OpenAPI document says so. A query parameter's error is
titled as one, and an accepted (202) request says where to poll (`Location`)."""

from __future__ import annotations

from typing import Any

import pytest

from instances.models import Instance
from tests.engine.builders import transition
from tests.instances.test_api__instances import BASE, SCHEMA, SCHEMA_REF, start
from tests.instances.workflows import ping_pong, publish
from workflows.services import component_publish

pytestmark = pytest.mark.django_db

RFC_7807 = {"type", "title", "status", "detail", "errorCode"}


@pytest.fixture
def flow(db: None) -> None:
    """ping-pong, whose `order` transition validates its body against a schema."""
    component_publish(document=SCHEMA)
    document = ping_pong()
    document["attributes"]["states"][1]["transitions"].append(
        transition("order", "ping", schema=SCHEMA_REF)
    )
    publish(document)


def error_body(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert set(body) >= RFC_7807 | {"error"}
    assert (body["status"], body["errorCode"]) == (status, code)
    assert body["error"]["code"] == code
    return body


def test_a_schema_failure_carries_validation_errors_with_members(operator_client, flow):
    created = start(operator_client).json()
    url = f"{BASE}/{created['id']}/transitions"
    operator_client.patch(f"{url}/to-pong?sync=true", {}, format="json")

    response = operator_client.patch(
        f"{url}/order?sync=true",
        {"attributes": {"amount": "ten", "customer": {}, "rogue": 1}},
        format="json",
    )

    body = error_body(response, 400, "App:900002")
    assert body["title"] == "Request body is invalid"
    assert body["error"]["message"] == f"schema validation failed: {body['detail']}"
    by_member = {
        tuple(entry["members"]): entry["message"] for entry in body["error"]["validationErrors"]
    }
    assert set(by_member) == {("amount",), ("customer.id",), ("rogue",)}
    assert by_member[("customer.id",)] == "is required"
    assert by_member[("rogue",)] == "is not allowed"
    # The RFC 7807 pointers stay, one per validation error.
    assert {e["pointer"] for e in body["errors"]} == {
        "/attributes/amount",
        "/attributes/customer/id",
        "/attributes/rogue",
    }


def test_a_missing_required_field_at_the_root(operator_client, flow):
    created = start(operator_client).json()
    url = f"{BASE}/{created['id']}/transitions"
    operator_client.patch(f"{url}/to-pong?sync=true", {}, format="json")

    body = error_body(
        operator_client.patch(f"{url}/order?sync=true", {"amount": 5}, format="json"),
        400,
        "App:900002",
    )

    assert body["error"]["validationErrors"] == [
        {"members": ["customer"], "message": "is required"}
    ]


def test_an_envelope_error_names_the_envelope_field(operator_client, flow):
    body = error_body(start(operator_client, {"key": "x" * 101, "tags": "no"}), 400, "App:900002")
    assert body["error"]["message"] == body["detail"]  # no schema involved
    assert sorted(entry["members"][0] for entry in body["error"]["validationErrors"]) == [
        "key",
        "tags",
    ]


def test_a_filter_error(operator_client, flow):
    body = error_body(
        operator_client.get(BASE, {"filter": '{"status": {"regex": "A"}}'}),
        400,
        "unsupported_operator",
    )
    assert body["error"]["message"] == body["detail"] == "'regex' operator is not supported"
    assert "supportedOperators" in body["error"]
    column = error_body(operator_client.get(BASE, {"filter": "nope eq 'x'"}), 400, "invalid_column")
    assert "validColumns" in column["error"]


def test_a_404(operator_client, flow):
    body = error_body(
        operator_client.get(f"{BASE}/00000000-0000-0000-0000-000000000001"),
        404,
        "Instance:100017",
    )
    assert body["error"] == {"code": "Instance:100017", "message": body["detail"]}


def test_a_409(operator_client, flow):
    created = start(operator_client).json()
    Instance.objects.filter(pk=created["id"]).update(status="B", busy_owner="someone")

    body = error_body(
        operator_client.patch(f"{BASE}/{created['id']}/transitions/to-pong", {}, format="json"),
        409,
        "Instance:100031",
    )
    assert body["error"] == {"code": "Instance:100031", "message": body["detail"]}
    assert body["instanceId"] == created["id"]


def test_a_query_parameter_error_is_not_titled_as_a_body_error(operator_client, flow):
    created = start(operator_client).json()
    for response in (
        operator_client.post(f"{BASE}/start?sync=maybe", {}, format="json"),
        operator_client.get(f"{BASE}/{created['id']}/functions/state?wait=soon"),
        operator_client.get(f"{BASE}?pageSize=1&pageSize=2"),
    ):
        body = error_body(response, 400, "App:900002")
        assert body["title"] == "Query parameter is invalid"
        assert body["error"]["validationErrors"][0]["members"][0] in ("sync", "wait", "pageSize")


def test_an_accepted_request_says_where_to_poll(operator_client, flow):
    accepted = start(operator_client, {"n": 1}, query="")
    assert accepted.status_code == 202
    instance_id = accepted.json()["id"]
    location = accepted["Location"]
    assert location == f"http://testserver{BASE}/{instance_id}"
    assert operator_client.get(location).json()["id"] == instance_id

    created = start(operator_client).json()
    transition = operator_client.patch(
        f"{BASE}/{created['id']}/transitions/to-pong", {}, format="json"
    )
    assert transition.status_code == 202
    assert transition["Location"] == f"http://testserver{BASE}/{created['id']}"


def test_the_openapi_document_describes_the_error_block(operator_client):
    document = operator_client.get("/api/schema/", {"format": "json"}).json()
    schemas = document["components"]["schemas"]

    problem = schemas["Problem"]
    assert problem["properties"]["error"] == {"$ref": "#/components/schemas/ProblemError"}
    assert "error" in problem["required"]
    block = schemas["ProblemError"]["properties"]
    assert {"code", "message", "validationErrors", "supportedOperators", "validColumns"} <= set(
        block
    )
    entry = schemas["ValidationEntry"]["properties"]
    assert entry["members"]["type"] == "array"
    start_400 = document["paths"]["/api/v1/{domain}/workflows/{workflow}/instances/start"]["post"][
        "responses"
    ]["400"]["content"]["application/problem+json"]["schema"]
    assert start_400 == {"$ref": "#/components/schemas/Problem"}
    accepted = document["paths"]["/api/v1/{domain}/workflows/{workflow}/instances/start"]["post"][
        "responses"
    ]["202"]
    assert "Location" in accepted["headers"]
    links = schemas["Links"]["properties"]
    assert links["next"] == {"type": "string", "description": 'the next page; "" on the last'}
