"""`application/x-www-form-urlencoded` request bodies with bracket paths (API.md section 1,
SCENARIOS.md section 4's payload modes): a form is read as the JSON object it spells, then goes
through the same envelope detection and schema validation; a malformed form is a 400 at the
field's pointer and writes nothing."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from instances.engine.errors import VNextError
from instances.models import Instance
from tests.instances.scenario_api import api_fixture, pointers
from vnext.parsers import bracket_form_to_json

api = api_fixture("payload-modes")
VALID = {"session": "s-1", "customer": {"ownerUserId": "user-1"}}
FORM = "application/x-www-form-urlencoded"


def post_form(api, path: str, fields: list[tuple[str, str]], method: str = "post"):
    send = getattr(api.client, method)
    return send(api.url(*path.split("/")) + "?sync=true", urlencode(fields), content_type=FORM)


# --- the bracket-path reading, no database --------------------------------------------------------


def test_bracket_paths_nest_into_objects_and_lists():
    fields = [
        ("key", ["k-1"]),
        ("tags[]", ["a", "b"]),
        ("attributes[customer][ownerUserId]", ["u-1"]),
        ("attributes[session]", ["s-1"]),
        ("attributes[items][1][name]", ["second"]),
        ("attributes[items][0][name]", ["first"]),
        ("attributes[flags][]", ["only"]),
        ("attributes[repeated]", ["x", "y"]),
        ("attributes[codes][01]", ["leading zero"]),
        ("attributes[codes][²]", ["not a digit"]),
    ]

    assert bracket_form_to_json(fields) == {
        "key": "k-1",
        "tags": ["a", "b"],
        "attributes": {
            "customer": {"ownerUserId": "u-1"},
            "session": "s-1",
            "items": [{"name": "first"}, {"name": "second"}],
            "flags": ["only"],
            "repeated": ["x", "y"],
            "codes": {"01": "leading zero", "²": "not a digit"},
        },
    }


@pytest.mark.parametrize(
    ("fields", "pointer"),
    [
        pytest.param([("a[b", ["1"])], "/a[b", id="unclosed-bracket"),
        pytest.param([("a[][b]", ["1"])], "/a//b", id="append-inside-a-path"),
        pytest.param([("a", ["1"]), ("a[b]", ["2"])], "/a", id="value-and-object"),
        pytest.param([("a[0]", ["1"]), ("a[2]", ["2"])], "/a", id="index-gap"),
        pytest.param([("a[5]", ["1"])], "/a", id="sparse-index"),
    ],
)
def test_malformed_forms_are_refused_at_the_field(fields, pointer):
    with pytest.raises(VNextError) as caught:
        bracket_form_to_json(fields)

    assert caught.value.code == "App:900002"
    assert [v.pointer for v in caught.value.violations] == [pointer]


# --- through the API, on payload-modes ------------------------------------------------------------


@pytest.mark.django_db
def test_a_form_envelope_starts_like_the_json_envelope(api):
    response = post_form(
        api,
        "start",
        [
            ("key", "pm-form-1"),
            ("tags[]", "web"),
            ("attributes[session]", "s-1"),
            ("attributes[customer][ownerUserId]", "user-1"),
        ],
    )

    assert response.status_code == 200, response.json()
    answer = response.json()
    assert answer["attributes"] == VALID
    instance = api.detail("pm-form-1")
    assert instance["tags"] == ["web"]
    assert instance["attributes"] == VALID


@pytest.mark.django_db
def test_a_free_form_payload_is_the_business_data(api):
    response = post_form(api, "start", [("session", "s-1"), ("customer[ownerUserId]", "user-1")])

    assert response.status_code == 200, response.json()
    assert api.detail(response.json()["id"])["attributes"] == VALID


@pytest.mark.django_db
def test_a_form_is_validated_against_the_schema_with_pointers(api):
    response = post_form(api, "start", [("attributes[session]", "s-1"), ("attributes[rogue]", "x")])

    assert pointers(response) == {
        "/attributes/customer": "is required",
        "/attributes/rogue": "is not allowed",
    }
    assert not Instance.objects.exists()


@pytest.mark.django_db
def test_a_malformed_form_is_a_400_at_its_pointer_and_writes_nothing(api):
    response = post_form(api, "start", [("attributes[items][3]", "x")])

    assert response.status_code == 400
    body = response.json()
    assert body["errorCode"] == "App:900002"
    assert body["errors"] == [
        {
            "pointer": "/attributes/items",
            "message": "array indices must run 0, 1, 2, ... without gaps",
        }
    ]
    assert not Instance.objects.exists()


@pytest.mark.django_db
def test_a_form_transition_validates_like_start_and_moves_the_instance(api):
    instance_id = api.started({"attributes": VALID})

    response = post_form(
        api,
        f"{instance_id}/transitions/submit-payload",
        [("attributes[session]", "s-2"), ("attributes[customer][ownerUserId]", "user-2")],
        method="patch",
    )

    assert response.status_code == 200, response.json()
    instance = api.detail(instance_id)
    assert instance["metadata"]["currentState"] == "payload-received"
    assert instance["attributes"] == {"session": "s-2", "customer": {"ownerUserId": "user-2"}}


@pytest.mark.django_db
def test_other_endpoints_still_answer_415_to_a_form(api):
    response = api.client.post(
        "/api/v1/definitions/publish", urlencode({"key": "x"}), content_type=FORM
    )

    assert response.status_code == 415
    assert response.json()["errorCode"] == "App:900007"
