"""SCENARIOS.md section 14, authorization-chain-lab-leaf, driven through the HTTP API and the
long-poll ASGI route: a rule-based auto transition on start, a human state with a terminating
long-poll interaction whose roles decide who sees it and who acknowledges it, workflow-level
query roles, and `authorize?queryRoles=true|ack=true`.

One deviation from the scenario text, on purpose: while the state awaits its acknowledgement
the instance is Busy (`B`), as the long-poll issue specifies (seed 000 step 75 pauses the run),
where the scenario says `A`; the ack or the fallback makes it `A`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from asgiref.testing import ApplicationCommunicator
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.wsgi import get_wsgi_application
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from instances.api.longpoll import StateLongPoll, get_scope
from instances.job_handlers import jobs_run_due
from instances.job_table import Job
from instances.models import Instance
from tests.instances.scenario_api import WorkflowApi, import_examples, make_due
from workflows.models import WorkflowGrant

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

WORKFLOW = "authorization-chain-lab-leaf"
ADMIN, READER, LEAF_ONLY = "chain.admin", "chain.reader", "chain.leaf-only"


def caller(name: str, *roles: str) -> tuple[WorkflowApi, str]:
    """A user granted the workflow, in the role groups `roles`: its API and its token."""
    user: Any = get_user_model().objects.create_user(name, password="pw-12345678")
    users, _ = Group.objects.get_or_create(name="chain-users")
    WorkflowGrant.objects.get_or_create(
        group=users,
        domain="core",
        workflow=WORKFLOW,
        defaults={"read_instances": True, "start_instances": True, "drive_instances": True},
    )
    user.groups.add(users, *(Group.objects.get_or_create(name=role)[0] for role in roles))
    client = APIClient()
    client.force_authenticate(user)
    return WorkflowApi(client, WORKFLOW), str(Token.objects.create(user=user).key)


@pytest.fixture(autouse=True)
def examples(db: None, settings: Any) -> None:
    # Re-reads far apart: a quick long-poll answer can only come from the change notification.
    settings.VNEXT = {**settings.VNEXT, "LONG_POLL_RECHECK_SECONDS": 30.0}
    import_examples()


@pytest.fixture
def admin() -> WorkflowApi:
    return caller("ayse", ADMIN)[0]


@pytest.fixture
def reader() -> WorkflowApi:
    return caller("rana", READER)[0]


def waiting(api: WorkflowApi) -> str:
    """Start the leaf directly: its auto rule moves it to `leaf-waiting`, paused for the ack."""
    answer = api.start()
    assert answer.status_code == 200, answer.json()
    assert answer.json()["status"] == "B"
    ref = str(answer.json()["id"])
    row = Instance.objects.get(pk=ref)
    assert (row.current_state, row.busy_owner[:9]) == ("leaf-waiting", "longpoll:")
    return ref


def authorize(api: WorkflowApi, ref: str, **params: str) -> tuple[int, Any]:
    response = api.client.get(api.url(ref, "functions", "authorize"), params)
    return response.status_code, response.json()


# --- 1. start: auto to leaf-waiting, the interaction block, the fallback job -----------------


def test_start_moves_to_leaf_waiting_and_publishes_the_interaction(admin):
    ref = waiting(admin)

    body = admin.state(ref)
    assert body["state"] == "leaf-waiting"
    assert body["stateSubType"] == "human"
    assert body["interaction"] == {
        "terminateLongPoll": True,
        "fallbackTimeoutSeconds": 30,
        "ack": {"href": admin.url(ref, "longpoll/ack")},
    }
    (fallback,) = Job.objects.filter(instance_id=ref, kind="longpoll-fallback")
    assert 29 <= (fallback.run_at - fallback.created_at).total_seconds() <= 30
    assert [row["transitionKey"] for row in admin.transitions(ref)] == [
        "start-authorization-chain-lab-leaf",
        "auto-leaf-to-leaf-waiting",
    ]


def test_a_reader_sees_the_state_but_not_the_interaction_it_may_not_use(admin, reader):
    ref = waiting(admin)

    body = reader.state(ref)
    assert body["state"] == "leaf-waiting"
    assert "interaction" not in body


# --- 2. the long-poll client is woken; the ack releases it; else the fallback ------------------


async def _parked_until(scope: dict[str, Any], change: Any) -> tuple[int, dict[str, Any]]:
    communicator = ApplicationCommunicator(StateLongPoll(get_wsgi_application()), scope)
    await communicator.send_input({"type": "http.request", "body": b""})
    assert await communicator.receive_nothing(timeout=0.5)  # parked
    await sync_to_async(change, thread_sensitive=False)()
    start = await communicator.receive_output(5)
    body = await communicator.receive_output(5)
    return start["status"], json.loads(body["body"])


def long_poll(ref: str, token: str, etag: str) -> dict[str, Any]:
    headers = [
        (b"authorization", f"Token {token}".encode()),
        (b"if-none-match", f'"{etag}"'.encode()),
    ]
    path = f"/api/v1/core/workflows/{WORKFLOW}/instances/{ref}/functions/state"
    return dict(get_scope(path, headers, query=b"wait=20", server=("testserver", 80)))


def test_a_parked_client_is_woken_with_the_interaction_when_the_leaf_reaches_it():
    admin, token = caller("ali", ADMIN)
    accepted = admin.start(sync=False)
    assert accepted.status_code == 202, accepted.json()
    ref = str(accepted.json()["id"])
    etag = admin.state(ref)["eTag"]

    status, body = async_to_sync(_parked_until)(long_poll(ref, token, etag), jobs_run_due)

    assert status == 200
    assert body["state"] == "leaf-waiting"
    assert body["interaction"]["terminateLongPoll"] is True
    assert body["interaction"]["ack"]["href"].endswith(f"/{ref}/longpoll/ack")


def test_the_ack_of_an_admin_releases_the_wait(reader):
    admin, token = caller("asli", ADMIN)
    ref = waiting(admin)
    etag = admin.state(ref)["eTag"]

    assert authorize(admin, ref, ack="true") == (200, {"allowed": True})
    assert authorize(reader, ref, ack="true") == (403, {"allowed": False})
    refused = reader.client.patch(reader.url(ref, "longpoll/ack"))
    assert (refused.status_code, refused.json()["errorCode"]) == (403, "Authorization:110001")

    def ack() -> None:
        acked = admin.client.patch(admin.url(ref, "longpoll/ack"))
        assert acked.status_code == 200, acked.json()

    status, body = async_to_sync(_parked_until)(long_poll(ref, token, etag), ack)
    assert status == 200
    assert (body["state"], body["status"]) == ("leaf-waiting", "A")
    assert Instance.objects.get(pk=ref).busy_owner == ""
    # Nothing awaits an ack now: "allowed" for anyone, and a second ack is 409.
    assert authorize(reader, ref, ack="true") == (200, {"allowed": True})
    assert admin.client.post(admin.url(ref, "longpoll/ack")).status_code == 409


def test_without_an_ack_the_fallback_releases_the_wait(admin):
    ref = waiting(admin)
    (fallback,) = Job.objects.filter(instance_id=ref, kind="longpoll-fallback")
    make_due(fallback)

    jobs_run_due()

    row = Instance.objects.get(pk=ref)
    assert (row.current_state, row.status, row.busy_owner) == ("leaf-waiting", "A", "")
    assert admin.client.patch(admin.url(ref, "longpoll/ack")).status_code == 409


# --- 3. query roles ----------------------------------------------------------------------------


def test_authorize_query_roles_allows_the_three_chain_roles_only(admin):
    ref = waiting(admin)

    for role in (READER, ADMIN, LEAF_ONLY):
        assert authorize(admin, ref, queryRoles="true", role=role) == (200, {"allowed": True})
    assert authorize(admin, ref, queryRoles="true", role="chain.other") == (
        403,
        {"allowed": False},
    )
    outsider = caller("omer", "chain.other")[0]
    assert authorize(outsider, ref, queryRoles="true") == (403, {"allowed": False})
    denied = outsider.function(ref, "state")
    assert (denied.status_code, denied.json()["errorCode"]) == (403, "Authorization:110001")
    leaf_only = caller("lale", LEAF_ONLY)[0]
    assert leaf_only.state(ref)["state"] == "leaf-waiting"


# --- 4. finish ---------------------------------------------------------------------------------


def test_finish_leaf_completes_the_instance(admin):
    ref = waiting(admin)
    assert admin.client.patch(admin.url(ref, "longpoll/ack")).status_code == 200

    answer = admin.fired(ref, "finish-leaf")

    assert answer["status"] == "C"
    assert admin.detail(ref)["metadata"]["currentState"] == "leaf-done"
