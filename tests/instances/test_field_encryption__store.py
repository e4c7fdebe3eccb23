"""Master-schema fields encrypted at rest (`x-encryption` `encrypt`), through the HTTP API on
PostgreSQL: the rows hold tokens (instance data, data versions, history bodies, the task journal,
job payloads), the engine and its scripts work on clear values, a read shows the clear value to
the field's exemption roles and the token to everyone else, keys rotate, and a missing or wrong
key answers `Encryption:KeyUnavailable` without writing or showing anything."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cryptography.fernet import Fernet, InvalidToken
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from instances.field_encryption import SEALED_REQUEST
from instances.job_handlers import jobs_run_due
from instances.job_table import Job
from instances.models import Instance, InstanceDataVersion, InstanceTask, InstanceTransition
from tests.engine.builders import script, state, task_component, task_ref, transition, workflow
from tests.instances.workflows import UPDATE_DATA, publish
from workflows.models import WorkflowGrant

pytestmark = pytest.mark.django_db

BASE = "/api/v1/core/workflows/safe/instances"
OFFICER = "safe.officer"
CARD, SECRET, TIN = "4111-1111-1111-1111", "s3cr3t-value", "TIN-998877"
CLEAR = (CARD, SECRET, TIN)
KEY_A, KEY_B = Fernet.generate_key().decode(), Fernet.generate_key().decode()
EXEMPT = [{"role": OFFICER, "grant": "allow"}]

MASTER = {
    "key": "safe-master",
    "domain": "core",
    "version": "1.0.0",
    "flow": "sys-schemas",
    "flowVersion": "1.0.0",
    "tags": ["test"],
    "attributes": {
        "type": "schema",
        "schema": {
            "type": "object",
            "properties": {
                "card": {"type": "string", "x-encryption": {"type": "encrypt", "roles": EXEMPT}},
                "secret": {"type": "string", "x-encryption": {"type": "persisted"}},
                "profile": {
                    "type": "object",
                    "properties": {
                        "tin": {
                            "type": ["string", "null"],
                            "x-encryption": {"type": "encrypt", "roles": EXEMPT, "purpose": "PII"},
                        }
                    },
                },
                "note": {"type": "string"},
            },
        },
    },
}
# The review transition's script task: its input handler answers the card (the task's response,
# journaled), its output handler copies what the script sees into a plain field.
SEEING = task_ref(
    "{'sawCard': context.instance.data.get('card'), 'sawTin': get(context.instance.data, "
    "'profile.tin')}"
)
SEEING["mapping"]["code"] = SEEING["mapping"]["code"].replace(
    "return ScriptResponse()", "return ScriptResponse(data={'echo': context.instance.data['card']})"
)


# Another workflow reading a `safe` instance through a Get-instance-data task (type 13).
READ_TASK = task_component("read-safe", "13", {"domain": "core", "flow": "safe"})
READER = workflow(
    [
        state("idle", 1, [transition("read", "idle-done", onExecutionTasks=[])]),
        state("idle-done", 3),
    ],
    key="reader",
)
READER["attributes"]["states"][0]["transitions"][0]["onExecutionTasks"] = [
    {
        "order": 1,
        "task": {"key": "read-safe", "domain": "core", "version": "1.0.0", "flow": "sys-tasks"},
        "mapping": script(
            "def input_handler(task, context):\n"
            "    task.instance_id = context.instance.data['target']\n"
            "    return None\n\n"
            "def output_handler(context):\n"
            "    return {'readCard': context.body['data']['card']}\n"
        ),
    }
]


def safe() -> dict[str, Any]:
    return workflow(
        [
            state("open", 1, [transition("review", "review", onExecutionTasks=[SEEING])]),
            state("review", 2, [transition("close", "closed")]),
            state("closed", 3, subType=1),
        ],
        key="safe",
        schema={"key": "safe-master", "domain": "core", "version": "1.0.0", "flow": "sys-schemas"},
        updateData=UPDATE_DATA,
    )


@pytest.fixture
def keys(settings: Any) -> Any:
    """Set the configured keys (current first)."""

    def use(*configured: str) -> None:
        settings.VNEXT = {**settings.VNEXT, "ENCRYPTION_KEYS": list(configured)}

    use(KEY_A)
    return use


@pytest.fixture(autouse=True)
def published(keys: Any) -> None:
    publish(MASTER, safe(), READ_TASK, READER)


def client_with(name: str, *roles: str) -> APIClient:
    user: Any = get_user_model().objects.create_user(name, password="pw-12345678")
    users, _ = Group.objects.get_or_create(name="safe-users")
    WorkflowGrant.objects.get_or_create(
        group=users,
        domain="core",
        workflow="safe",
        defaults={
            "read_definitions": True,
            "read_instances": True,
            "start_instances": True,
            "drive_instances": True,
        },
    )
    user.groups.add(users, *(Group.objects.get_or_create(name=role)[0] for role in roles))
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def clerk() -> APIClient:
    return client_with("clerk")


@pytest.fixture
def officer() -> APIClient:
    return client_with("olga", OFFICER)


def start(client: APIClient, **attributes: Any) -> str:
    body = {"card": CARD, "secret": SECRET, "profile": {"tin": TIN}, "note": "hello"}
    response = client.post(
        f"{BASE}/start?sync=true", {"attributes": {**body, **attributes}}, format="json"
    )
    assert response.status_code == 200, response.content
    return str(response.json()["id"])


def fire(client: APIClient, ref: str, name: str, body: Any = None, *, sync: bool = True) -> Any:
    url = f"{BASE}/{ref}/transitions/{name}" + ("?sync=true" if sync else "")
    return client.patch(url, body or {}, format="json")


def data(client: APIClient, ref: str) -> dict[str, Any]:
    response = client.get(f"{BASE}/{ref}/functions/data")
    assert response.status_code == 200, response.content
    shown: dict[str, Any] = response.json()["data"]
    return shown


def stored(ref: str) -> dict[str, Any]:
    found: dict[str, Any] = Instance.objects.values_list("data", flat=True).get(pk=ref)
    return found


def opened(token: str, key: str = KEY_A) -> Any:
    assert token.startswith("enc:v1:"), token
    return json.loads(Fernet(key.encode()).decrypt(token.removeprefix("enc:v1:").encode()))


def every_row_of(ref: str) -> str:
    """Every row the instance wrote, as one JSON text."""
    return json.dumps(
        [
            stored(ref),
            list(InstanceDataVersion.objects.filter(instance_id=ref).values("data", "patch")),
            list(
                InstanceTransition.objects.filter(instance_id=ref).values("body", "error_message")
            ),
            list(InstanceTask.objects.filter(instance_id=ref).values("response", "error_message")),
            list(Job.objects.filter(instance_id=ref).values("payload")),
        ]
    )


# --- at rest ------------------------------------------------------------------------------------


def test_the_rows_hold_tokens_that_open_to_the_values_never_the_values(clerk):
    ref = start(clerk)

    row = stored(ref)
    assert opened(row["card"]) == CARD
    assert opened(row["secret"]) == SECRET
    assert opened(row["profile"]["tin"]) == TIN
    assert row["note"] == "hello"  # not encrypted
    text = every_row_of(ref)  # the data, its version, the start's history body
    for clear in CLEAR:
        assert clear not in text
    version = InstanceDataVersion.objects.get(instance_id=ref)
    assert version.data["card"] == version.patch["card"] == row["card"]
    history = InstanceTransition.objects.get(instance_id=ref)
    assert history.body["attributes"]["card"] == row["card"]


def test_scripts_work_on_the_clear_values_and_their_journal_keeps_the_tokens(clerk):
    ref = start(clerk)
    fire(clerk, ref, "review")

    row = stored(ref)
    assert row["sawCard"] == CARD  # the author chose to copy it into a plain field
    assert row["sawTin"] == TIN
    journal: Any = InstanceTask.objects.get(instance_id=ref).response
    assert journal["data"]["echo"] == row["card"]


def test_an_unchanged_value_keeps_its_token_and_a_new_one_gets_a_new_token(clerk):
    ref = start(clerk)
    before = stored(ref)
    version = clerk.get(f"{BASE}/{ref}").json()["metadata"]["dataVersion"]

    assert fire(clerk, ref, "update-data", {"attributes": {"card": CARD}}).status_code == 200
    assert stored(ref) == before  # same value: same token, no new data version
    assert clerk.get(f"{BASE}/{ref}").json()["metadata"]["dataVersion"] == version

    fire(clerk, ref, "update-data", {"attributes": {"card": "5500-0000-0000-0004"}})
    after = stored(ref)
    assert after["card"] != before["card"]
    assert opened(after["card"]) == "5500-0000-0000-0004"
    assert after["secret"] == before["secret"]


def test_an_async_request_is_sealed_in_its_job_and_opened_by_the_runner(clerk):
    ref = start(clerk)
    response = fire(clerk, ref, "update-data", {"attributes": {"card": "5500-1"}}, sync=False)
    assert response.status_code == 202, response.content

    payload = Job.objects.get(instance_id=ref, status="pending").payload
    assert "attributes" not in payload
    assert "body" not in payload
    assert opened(payload[SEALED_REQUEST])["attributes"] == {"card": "5500-1"}
    assert jobs_run_due() == {"succeeded": 1}
    assert opened(stored(ref)["card"]) == "5500-1"
    assert "5500-1" not in every_row_of(ref)


def test_another_instance_reading_it_sees_the_tokens(clerk, operator_client):
    ref = start(clerk)
    response = operator_client.post(
        "/api/v1/core/workflows/reader/instances/start?sync=true",
        {"attributes": {"target": ref}},
        format="json",
    )
    reader = str(response.json()["id"])
    answer = operator_client.patch(
        f"/api/v1/core/workflows/reader/instances/{reader}/transitions/read?sync=true",
        {},
        format="json",
    )
    assert answer.status_code == 200, answer.content

    assert stored(reader)["readCard"] == stored(ref)["card"]
    assert CARD not in every_row_of(reader)


# --- reads --------------------------------------------------------------------------------------


def test_the_exemption_role_reads_clear_values_and_everyone_else_the_tokens(clerk, officer):
    ref = start(clerk)
    row = stored(ref)

    assert data(officer, ref) == {
        "card": CARD,
        "secret": row["secret"],  # no exemption roles: a token for everyone
        "profile": {"tin": TIN},
        "note": "hello",
    }
    for reader in (clerk, client_with("root-like")):
        shown = data(reader, ref)
        assert shown["card"] == row["card"]
        assert shown["profile"] == row["profile"]
    assert clerk.get(f"{BASE}/{ref}").json()["attributes"]["card"] == row["card"]
    assert officer.get(f"{BASE}/{ref}").json()["attributes"]["card"] == CARD
    listed = officer.get(BASE).json()["items"][0]["attributes"]
    assert listed["profile"]["tin"] == TIN


def test_a_sync_answer_shows_each_caller_what_its_roles_allow(clerk, officer):
    ref = start(clerk)

    mine = fire(clerk, ref, "update-data", {"attributes": {"note": "x"}}).json()["attributes"]
    assert mine["card"] == stored(ref)["card"]
    theirs = fire(officer, ref, "update-data", {"attributes": {"note": "y"}}).json()["attributes"]
    assert theirs["card"] == CARD


def test_a_past_data_version_is_opened_too(clerk, officer):
    ref = start(clerk)
    first = clerk.get(f"{BASE}/{ref}").json()["metadata"]["dataVersion"]
    fire(clerk, ref, "update-data", {"attributes": {"card": "5500-2"}})

    past = officer.get(f"{BASE}/{ref}/functions/data", {"version": first}).json()["data"]
    assert past["card"] == CARD
    past = clerk.get(f"{BASE}/{ref}/functions/data", {"version": first}).json()["data"]
    assert opened(past["card"]) == CARD


# --- keys ---------------------------------------------------------------------------------------


def test_a_rotated_key_opens_the_old_tokens_and_seals_the_new_ones(clerk, officer, keys):
    ref = start(clerk)
    keys(KEY_B, KEY_A)  # B is the current key; A still opens what it sealed

    assert data(officer, ref)["card"] == CARD
    fire(clerk, ref, "update-data", {"attributes": {"card": "5500-3"}})
    row = stored(ref)
    assert opened(row["card"], KEY_B) == "5500-3"
    with pytest.raises(InvalidToken):
        opened(row["card"], KEY_A)
    assert opened(row["secret"], KEY_A) == SECRET  # untouched: still A's
    assert data(officer, ref)["card"] == "5500-3"


def unavailable(response: Any) -> dict[str, Any]:
    assert response.status_code == 503, response.content
    body: dict[str, Any] = response.json()
    assert body["errorCode"] == "Encryption:KeyUnavailable"
    for clear in CLEAR:
        assert clear not in response.content.decode()
    return body


def test_without_the_key_that_sealed_them_reads_and_writes_answer_503(clerk, officer, keys):
    ref = start(clerk)
    before = stored(ref)
    keys(KEY_B)  # A retired too early

    body = unavailable(officer.get(f"{BASE}/{ref}/functions/data"))
    assert "none of the configured keys" in body["detail"]
    unavailable(clerk.get(f"{BASE}/{ref}"))
    unavailable(fire(clerk, ref, "update-data", {"attributes": {"note": "z"}}))
    assert stored(ref) == before


def test_without_any_key_nothing_is_sealed_in_clear_instead(clerk, keys):
    ref = start(clerk)
    keys()

    unavailable(clerk.get(f"{BASE}/{ref}/functions/data"))
    response = clerk.post(
        f"{BASE}/start?sync=true", {"attributes": {"card": "5500-4"}}, format="json"
    )
    body = unavailable(response)
    assert "no key is configured" in body["detail"]
    assert not Instance.objects.filter(data__card="5500-4").exists()
    response = clerk.post(f"{BASE}/start", {"attributes": {"card": "5500-5"}}, format="json")
    unavailable(response)  # an async start: the request would sit in the job row
    assert "5500-5" not in json.dumps(list(Job.objects.values_list("payload", flat=True)))
