"""Definitions API (API.md section 4): publish, read, list; every error is a clear RFC 7807 body."""

from __future__ import annotations

import copy

import pytest
from rest_framework.test import APIClient

from workflows.models import Component

pytestmark = pytest.mark.django_db
PUBLISH = "/api/v1/definitions/publish"


@pytest.fixture
def schema_doc(corpus_doc):
    return corpus_doc("Schemas/payload-modes/payload-modes-input.json")


@pytest.fixture
def workflow_doc(corpus_doc):
    return corpus_doc("Workflows/payload-modes/payload-modes.json")


def test_publish_then_read_back(operator_client, schema_doc):
    response = operator_client.post(PUBLISH, schema_doc, format="json")
    assert response.status_code == 200
    assert response.json() == {
        "kind": "schema",
        "domain": "core",
        "key": "payload-modes-input",
        "version": "1.0.0",
        "status": "published",
        "contentHash": Component.objects.get().content_hash,
    }
    read = operator_client.get("/api/v1/definitions/schema/core/payload-modes-input")
    assert read.status_code == 200
    assert read.json() == schema_doc
    assert read["ETag"] == f'"{Component.objects.get().content_hash}"'


def test_publishing_the_same_content_again_is_200_unchanged(operator_client, schema_doc):
    operator_client.post(PUBLISH, schema_doc, format="json")
    again = operator_client.post(PUBLISH, schema_doc, format="json")
    assert again.status_code == 200
    assert again.json()["status"] == "unchanged"
    assert Component.objects.count() == 1


def test_other_content_under_the_same_version_is_409(operator_client, schema_doc):
    operator_client.post(PUBLISH, schema_doc, format="json")
    changed = {**copy.deepcopy(schema_doc), "tags": ["other"]}
    response = operator_client.post(PUBLISH, changed, format="json")
    assert response.status_code == 409
    body = response.json()
    assert body["errorCode"] == "Instance:100002"
    assert body["status"] == 409
    assert "immutable" in body["detail"]


def test_invalid_definition_is_400_with_every_pointer(operator_client, schema_doc, workflow_doc):
    operator_client.post(PUBLISH, schema_doc, format="json")
    workflow_doc["version"] = "1.0"
    workflow_doc["attributes"]["states"][0]["stateType"] = 2
    workflow_doc["attributes"]["states"][1]["transitions"][0]["target"] = "ghost"
    response = operator_client.post(PUBLISH, workflow_doc, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["errorCode"] == "App:900006"
    pointers = {error["pointer"] for error in body["errors"]}
    assert pointers >= {
        "/version",
        "/attributes/states",
        "/attributes/startTransition/target",
        "/attributes/states/1/transitions/0/target",
    }
    assert all(error["message"] for error in body["errors"])
    assert Component.objects.filter(kind="workflow").count() == 0


def test_malformed_json_is_400(operator_client):
    response = operator_client.post(PUBLISH, "{not json", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["errorCode"] == "App:900002"


def test_a_non_component_body_is_400(operator_client):
    response = operator_client.post(PUBLISH, {"hello": "world"}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["pointer"] == ""


def test_an_array_publishes_all_or_nothing(operator_client, schema_doc, workflow_doc):
    broken = copy.deepcopy(workflow_doc)
    broken["key"] = "payload-modes-broken"
    broken["attributes"]["states"][1]["transitions"][0]["target"] = "ghost"
    response = operator_client.post(PUBLISH, [schema_doc, workflow_doc, broken], format="json")
    assert response.status_code == 400
    assert [e["pointer"] for e in response.json()["errors"]] == [
        "/2/attributes/states/1/transitions/0/target"
    ]
    assert Component.objects.count() == 0

    response = operator_client.post(PUBLISH, [schema_doc, workflow_doc], format="json")
    assert response.status_code == 200
    assert [item["status"] for item in response.json()["items"]] == ["published", "published"]
    assert Component.objects.count() == 2


def test_read_a_specific_version_and_list(operator_client, schema_doc):
    for version in ["1.0.0", "1.1.0"]:
        operator_client.post(PUBLISH, {**schema_doc, "version": version}, format="json")
    old = operator_client.get(
        "/api/v1/definitions/schema/core/payload-modes-input", {"version": "1.0.0"}
    )
    assert old.json()["version"] == "1.0.0"
    listing = operator_client.get("/api/v1/definitions/schema/core").json()
    assert listing["items"][0]["key"] == "payload-modes-input"
    assert listing["items"][0]["latest"] == "1.1.0"
    assert [v["version"] for v in listing["items"][0]["versions"]] == ["1.1.0", "1.0.0"]


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/api/v1/definitions/workflow/core/ghost", "Component:100404"),
        ("/api/v1/definitions/workflow/core/ghost?version=1.0.0", "Component:100404"),
        ("/api/v1/definitions/gizmo/core/ghost", "Component:100404"),
        ("/api/v1/definitions/gizmo/core", "Component:100404"),
    ],
)
def test_unknown_components_and_kinds_are_404(operator_client, path, code):
    response = operator_client.get(path)
    assert response.status_code == 404
    assert response.json()["errorCode"] == code


def test_anonymous_callers_are_refused(db, schema_doc):
    client = APIClient()
    assert client.post(PUBLISH, schema_doc, format="json").status_code == 401
    response = client.get("/api/v1/definitions/schema/core")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert response.json()["errorCode"] == "App:900001"


def test_publishing_needs_the_add_component_permission(plain_client, schema_doc):
    response = plain_client.post(PUBLISH, schema_doc, format="json")
    assert response.status_code == 403
    assert response.json()["errorCode"] == "Authorization:110001"
    assert Component.objects.count() == 0


def test_token_authentication_works(operator, schema_doc):
    from rest_framework.authtoken.models import Token

    token = Token.objects.create(user=operator)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    assert client.post(PUBLISH, schema_doc, format="json").status_code == 200
