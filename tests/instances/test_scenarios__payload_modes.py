"""SCENARIOS.md section 4, payload-modes, driven through the HTTP API: the request envelope vs a
free payload under the start and `submit-payload` schema (`additionalProperties: false`), and the
schema-less `complete` that never writes envelope fields into the data."""

from __future__ import annotations

import uuid

import pytest

from instances.models import Instance
from tests.instances.scenario_api import api_fixture, pointers

pytestmark = pytest.mark.django_db

api = api_fixture("payload-modes")
VALID = {"session": "s-1", "customer": {"ownerUserId": "user-1"}}
START = {"attributes": VALID}


# --- 1. equivalent start bodies -------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"key": str(uuid.uuid4()), "attributes": VALID}, id="envelope-with-key"),
        pytest.param({"attributes": VALID}, id="envelope"),
        pytest.param({"Attributes": VALID}, id="envelope-pascal-case"),
        pytest.param(VALID, id="free-payload"),
    ],
)
def test_envelope_and_free_payload_starts_store_the_same_data(api, body):
    response = api.start(body)

    assert response.status_code == 200, response.json()
    answer = response.json()
    assert answer["status"] == "A"
    assert answer["attributes"] == VALID
    assert answer["key"] == body.get("key")
    assert response["ETag"] == f'"{answer["eTag"]}"'
    instance = api.detail(answer["id"])
    assert instance["metadata"]["currentState"] == "collect-payload"
    assert instance["attributes"] == VALID
    data = api.function(answer["id"], "data").json()
    assert data["data"] == VALID


def test_envelope_key_and_tags_go_to_the_instance_not_the_data(api):
    key = f"pm-{uuid.uuid4()}"
    instance_id = api.started({"key": key, "tags": ["a", "b"], "attributes": VALID})

    instance = api.detail(key)
    assert instance["id"] == instance_id
    assert instance["key"] == key
    assert instance["tags"] == ["a", "b"]
    assert instance["attributes"] == VALID


# --- 2. an envelope without attributes is still an envelope ---------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"key": "k1"}, id="key"),
        pytest.param({"key": "k1", "tags": ["t1", "t2"]}, id="key-and-tags"),
        pytest.param({"tags": ["t1"], "stage": "intake"}, id="tags-and-stage"),
    ],
)
def test_envelope_without_attributes_reports_only_missing_business_fields(api, body):
    errors = pointers(api.start(body))

    assert errors == {"/attributes/session": "is required", "/attributes/customer": "is required"}
    assert not any(field in pointer for pointer in errors for field in ("key", "tags", "stage"))
    assert not Instance.objects.exists()


# --- 3. field-level validation errors -------------------------------------------------------------


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        pytest.param({"session": "s-1"}, {"/attributes/customer"}, id="missing-customer"),
        pytest.param(
            {"session": "s-1", "customer": {}},
            {"/attributes/customer/ownerUserId"},
            id="missing-owner",
        ),
        pytest.param({**VALID, "rogue": 1}, {"/attributes/rogue"}, id="extra-property"),
        pytest.param(
            {"session": "s-1", "customer": {"ownerUserId": "u", "rogue": True}},
            {"/attributes/customer/rogue"},
            id="nested-extra-property",
        ),
        pytest.param({**VALID, "session": 42}, {"/attributes/session"}, id="session-type"),
        pytest.param(
            {"session": "s-1", "customer": {"ownerUserId": ""}},
            {"/attributes/customer/ownerUserId"},
            id="owner-too-short",
        ),
    ],
)
def test_start_schema_failures_are_400_with_pointers(api, attributes, expected):
    errors = pointers(api.start({"attributes": attributes}))

    assert set(errors) == expected
    assert all(errors.values())
    assert not Instance.objects.exists()


def test_extra_property_is_reported_at_its_own_pointer_as_not_allowed(api):
    errors = pointers(api.start({"attributes": {**VALID, "rogue": "x"}}))

    assert errors == {"/attributes/rogue": "is not allowed"}


def test_every_violation_is_reported_at_once(api):
    body = {"attributes": {"session": 7, "customer": {}, "rogue": "x"}}

    errors = pointers(api.start(body))

    assert set(errors) == {
        "/attributes/session",
        "/attributes/customer/ownerUserId",
        "/attributes/rogue",
    }
    assert errors["/attributes/customer/ownerUserId"] == "is required"
    assert errors["/attributes/rogue"] == "is not allowed"


def test_violations_are_vnext_validation_errors_too(api):
    # SCENARIOS 4.3: 400 App:900002 with error.validationErrors [{members, message}].
    response = api.start({"attributes": {"session": 7, "customer": {}, "rogue": "x"}})

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "App:900002"
    assert error["message"].startswith("schema validation failed")
    by_member = {entry["members"][0]: entry["message"] for entry in error["validationErrors"]}
    assert set(by_member) == {"session", "customer.ownerUserId", "rogue"}
    assert by_member["rogue"] == "is not allowed"
    free = api.start({"session": "s-1", "customer": {}}).json()["error"]["validationErrors"]
    assert free == [{"members": ["customer.ownerUserId"], "message": "is required"}]


def test_free_payload_errors_point_into_the_body_sent(api):
    errors = pointers(api.start({"session": "s-1", "customer": {}}))

    assert errors == {"/customer/ownerUserId": "is required"}


def test_raw_payload_mode_validates_the_whole_body_as_business_data(api):
    response = api.start(START, headers={"x-vnext-payload-mode": "raw"})

    errors = pointers(response)
    assert errors["/attributes"] == "is not allowed"
    assert {"/session", "/customer"} <= set(errors)


# --- 4. submit-payload validates like start; complete writes no envelope fields -------------------

SUBMITTED = {"session": "s-2", "customer": {"ownerUserId": "user-2"}}


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"key": "ignored-late-key", "attributes": SUBMITTED}, id="envelope-with-key"),
        pytest.param({"attributes": SUBMITTED}, id="envelope"),
        pytest.param({"ATTRIBUTES": SUBMITTED}, id="envelope-upper-case"),
        pytest.param(SUBMITTED, id="free-payload"),
    ],
)
def test_submit_payload_accepts_every_shape_like_start(api, body):
    instance_id = api.started(START)

    response = api.fire(instance_id, "submit-payload", body)

    assert response.status_code == 200, response.json()
    assert response.json()["attributes"] == SUBMITTED
    instance = api.detail(instance_id)
    assert instance["metadata"]["currentState"] == "payload-received"
    assert instance["attributes"] == SUBMITTED


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(
            {"key": "k1", "tags": ["t"]},
            {"/attributes/session", "/attributes/customer"},
            id="envelope-without-attributes",
        ),
        pytest.param(
            {"attributes": {**SUBMITTED, "rogue": 1}}, {"/attributes/rogue"}, id="extra-property"
        ),
        pytest.param(
            {"attributes": {"session": "s", "customer": {}}},
            {"/attributes/customer/ownerUserId"},
            id="missing-owner",
        ),
        pytest.param({**SUBMITTED, "session": []}, {"/session"}, id="free-payload-type"),
    ],
)
def test_submit_payload_schema_failures_leave_the_instance_where_it_was(api, body, expected):
    instance_id = api.started(START)

    errors = pointers(api.fire(instance_id, "submit-payload", body))

    assert set(errors) == expected
    instance = api.detail(instance_id)
    assert instance["metadata"]["currentState"] == "collect-payload"
    assert instance["metadata"]["status"] == "A"
    assert instance["attributes"] == VALID
    assert [row["transitionKey"] for row in api.transitions(instance_id)] == ["start-payload-modes"]


@pytest.mark.parametrize(
    ("body", "written"),
    [
        pytest.param({}, {}, id="empty"),
        pytest.param({"key": "late-key", "tags": ["x"], "stage": "s1"}, {}, id="bare-envelope"),
        pytest.param(
            {"key": "late-key", "tags": ["x"], "stage": "s1", "attributes": {"note": "n"}},
            {"note": "n"},
            id="full-envelope",
        ),
        pytest.param({"note": "n", "extra": {"a": 1}}, {"note": "n", "extra": {"a": 1}}, id="free"),
    ],
)
def test_complete_accepts_every_shape_and_never_writes_envelope_fields(api, body, written):
    instance_id = api.started(START)
    assert api.fire(instance_id, "submit-payload", START).status_code == 200

    response = api.fire(instance_id, "complete", body)

    assert response.status_code == 200, response.json()
    data = api.detail(instance_id)["attributes"]
    assert data == {**VALID, **written}
    assert not {"key", "tags", "stage", "attributes"} & set(data)


# --- 5. happy path --------------------------------------------------------------------------------


def test_happy_path_start_submit_complete(api):
    instance_id = api.started(START)
    assert api.detail(instance_id)["metadata"]["currentState"] == "collect-payload"

    submitted = api.fire(instance_id, "submit-payload", {"attributes": SUBMITTED})
    assert submitted.status_code == 200
    assert submitted.json()["status"] == "A"
    assert api.detail(instance_id)["metadata"]["currentState"] == "payload-received"

    completed = api.fire(instance_id, "complete")
    assert completed.status_code == 200
    assert completed.json()["status"] == "C"

    metadata = api.detail(instance_id)["metadata"]
    assert metadata["currentState"] == "done"
    assert metadata["status"] == "C"
    assert metadata["effectiveStateType"] == "final"
    assert metadata["effectiveStateSubType"] == "success"
    assert metadata["completedAt"] is not None
    assert api.history(instance_id) == [
        ("start-payload-modes", "", "collect-payload", "completed"),
        ("submit-payload", "collect-payload", "payload-received", "completed"),
        ("complete", "payload-received", "done", "completed"),
    ]
    again = api.fire(instance_id, "complete")
    assert again.status_code == 400
    assert again.json()["errorCode"] == "Instance:100018"
