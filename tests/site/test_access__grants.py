"""Access control on every API endpoint: a caller needs a `WorkflowGrant` of one of its groups
for what it does (read definitions, read, start or drive instances), superusers hold them all.

The walk over the URL conf builds a request for every route under `/api/v1/` and `/internal/`
and every method its view takes, so an endpoint added later is checked without a new test."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.instances.scenario_api import import_examples
from workflows.models import WorkflowGrant

pytestmark = pytest.mark.django_db

WORKFLOW = "instance-management-test-workflow"
OTHER = "payload-modes"
METHODS = ("get", "post", "put", "patch", "delete")


def routes() -> list[tuple[str, Any]]:
    """Every (route, view class) of the API and the internal endpoints."""
    found: list[tuple[str, Any]] = []

    def walk(patterns: list[Any], prefix: str) -> None:
        for entry in patterns:
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, prefix + str(entry.pattern))
            elif isinstance(entry, URLPattern):
                route = prefix + str(entry.pattern)
                view = getattr(entry.callback, "view_class", None)
                api = route.startswith(("api/v1/", "internal/"))
                if api and view is not None and entry.name != "api-not-found":
                    found.append((route, view))

    walk(get_resolver().url_patterns, "")
    return found


ROUTES = routes()
INBOX = "api/v1/<str:domain>/functions/human-task"


def requests_of(route: str, view: Any, instance: str) -> list[tuple[str, str]]:
    values = {
        "domain": "core",
        "workflow": WORKFLOW,
        "instance": instance,
        "transition": "complete",
        "function": "state",
        "kind": "workflow",
        "key": WORKFLOW,
        "batch": "00000000-0000-0000-0000-000000000000",
        "task": "00000000-0000-0000-0000-000000000000",
    }
    path = route
    for name, value in values.items():
        path = path.replace(f"<str:{name}>", value)
    assert "<" not in path, f"a converter this test does not fill: {route}"
    return [(method, "/" + path) for method in METHODS if hasattr(view, method)]


def user_client(name: str, **rights: bool) -> APIClient:
    user: Any = get_user_model().objects.create_user(name, password="pw-12345678")
    if rights:
        group = Group.objects.create(name=f"{name}-group")
        WorkflowGrant.objects.create(group=group, domain="core", workflow=WORKFLOW, **rights)
        user.groups.add(group)
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def instance(db: None, operator_client: APIClient) -> str:
    import_examples()
    response = operator_client.post(
        f"/api/v1/core/workflows/{WORKFLOW}/instances/start?sync=true", {}, format="json"
    )
    assert response.status_code == 200, response.json()
    return str(response.json()["id"])


def test_the_walk_finds_every_instance_and_definition_endpoint():
    names = {route for route, _ in ROUTES}
    assert len(ROUTES) >= 14
    assert "api/v1/definitions/publish" in names
    assert "internal/<str:domain>/instances/<str:instance>/subflow-forward" in names


def test_a_user_without_grants_gets_403_or_404_everywhere(instance):
    stranger = user_client("stranger")
    answered = []
    for route, view in ROUTES:
        for method, path in requests_of(route, view, instance):
            response = getattr(stranger, method)(path, {}, format="json")
            answered.append((method, path, response.status_code))
            if route == INBOX and method == "get":
                # The human-task inbox is every caller's own: assignment is its access rule,
                # and nothing is assigned to a stranger.
                assert response.status_code == 200, response.content
                assert response.json()["items"] == []
                continue
            assert response.status_code in (403, 404), (method, path, response.content)
            assert response["Content-Type"] == "application/problem+json", (method, path)
    assert len(answered) >= 15


def test_anonymous_callers_get_401(instance):
    for route, view in ROUTES:
        for method, path in requests_of(route, view, instance):
            response = getattr(APIClient(), method)(path, {}, format="json")
            assert response.status_code == 401, (method, path, response.status_code)


def test_a_reader_reads_but_neither_starts_nor_drives(instance):
    reader = user_client("reader", read_instances=True)
    base = f"/api/v1/core/workflows/{WORKFLOW}/instances"

    assert reader.get(f"{base}/{instance}").status_code == 200
    assert reader.get(f"{base}/{instance}/functions/state").status_code == 200
    assert [item["id"] for item in reader.get(base).json()["items"]] == [instance]
    assert reader.post(f"{base}/start?sync=true", {}, format="json").status_code == 403
    response = reader.patch(f"{base}/{instance}/transitions/complete?sync=true", {}, format="json")
    assert response.status_code == 403
    assert response.json()["errorCode"] == "Authorization:110001"
    # The grant names one workflow: another of the domain stays closed.
    assert reader.get(f"/api/v1/core/workflows/{OTHER}/instances").status_code == 403
    assert reader.get(f"/api/v1/definitions/workflow/core/{WORKFLOW}").status_code == 403


def test_a_driver_starts_and_drives(instance):
    driver = user_client("driver", start_instances=True, drive_instances=True)
    base = f"/api/v1/core/workflows/{WORKFLOW}/instances"

    started = driver.post(f"{base}/start?sync=true", {}, format="json")
    assert started.status_code == 200, started.json()
    assert started.json()["attributes"]["testStarted"] is True
    assert driver.get(f"{base}/{instance}").status_code == 403  # no read grant


def test_definition_reads_follow_the_grant(instance):
    reader = user_client("librarian", read_definitions=True)

    document = reader.get(f"/api/v1/definitions/workflow/core/{WORKFLOW}")
    assert document.status_code == 200
    assert document.json()["key"] == WORKFLOW
    assert reader.get(f"/api/v1/definitions/workflow/core/{OTHER}").status_code == 403
    listing = reader.get("/api/v1/definitions/workflow/core")
    assert [item["key"] for item in listing.json()["items"]] == [WORKFLOW]
    # Tasks and schemas are the domain's: a grant on one workflow does not open them.
    assert reader.get("/api/v1/definitions/task/core").status_code == 403


def test_a_domain_wide_grant_covers_every_workflow_and_component(instance):
    user: Any = get_user_model().objects.create_user("domain-reader", password="pw-12345678")
    group = Group.objects.create(name="core-readers")
    WorkflowGrant.objects.create(
        group=group, domain="core", workflow="", read_definitions=True, read_instances=True
    )
    user.groups.add(group)
    client = APIClient()
    client.force_authenticate(user)

    assert client.get(f"/api/v1/core/workflows/{OTHER}/instances").status_code == 200
    assert client.get("/api/v1/definitions/task/core").status_code == 200
    keys = {item["key"] for item in client.get("/api/v1/definitions/workflow/core").json()["items"]}
    assert {WORKFLOW, OTHER} <= keys
    assert client.get("/api/v1/definitions/workflow/payments").status_code == 403


def test_revoking_a_grant_or_a_membership_takes_effect_at_once(instance):
    user: Any = get_user_model().objects.create_user("revoked", password="pw-12345678")
    group = Group.objects.create(name="revocable")
    grant = WorkflowGrant.objects.create(
        group=group, domain="core", workflow=WORKFLOW, read_instances=True
    )
    user.groups.add(group)
    client = APIClient()
    token = Token.objects.create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    url = f"/api/v1/core/workflows/{WORKFLOW}/instances/{instance}"
    assert client.get(url).status_code == 200  # now cached for the token's user

    grant.read_instances = False
    grant.save()
    assert client.get(url).status_code == 403
    grant.read_instances = True
    grant.save()
    assert client.get(url).status_code == 200
    user.groups.remove(group)
    assert client.get(url).status_code == 403
