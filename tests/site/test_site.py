"""Site-wide endpoints: health, OpenAPI schema and docs page, the admin for components."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.conftest import EXAMPLES_DIR
from workflows.loader import load_file
from workflows.models import Component
from workflows.services import component_publish

pytestmark = pytest.mark.django_db


def test_health_reports_the_database(client: Client):
    response = client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok"}


def test_openapi_schema_lists_the_definitions_api(client: Client):
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    assert "/api/v1/definitions/publish" in paths
    assert "/api/v1/definitions/{kind}/{domain}/{key}" in paths


def test_docs_page_is_served_with_local_assets(client: Client):
    response = client.get("/api/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "swagger-ui" in page
    assert "cdn.jsdelivr.net" not in page  # works without internet access


@pytest.fixture
def published_workflow(db) -> Component:
    for relative in [
        "core/Tasks/instance-management/instance-mgmt-script-task.json",
        "core/Workflows/instance-management/instance-management-test-workflow.json",
    ]:
        result = component_publish(document=load_file(EXAMPLES_DIR / relative).document)
    return result.component


def test_admin_lists_components_and_shows_read_only_json(admin_client: Client, published_workflow):
    listing = admin_client.get("/admin/workflows/component/", {"kind__exact": "workflow"})
    assert listing.status_code == 200
    assert "instance-management-test-workflow" in listing.content.decode()

    detail = admin_client.get(f"/admin/workflows/component/{published_workflow.pk}/change/")
    assert detail.status_code == 200
    page = detail.content.decode()
    assert '<pre class="vnext-json">' in page
    assert "&quot;startTransition&quot;" in page
    assert 'name="_save"' not in page  # read-only: nothing to save


def test_admin_cannot_add_or_delete_components(admin_client: Client, published_workflow):
    assert admin_client.get("/admin/workflows/component/add/").status_code == 403
    delete_url = f"/admin/workflows/component/{published_workflow.pk}/delete/"
    assert admin_client.post(delete_url, {"post": "yes"}).status_code == 403
    assert Component.objects.filter(pk=published_workflow.pk).exists()
