"""Instances API: start, transition, read; ETags and 304; sync and async answers; and every
kind of bad input answered with its code, never a 500."""

from __future__ import annotations

import pytest

from instances.models import Instance, InstanceDataVersion, InstanceTransition
from tests.engine.builders import state, transition, workflow
from tests.instances.workflows import ping_pong, publish

pytestmark = pytest.mark.django_db
BASE = "/api/v1/core/workflows/ping-pong/instances"

SCHEMA = {
    "key": "order-input",
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
            "required": ["amount", "customer"],
            "properties": {
                "amount": {"type": "number", "minimum": 1},
                "customer": {
                    "type": "object",
                    "required": ["id"],
                    "properties": {"id": {"type": "string"}},
                },
            },
            "additionalProperties": False,
        },
    },
}
SCHEMA_REF = {"key": "order-input", "domain": "core", "version": "1.0.0", "flow": "sys-schemas"}


@pytest.fixture
def flow(db):
    from workflows.services import component_publish

    component_publish(document=SCHEMA)
    document = ping_pong()
    document["attributes"]["states"][1]["transitions"].append(
        transition("order", "ping", schema=SCHEMA_REF)
    )
    publish(document)


def start(client, body=None, query="sync=true"):
    return client.post(f"{BASE}/start?{query}", body or {}, format="json")


def test_start_sync_answers_the_envelope_with_etags(operator_client, flow):
    response = start(operator_client, {"key": "order-1", "tags": ["t"], "attributes": {"a": 1}})
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"id", "key", "status", "attributes", "eTag", "entityEtag", "extensions"}
    assert (body["key"], body["status"], body["attributes"]) == ("order-1", "A", {"a": 1})
    assert response["ETag"] == f'"{body["eTag"]}"'
    assert response["X-Entity-ETag"] == f'"{body["entityEtag"]}"'
    row = Instance.objects.get(pk=body["id"])
    assert (row.current_state, row.tags, row.created_by) == ("ping", ["t"], "operator")


def test_start_without_sync_answers_202(operator_client, flow):
    response = start(operator_client, {"a": 1}, query="")
    assert response.status_code == 202
    assert set(response.json()) == {"id", "status"}


def test_start_with_a_live_key_is_idempotent(operator_client, flow):
    first = start(operator_client, {"key": "same", "attributes": {"n": 1}}).json()
    second = start(operator_client, {"key": "same", "attributes": {"n": 2}})
    assert second.status_code == 200
    assert second.json()["id"] == first["id"]
    assert second.json()["attributes"] == {"n": 1}
    assert Instance.objects.count() == 1


def test_transition_by_id_or_business_key(operator_client, flow):
    created = start(operator_client, {"key": "k-7"}).json()
    response = operator_client.patch(
        f"{BASE}/k-7/transitions/to-pong?sync=true", {"b": 2}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["attributes"] == {"b": 2}
    assert response.json()["id"] == created["id"]
    history = operator_client.get(f"{BASE}/{created['id']}/transitions").json()["items"]
    assert [(h["transitionKey"], h["fromState"], h["toState"], h["status"]) for h in history] == [
        ("start", "", "ping", "completed"),
        ("to-pong", "ping", "pong", "completed"),
    ]


def test_entity_etag_changes_only_when_data_changes(operator_client, flow):
    created = start(operator_client, {"a": 1}).json()
    moved = operator_client.patch(
        f"{BASE}/{created['id']}/transitions/to-pong?sync=true", {}, format="json"
    ).json()
    assert moved["eTag"] != created["eTag"]
    assert moved["entityEtag"] == created["entityEtag"]
    changed = operator_client.patch(
        f"{BASE}/{created['id']}/transitions/to-ping?sync=true", {"a": 2}, format="json"
    ).json()
    assert changed["entityEtag"] != moved["entityEtag"]
    assert Instance.objects.get(pk=created["id"]).data_version == "1.1.0"


def test_get_instance_and_304(operator_client, flow):
    created = start(operator_client, {"key": "g-1", "attributes": {"x": 1}}).json()
    response = operator_client.get(f"{BASE}/{created['id']}")
    assert response.status_code == 200
    body = response.json()
    assert (body["flow"], body["domain"], body["flowVersion"], body["attributes"]) == (
        "ping-pong",
        "core",
        "1.0.0",
        {"x": 1},
    )
    assert body["metadata"]["currentState"] == "ping"
    assert body["metadata"]["effectiveStateType"] == "initial"
    again = operator_client.get(f"{BASE}/{created['id']}", HTTP_IF_NONE_MATCH=response["ETag"])
    assert again.status_code == 304


@pytest.mark.parametrize("function", ["state", "data"])
def test_state_and_data_functions_answer_304_until_something_changes(
    operator_client, flow, function
):
    created = start(operator_client, {"x": 1}).json()
    url = f"{BASE}/{created['id']}/functions/{function}"
    first = operator_client.get(url)
    assert first.status_code == 200
    assert operator_client.get(url, HTTP_IF_NONE_MATCH=first["ETag"]).status_code == 304
    operator_client.patch(
        f"{BASE}/{created['id']}/transitions/to-pong?sync=true", {"x": 2}, format="json"
    )
    assert operator_client.get(url, HTTP_IF_NONE_MATCH=first["ETag"]).status_code == 200


def test_state_function_lists_what_a_client_can_do(operator_client, flow):
    created = start(operator_client).json()
    operator_client.patch(
        f"{BASE}/{created['id']}/transitions/to-pong?sync=true", {}, format="json"
    )
    body = operator_client.get(f"{BASE}/{created['id']}/functions/state").json()
    assert (body["state"], body["status"]) == ("pong", "A")
    names = {t["name"]: t.get("kind") for t in body["transitions"]}
    assert names == {
        "to-ping": None,
        "finish": None,
        "order": None,
        "update-data": "updateData",
        "cancel": "cancel",
    }
    order = next(t for t in body["transitions"] if t["name"] == "order")
    assert order["schema"]["hasSchema"] is True
    schema = operator_client.get(
        f"{BASE}/{created['id']}/functions/schema?transitionKey=order"
    ).json()
    assert schema["key"] == "order-input"
    assert schema["schema"]["required"] == ["amount", "customer"]


def test_completing_an_instance(operator_client, flow):
    created = start(operator_client).json()
    url = f"{BASE}/{created['id']}/transitions"
    operator_client.patch(f"{url}/to-pong?sync=true", {}, format="json")
    done = operator_client.patch(f"{url}/finish?sync=true", {}, format="json")
    assert done.json()["status"] == "C"
    row = Instance.objects.get(pk=created["id"])
    assert (row.current_state, row.effective_state_subtype) == ("done", "success")
    assert row.completed_at is not None


# --- bad input -----------------------------------------------------------------------------


def problem(response, status, code):
    assert response.status_code == status, response.content
    body = response.json()
    assert body["errorCode"] == code
    assert body["status"] == status
    assert body["detail"]
    return body


def test_unknown_workflow_is_404(operator_client, flow):
    response = operator_client.post(
        "/api/v1/core/workflows/nope/instances/start", {}, format="json"
    )
    problem(response, 404, "Instance:100015")
    response = operator_client.post(f"{BASE}/start?version=9.9.9", {}, format="json")
    problem(response, 404, "Instance:100015")


def test_unknown_instance_is_404(operator_client, flow):
    for ref in ["00000000-0000-0000-0000-000000000000", "no-such-key"]:
        problem(operator_client.get(f"{BASE}/{ref}"), 404, "Instance:100017")
        response = operator_client.patch(f"{BASE}/{ref}/transitions/to-pong", {}, format="json")
        problem(response, 404, "Instance:100017")


def test_unknown_transition_is_404_and_unavailable_is_400(operator_client, flow):
    created = start(operator_client).json()
    url = f"{BASE}/{created['id']}/transitions"
    body = problem(
        operator_client.patch(f"{url}/teleport", {}, format="json"), 404, "Transition:100004"
    )
    assert body["instanceId"] == created["id"]
    problem(operator_client.patch(f"{url}/to-ping", {}, format="json"), 400, "Transition:100020")
    assert InstanceTransition.objects.filter(transition_key="to-ping").count() == 0


def test_body_failing_the_schema_is_400_with_every_pointer(operator_client, flow):
    created = start(operator_client).json()
    url = f"{BASE}/{created['id']}/transitions"
    operator_client.patch(f"{url}/to-pong?sync=true", {}, format="json")
    body = problem(
        operator_client.patch(
            f"{url}/order?sync=true",
            {"attributes": {"amount": "ten", "customer": {}, "rogue": 1}},
            format="json",
        ),
        400,
        "App:900002",
    )
    assert {e["pointer"] for e in body["errors"]} == {
        "/attributes/amount",
        "/attributes/customer/id",
        "/attributes/rogue",
    }
    row = Instance.objects.get(pk=created["id"])
    assert (row.current_state, row.status, row.data) == ("pong", "A", {})
    ok = operator_client.patch(
        f"{url}/order?sync=true", {"amount": 5, "customer": {"id": "c-1"}}, format="json"
    )
    assert ok.status_code == 200
    assert ok.json()["attributes"] == {"amount": 5, "customer": {"id": "c-1"}}


def test_malformed_json_is_400(operator_client, flow):
    response = operator_client.post(f"{BASE}/start", "{broken", content_type="application/json")
    problem(response, 400, "App:900002")
    created = start(operator_client).json()
    response = operator_client.patch(
        f"{BASE}/{created['id']}/transitions/to-pong", "[1,", content_type="application/json"
    )
    problem(response, 400, "App:900002")


def test_bad_envelope_fields_are_400(operator_client, flow):
    body = problem(start(operator_client, {"key": "x" * 101, "tags": "nope"}), 400, "App:900002")
    assert {e["pointer"] for e in body["errors"]} == {"/key", "/tags"}


@pytest.mark.parametrize("attributes", ["x", [1], 5, True])
def test_envelope_attributes_that_are_not_an_object_are_400_not_dropped(
    operator_client, flow, attributes
):
    body = problem(start(operator_client, {"attributes": attributes}), 400, "App:900002")
    assert [e["pointer"] for e in body["errors"]] == ["/attributes"]
    assert not Instance.objects.exists()


def test_transition_on_a_completed_instance_is_400(operator_client, flow):
    created = start(operator_client).json()
    url = f"{BASE}/{created['id']}/transitions"
    operator_client.patch(f"{url}/to-pong?sync=true", {}, format="json")
    operator_client.patch(f"{url}/finish?sync=true", {}, format="json")
    for key in ["to-ping", "cancel", "teleport"]:
        problem(operator_client.patch(f"{url}/{key}", {}, format="json"), 400, "Instance:100018")


def test_transition_on_a_faulted_instance_is_409(operator_client, flow):
    created = start(operator_client).json()
    Instance.objects.filter(pk=created["id"]).update(status="F")
    response = operator_client.patch(
        f"{BASE}/{created['id']}/transitions/to-pong", {}, format="json"
    )
    problem(response, 409, "Instance:100028")


def test_automatic_transitions_cannot_be_fired_by_clients(operator_client, db):
    document = workflow(
        [
            state("a", 1, [transition("go", "b")]),
            state(
                "b",
                2,
                [
                    transition(
                        "auto",
                        "c",
                        1,
                        rule={
                            "code": "def handler(context):\n    return False\n",
                            "encoding": "NAT",
                            "location": "./src/R.py",
                        },
                    )
                ],
            ),
            state("c", 3),
        ],
        key="autos",
    )
    publish(document)
    created = operator_client.post(
        "/api/v1/core/workflows/autos/instances/start?sync=true", {}, format="json"
    ).json()
    url = f"/api/v1/core/workflows/autos/instances/{created['id']}/transitions"
    operator_client.patch(f"{url}/go?sync=true", {}, format="json")
    problem(operator_client.patch(f"{url}/auto", {}, format="json"), 400, "Transition:100020")


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("filter=notjson{", "invalid_filter"),
        ("filter={notjson", "invalid_filter"),
        ('filter={"nope": {"eq": 1}}', "invalid_column"),
        ('filter={"status": {"near": "A"}}', "unsupported_operator"),
        ("page=0", "invalid_filter"),
        ("pageSize=1000", "invalid_filter"),
    ],
)
def test_bad_list_queries_are_400(operator_client, flow, query, code):
    problem(operator_client.get(f"{BASE}?{query}"), 400, code)


def test_list_pages_with_links(operator_client, flow):
    ids = [start(operator_client, {"n": n}).json()["id"] for n in range(3)]
    first = operator_client.get(f"{BASE}?pageSize=2&sort=-createdAt").json()
    assert [item["id"] for item in first["items"]] == ids[::-1][:2]
    assert first["hasNext"] is True
    assert first["links"]["prev"] == ""
    second = operator_client.get(first["links"]["next"]).json()
    assert [item["id"] for item in second["items"]] == [ids[0]]
    assert second["hasNext"] is False
    assert second["links"]["next"] == ""
    filtered = operator_client.get(f'{BASE}?filter={{"attributes": {{"n": {{"ge": "1"}}}}}}')
    assert {item["id"] for item in filtered.json()["items"]} == set(ids[1:])


def test_anonymous_callers_get_401(client, flow):
    response = client.post(f"{BASE}/start", {}, content_type="application/json")
    assert response.status_code == 401


def test_the_state_etag_follows_what_the_state_function_shows(operator_client):
    # Not the row's every write: data-only changes keep it, an incident closed by an
    # operator (no write to the instance row) changes it.
    from instances.models import Incident, Instance
    from tests.instances.workflows import ping_pong, publish

    publish(ping_pong())
    base = "/api/v1/core/workflows/ping-pong/instances"
    instance_id = operator_client.post(f"{base}/start?sync=true", {}, format="json").json()["id"]
    state_url = f"{base}/{instance_id}/functions/state"
    first = operator_client.get(state_url)
    etag = first["ETag"]
    assert first.json()["eTag"] == etag.strip('"')
    operator_client.patch(
        f"{base}/{instance_id}/transitions/update-data?sync=true", {"a": 1}, format="json"
    )
    assert operator_client.get(state_url, headers={"If-None-Match": etag}).status_code == 304
    Incident.objects.create(
        instance=Instance.objects.get(pk=instance_id), state="ping", transition_key="x",
        error_code="Task:Http:500", message="boom",
    )  # fmt: skip
    changed = operator_client.get(state_url, headers={"If-None-Match": etag})
    assert changed.status_code == 200
    assert changed.json()["incident"]["hasActiveIncident"] is True


def test_the_data_function_answers_a_past_data_version_or_null(operator_client, flow):
    created = start(operator_client, {"attributes": {"n": 1}}).json()
    url = f"{BASE}/{created['id']}/functions/data"
    operator_client.patch(
        f"{BASE}/{created['id']}/transitions/to-pong?sync=true",
        {"attributes": {"n": 2}},
        format="json",
    )

    assert operator_client.get(url).json()["data"]["n"] == 2
    first = operator_client.get(url, {"version": "1.0.0"})
    assert (first.status_code, first.json()["data"]["n"]) == (200, 1)
    never = operator_client.get(url, {"version": "9.9.9"})
    assert (never.status_code, never.json()["data"]) == (200, None)
    body = problem(operator_client.get(url, {"version": "1." * 40}), 400, "App:900002")
    assert [e["pointer"] for e in body["errors"]] == ["/version"]


def test_a_none_version_strategy_changes_the_data_in_its_version_without_a_second_row(
    operator_client,
):
    publish(
        workflow(
            [state("ready", 1, [transition("note", "ready", versionStrategy="None")])],
            key="noted",
        )
    )
    base = "/api/v1/core/workflows/noted/instances"
    started = operator_client.post(
        f"{base}/start?sync=true", {"attributes": {"n": 1}}, format="json"
    )
    instance_id = started.json()["id"]
    version = Instance.objects.get(pk=instance_id).data_version

    noted = operator_client.patch(
        f"{base}/{instance_id}/transitions/note?sync=true", {"attributes": {"m": 2}}, format="json"
    )

    assert noted.status_code == 200
    assert Instance.objects.get(pk=instance_id).data_version == version
    rows = InstanceDataVersion.objects.filter(instance_id=instance_id)
    assert [(row.version, row.data) for row in rows] == [(version, {"n": 1, "m": 2})]
    at_version = operator_client.get(f"{base}/{instance_id}/functions/data", {"version": version})
    assert at_version.json()["data"] == {"n": 1, "m": 2}
