"""Under `/api/v1` nothing falls through to Django's HTML pages: a path no API route matches answers
404 `App:900004` and a known path called with a method it does not take answers 405 `App:900005`,
both as `application/problem+json` with the project's error body. Other paths keep Django's
behaviour."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

PROBLEM_JSON = "application/problem+json"
UNMATCHED = [
    "/api/v1",
    "/api/v1/",
    "/api/v1/nothing-here",
    "/api/v1/definitions",
    "/api/v1/definitions/publish/",
    "/api/v1/core/workflows",
    "/api/v1/core/workflows/flow",
    "/api/v1/core/workflows/flow/instances/some-id/unknown",
    "/api/v1/core/workflows/flow/instances/some-id/transitions/go/again",
    "/api/v1/core/workflows/flow/instances/some-id/functions/state/extra",
    "/api/v1/internal/core/instances/some-id/subflow-forward",
]
METHODS = ["get", "post", "put", "patch", "delete", "options"]
INSTANCE = "/api/v1/core/workflows/flow/instances"
WRONG_METHODS = [
    ("get", "/api/v1/definitions/publish", "POST, OPTIONS"),
    ("delete", "/api/v1/definitions/workflow/core/flow", "GET, HEAD, OPTIONS"),
    ("post", "/api/v1/definitions/workflow/core", "GET, HEAD, OPTIONS"),
    ("get", f"{INSTANCE}/start", "POST, OPTIONS"),
    ("put", f"{INSTANCE}/some-id", "GET, HEAD, OPTIONS"),
    ("post", f"{INSTANCE}/some-id/transitions/go", "PATCH, OPTIONS"),
    ("delete", f"{INSTANCE}/some-id/transitions", "GET, HEAD, OPTIONS"),
    ("patch", f"{INSTANCE}/some-id/functions/state", "GET, HEAD, OPTIONS"),
    ("post", f"{INSTANCE}/some-id/incidents/active", "GET, HEAD, OPTIONS"),
]


def assert_problem(response: Any, status: int, code: str, title: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == PROBLEM_JSON
    body = response.json()
    assert body == {
        "type": f"https://vnext.dev/errors/{code}",
        "title": title,
        "status": status,
        "detail": body["detail"],
        "errorCode": code,
        "error": {"code": code, "message": body["detail"]},  # vNext's own block
    }
    assert body["detail"]
    return body


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("path", UNMATCHED)
def test_an_unmatched_api_path_is_a_problem_404(operator_client: APIClient, path, method):
    response = getattr(operator_client, method)(path)
    body = assert_problem(response, 404, "App:900004", "Not found")
    assert body["detail"] == f"no API endpoint at {path}"
    assert "Allow" not in response


@pytest.mark.parametrize("path", UNMATCHED[:4])
def test_anonymous_callers_and_browsers_get_the_same_404(client: Client, path):
    assert_problem(client.get(path), 404, "App:900004", "Not found")
    assert_problem(client.post(path, HTTP_ACCEPT="text/html"), 404, "App:900004", "Not found")
    assert_problem(
        client.generic("PROPFIND", path, HTTP_ACCEPT="application/xml"),
        404,
        "App:900004",
        "Not found",
    )


def test_head_on_an_unmatched_path_is_a_bodyless_404(client: Client):
    response = client.head("/api/v1/nothing-here")
    assert response.status_code == 404
    assert response["Content-Type"] == PROBLEM_JSON
    assert response.content == b""


@pytest.mark.parametrize(("method", "path", "allow"), WRONG_METHODS)
def test_a_wrong_method_on_an_api_path_is_a_problem_405(
    operator_client: APIClient, method, path, allow
):
    response = getattr(operator_client, method)(path, {}, format="json")
    body = assert_problem(response, 405, "App:900005", "Method not allowed")
    assert body["detail"] == f'Method "{method.upper()}" not allowed.'
    assert response["Allow"] == allow


def test_an_existing_path_keeps_its_own_errors(operator_client: APIClient):
    response = operator_client.get(f"{INSTANCE}/some-id")
    assert_problem(response, 404, "Instance:100017", "Instance not found")
    response = operator_client.get("/api/v1/definitions/workflow/core/nothing")
    assert_problem(response, 404, "Component:100404", "Component not found")


@pytest.mark.parametrize("path", ["/nothing-here", "/api/nothing-here", "/api/v2/definitions"])
def test_other_paths_keep_djangos_404(client: Client, path):
    response = client.get(path)
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_the_admin_keeps_its_own_behaviour(client: Client, admin_client: Client):
    response = client.get("/admin/nothing-here/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
    response = admin_client.get("/admin/nothing-here/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_the_catch_all_is_not_an_endpoint_of_the_openapi_schema(client: Client):
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    assert paths
    assert all(path.startswith("/api/v1/") and "(" not in path for path in paths)
