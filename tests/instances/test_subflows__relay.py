"""The internal subflow relay (API.md 5): `POST /internal/{domain}/instances/{id}/subflow-forward`
runs a transition under the chain-reserve claim an async accept put on the leaf. Only a service
credential (`relay-services` group) may call it; a forged or spent claim is 409 and changes
nothing; the public API has no way to present a claim."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from instances.job_handlers import jobs_run_due
from instances.job_table import Job
from instances.models import Instance
from tests.conftest import UserFactory, migration_group
from tests.instances.scenario_api import WorkflowApi, import_examples

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(db: None, operator_client: Any) -> WorkflowApi:
    import_examples()
    return WorkflowApi(operator_client, "chain-busy-root")


@pytest.fixture
def service_client() -> APIClient:
    user: Any = UserFactory(username="relay-service")
    user.groups.add(migration_group("relay-services"))
    client = APIClient()
    client.force_authenticate(user)
    return client


def reserved_leaf(root: WorkflowApi) -> tuple[Instance, str]:
    """A chain whose leaf an async `leaf-only-mark` on the root reserved: the leaf, the claim."""
    root_id = root.started()
    accepted = root.fire(root_id, "leaf-only-mark", sync=False)
    assert accepted.status_code == 202, accepted.json()
    leaf = Instance.objects.get(workflow_key="chain-busy-leaf")
    assert leaf.status == "B"
    return leaf, leaf.busy_owner


def relay_url(leaf: Instance) -> str:
    return f"/internal/core/instances/{leaf.pk}/subflow-forward"


def test_the_service_credential_relays_under_the_claim(root, service_client):
    leaf, claim = reserved_leaf(root)
    response = service_client.post(
        relay_url(leaf),
        {"transitionKey": "leaf-only-mark", "reservation": claim},
        format="json",
    )
    assert response.status_code == 200, response.json()
    leaf = Instance.objects.get(pk=leaf.pk)
    assert (leaf.status, leaf.busy_owner, leaf.data["leafOnlyMarks"]) == ("A", "", 1)
    # The accept's job finds its claim spent and does nothing twice.
    assert jobs_run_due() == {"skipped": 1}
    assert Instance.objects.get(pk=leaf.pk).data["leafOnlyMarks"] == 1


@pytest.mark.parametrize(
    "claim", ["res:forged", "subflow:00000000-0000-0000-0000-000000000000", "someone"]
)
def test_a_forged_claim_is_409_and_changes_nothing(root, service_client, claim):
    leaf, real = reserved_leaf(root)
    response = service_client.post(
        relay_url(leaf), {"transitionKey": "leaf-only-mark", "reservation": claim}, format="json"
    )
    assert (response.status_code, response.json()["errorCode"]) == (409, "Instance:100031")
    leaf = Instance.objects.get(pk=leaf.pk)
    assert (leaf.busy_owner, "leafOnlyMarks" in leaf.data) == (real, False)


def test_a_waiting_parent_cannot_be_taken_with_its_correlation_as_claim(root, service_client):
    root_id = root.started()
    top = Instance.objects.get(pk=root_id)
    response = service_client.post(
        f"/internal/core/instances/{root_id}/subflow-forward",
        {"transitionKey": "root-shared-mark", "reservation": top.busy_owner},
        format="json",
    )
    assert (response.status_code, response.json()["errorCode"]) == (409, "Instance:100031")
    assert Instance.objects.get(pk=root_id).busy_owner == top.busy_owner


def test_callers_without_the_service_credential_are_refused(root, plain_client):
    leaf, claim = reserved_leaf(root)
    body = {"transitionKey": "leaf-only-mark", "reservation": claim}
    assert APIClient().post(relay_url(leaf), body, format="json").status_code in (401, 403)
    user: Any = UserFactory(username="someone")
    client = APIClient()
    client.force_authenticate(user)
    response = client.post(relay_url(leaf), body, format="json")
    assert (response.status_code, response.json()["errorCode"]) == (403, "Authorization:110001")
    assert Instance.objects.get(pk=leaf.pk).busy_owner == claim


def test_the_public_api_cannot_present_a_claim(root):
    leaf, claim = reserved_leaf(root)
    leaf_api = WorkflowApi(root.client, "chain-busy-leaf")
    for headers in ({"X-Subflow-Chain-Reserved": claim}, {"X-Reservation": claim}):
        response = leaf_api.fire(
            str(leaf.pk), "leaf-only-mark", {"reservation": claim}, headers=headers
        )
        assert (response.status_code, response.json()["errorCode"]) == (409, "Instance:100031")
    assert Instance.objects.get(pk=leaf.pk).busy_owner == claim
    assert Job.objects.filter(instance_id=leaf.pk, kind="transition", status="pending").count() == 1


def test_bad_relay_bodies_are_400_with_pointers(root, service_client):
    leaf, _ = reserved_leaf(root)
    response = service_client.post(relay_url(leaf), {"transitionKey": 3}, format="json")
    assert response.status_code == 400
    assert {e["pointer"] for e in response.json()["errors"]} == {"/transitionKey", "/reservation"}
