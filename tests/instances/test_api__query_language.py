"""vNext's query language over HTTP on PostgreSQL (`doc/en/flow/instance-filtering.md`, every
example of it, and those of `how-to/start-instance.md` and `tasks/get-instances-task.md`): the
GraphQL-style JSON, the legacy `field=operator:value`, groupBy with aggregations, sort /
orderBy, the operand and filter limits, values that look like syntax matched exactly, and the
page links. Each test asserts the exact set (or order) of instances the list returns."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import pytest

from instances.filters import OPERATORS
from instances.instance_reader import OrmInstanceReader
from instances.job_handlers import jobs_run_due
from instances.models import Instance
from tests.engine.builders import script, state, transition, workflow
from tests.instances.workflows import publish

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

FLOW = "payment-workflow"
BASE = f"/api/v1/core/workflows/{FLOW}/instances"


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# Five payments, varied in every column and data field the examples name.
ROWS: dict[str, dict[str, Any]] = {
    "p1": {
        "key": "payment-12345",
        "status": "A",
        "current_state": "awaiting-approval",
        "effective_state_subtype": "human",
        "created_at": at("2024-01-05T09:00:00"),
        "data": {
            "customerId": "CUST-123",
            "amount": 1500,
            "currency": "USD",
            "status": "pending",
            "priority": "high",
        },
    },
    "p2": {
        "key": "payment-12346",
        "status": "B",
        "current_state": "processing",
        "effective_state_subtype": "busy",
        "created_at": at("2024-01-20T09:00:00"),
        "data": {
            "customerId": "CUST-456",
            "amount": 300,
            "currency": "EUR",
            "status": "approved",
            "priority": "low",
        },
    },
    "p3": {
        "key": "invoice-1",
        "status": "A",
        "current_state": "awaiting-approval",
        "effective_state_subtype": "human",
        "created_at": at("2024-02-10T09:00:00"),
        "data": {
            "customerId": "CUST-123",
            "amount": 20000,
            "currency": "USD",
            "status": "pending",
            "priority": "low",
        },
    },
    "p4": {
        "key": "payment-9",
        "status": "C",
        "current_state": "done",
        "effective_state_subtype": "success",
        "created_at": at("2023-12-31T23:00:00"),
        "completed_at": at("2024-01-02T00:00:00"),
        "data": {"customerId": "CUST-789", "amount": 50, "currency": "USD", "status": "approved"},
    },
    "p5": {
        "key": None,
        "status": "F",
        "current_state": "processing",
        "effective_state_subtype": "none",
        # Later on the last day of January: after its midnight.
        "created_at": at("2024-01-31T12:00:00"),
        "data": {
            "customerId": "cust-123",
            "amount": "700",  # a string: compared as text, never summed
            "currency": "EUR",
            "status": "rejected",
            "priority": "high",
        },
    },
}


@pytest.fixture
def rows(db: None) -> dict[str, str]:
    """The payments; label -> instance id."""
    publish(
        workflow(
            [
                state("awaiting-approval", 1, [transition("process", "processing")]),
                state("processing", 2, [transition("finish", "done")]),
                state("done", 3, subType=1),
            ],
            key=FLOW,
        )
    )
    made = {}
    for label, spec in ROWS.items():
        instance = Instance.objects.create(
            domain="core",
            workflow_key=FLOW,
            workflow_version="1.0.0",
            effective_state=spec["current_state"],
            effective_state_type="final" if spec["status"] == "C" else "intermediate",
            etag="e",
            entity_etag="e",
            **spec,
        )
        made[label] = str(instance.id)
    return made


def listed(client: Any, **params: Any) -> Any:
    """The list's answer (any status) for these query parameters; lists repeat a parameter."""
    query = urlencode(
        [
            (name, json.dumps(value) if isinstance(value, dict | list) else value)
            for name, values in params.items()
            for value in (values if isinstance(values, tuple) else (values,))
        ]
    )
    return client.get(f"{BASE}?{query}")


def selected(client: Any, rows: dict[str, str], **params: Any) -> set[str]:
    """The labels of the instances the list returns."""
    response = listed(client, pageSize="100", **params)
    assert response.status_code == 200, response.content
    label_of = {instance_id: label for label, instance_id in rows.items()}
    return {label_of[item["id"]] for item in response.json()["items"]}


def ordered(client: Any, rows: dict[str, str], **params: Any) -> list[str]:
    response = listed(client, pageSize="100", **params)
    assert response.status_code == 200, response.content
    label_of = {instance_id: label for label, instance_id in rows.items()}
    return [label_of[item["id"]] for item in response.json()["items"]]


# --- instance-filtering.md, "GraphQL Format Examples" and "Logical Operators" -----------------


@pytest.mark.parametrize(
    ("example", "expected"),
    [
        pytest.param({"key": {"eq": "payment-12345"}}, {"p1"}, id="1-simple-column"),
        pytest.param(
            {"status": {"eq": "Active"}, "createdAt": {"gt": "2024-01-01"}},
            {"p1", "p3"},
            id="2-several-columns-and",
        ),
        pytest.param(
            {"attributes": {"customerId": {"eq": "CUST-123"}}}, {"p1", "p3"}, id="3-data-field"
        ),
        pytest.param(
            {
                "key": {"like": "payment"},
                "status": {"eq": "Active"},
                "attributes": {"amount": {"gt": "500"}},
            },
            {"p1"},
            id="4-mixed",
        ),
        # A date alone is its midnight (UTC): p5, later on the 31st, is outside.
        pytest.param(
            {"createdAt": {"between": ["2024-01-01", "2024-01-31"]}},
            {"p1", "p2"},
            id="5-date-range",
        ),
        pytest.param({"status": {"in": ["Active", "Busy"]}}, {"p1", "p2", "p3"}, id="6-status-in"),
        pytest.param(
            {"effectiveState": {"eq": "awaiting-approval"}}, {"p1", "p3"}, id="7-effective-state"
        ),
        pytest.param({"effectiveStateSubType": {"eq": "6"}}, {"p1", "p3"}, id="7-subtype-human"),
        pytest.param({"effectiveStateSubType": {"eq": "5"}}, {"p2"}, id="7-subtype-busy"),
        pytest.param(
            {"status": {"eq": "Active"}, "effectiveStateSubType": {"eq": "6"}},
            {"p1", "p3"},
            id="7-status-and-subtype",
        ),
        pytest.param(
            {"and": [{"status": {"eq": "Active"}}, {"attributes": {"amount": {"gt": "500"}}}]},
            {"p1", "p3"},
            id="and",
        ),
        pytest.param(
            {"or": [{"key": {"eq": "payment-12345"}}, {"key": {"eq": "payment-12346"}}]},
            {"p1", "p2"},
            id="or",
        ),
        pytest.param(
            {"not": {"status": {"in": ["Completed", "Faulted"]}}}, {"p1", "p2", "p3"}, id="not"
        ),
        pytest.param(
            {
                "and": [
                    {"status": {"eq": "Active"}},
                    {
                        "or": [
                            {"attributes": {"priority": {"eq": "high"}}},
                            {"attributes": {"amount": {"gt": "10000"}}},
                        ]
                    },
                ]
            },
            {"p1", "p3"},
            id="complex-nested",
        ),
        pytest.param(
            {"and": [{"status": {"eq": "Active"}}, {"attributes.amount": {"gt": "500"}}]},
            {"p1", "p3"},
            id="v0.0.37-note-dotted-path",
        ),
        pytest.param({"status": {"eq": "A"}}, {"p1", "p3"}, id="best-practice-status-code"),
        pytest.param({"status": {"eq": "Active"}}, {"p1", "p3"}, id="best-practice-status-name"),
    ],
)
def test_documented_filter_examples(operator_client, rows, example, expected):
    assert selected(operator_client, rows, filter=example) == expected


@pytest.mark.parametrize(
    ("example", "expected"),
    [
        # how-to/start-instance.md, "Filtering Instances".
        pytest.param({"status": {"eq": "Active"}}, {"p1", "p3"}, id="start-instance-status"),
        # p5's amount is the string "700": compared as text, "700" > "1000".
        pytest.param(
            {"attributes": {"amount": {"gt": "1000"}}},
            {"p1", "p3", "p5"},
            id="start-instance-data",
        ),
        pytest.param(
            {"or": [{"status": {"eq": "Active"}}, {"status": {"eq": "Busy"}}]},
            {"p1", "p2", "p3"},
            id="start-instance-or",
        ),
        # tasks/get-instances-task.md: lower-case status names and dotted data paths.
        pytest.param({"status": {"eq": "active"}}, {"p1", "p3"}, id="task-status-lowercase"),
        pytest.param(
            {"and": [{"status": {"eq": "active"}}, {"attributes.amount": {"gt": "500"}}]},
            {"p1", "p3"},
            id="task-and",
        ),
        pytest.param(
            {"and": [{"state": {"eq": "processing"}}, {"attributes.priority": {"eq": "high"}}]},
            {"p5"},
            id="task-state-and-priority",
        ),
    ],
)
def test_examples_of_the_other_documents(operator_client, rows, example, expected):
    assert selected(operator_client, rows, filter=example) == expected


def test_a_number_as_a_string_matches_numbers_as_numbers_and_text_as_text(operator_client, rows):
    # p5's "700" is text: "700" > "5000" as text, so it matches; every number is compared as
    # a number.
    assert selected(operator_client, rows, filter={"attributes": {"amount": {"gt": "5000"}}}) == {
        "p3",
        "p5",
    }
    assert selected(operator_client, rows, filter={"attributes": {"amount": {"gt": 5000}}}) == {
        "p3"
    }


def test_like_is_contains_case_insensitive(operator_client, rows):
    assert selected(
        operator_client, rows, filter={"attributes": {"customerId": {"like": "cust-12"}}}
    ) == {"p1", "p3", "p5"}
    assert selected(operator_client, rows, filter={"key": {"like": "PAYMENT-1234"}}) == {
        "p1",
        "p2",
    }
    assert selected(operator_client, rows, filter={"key": {"startswith": "payment"}}) == {
        "p1",
        "p2",
        "p4",
    }
    assert selected(operator_client, rows, filter={"key": {"endswith": "-1"}}) == {"p3"}


# --- the legacy form --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("legacy", "expected"),
    [
        ("customerId=eq:CUST-123", {"p1", "p3"}),
        ("attributes=customerId=eq:CUST-123", {"p1", "p3"}),
        ("attributes.customerId=eq:CUST-123", {"p1", "p3"}),
        ("status=eq:Active", {"p1", "p3"}),
        ("key=eq:payment-12345", {"p1"}),
        ("amount=gt:1000", {"p1", "p3", "p5"}),  # "700" > "1000" as text
        ("amount=between:100,1500", {"p1", "p2"}),
        ("currency=in:USD,GBP", {"p1", "p3", "p4"}),
        ("currency=nin:USD,GBP", {"p2", "p5"}),
        ("customerId=like:cust", {"p1", "p2", "p3", "p4", "p5"}),
        ("customerId=startswith:CUST-1", {"p1", "p3"}),
        ("priority=isnull:true", {"p4"}),
        ("createdAt=gt:2024-01-31", {"p3", "p5"}),
        ("state=eq:processing", {"p2", "p5"}),
    ],
)
def test_legacy_form(operator_client, rows, legacy, expected):
    assert selected(operator_client, rows, filter=legacy) == expected


def test_repeated_filters_must_all_hold(operator_client, rows):
    both = ("status=eq:Active", "attributes=amount=gt:10000")
    assert selected(operator_client, rows, filter=both) == {"p3"}
    mixed = ('{"status": {"eq": "Active"}}', "priority=eq:high")
    assert selected(operator_client, rows, filter=mixed) == {"p1"}


# --- values that look like syntax -----------------------------------------------------------

TRICKY = {
    "quote": 'it\'s "quoted"',
    "backslash": "C:\\path\\to\\",
    "newline": "line one\nline two\r\n\ttabbed",
    "sql": "'; DROP TABLE instances_instance; --",
    "wildcards": "100%_done",
    "comma-colon": "a=eq:b,c",
    "unicode": "İstanbul ğüşöç",
}


@pytest.fixture
def tricky(rows: dict[str, str]) -> dict[str, str]:
    """One instance per tricky note; label -> id."""
    made = {}
    for label, note in TRICKY.items():
        instance = Instance.objects.create(
            domain="core",
            workflow_key=FLOW,
            workflow_version="1.0.0",
            key=f"tricky-{label}",
            status="A",
            current_state="awaiting-approval",
            effective_state="awaiting-approval",
            etag="e",
            entity_etag="e",
            data={"note": note},
        )
        made[label] = str(instance.id)
    return made


@pytest.mark.parametrize("label", list(TRICKY))
def test_values_are_matched_exactly(operator_client, rows, tricky, label):
    note = TRICKY[label]
    everyone = {**rows, **tricky}

    nested = selected(operator_client, everyone, filter={"attributes": {"note": {"eq": note}}})
    legacy = selected(operator_client, everyone, filter=f"note=eq:{note}")
    contains = selected(operator_client, everyone, filter={"attributes.note": {"like": note}})
    text_form = selected(
        operator_client,
        everyone,
        filter=f"attributes.note eq '{note.replace(chr(39), chr(39) * 2)}'",
    )

    assert nested == legacy == contains == text_form == {label}
    assert Instance.objects.filter(workflow_key=FLOW).count() == len(ROWS) + len(TRICKY)


def test_like_wildcards_are_literal(operator_client, rows, tricky):
    everyone = {**rows, **tricky}
    assert selected(operator_client, everyone, filter={"attributes": {"note": {"like": "%"}}}) == {
        "wildcards"
    }
    assert selected(operator_client, everyone, filter={"attributes": {"note": {"like": "_"}}}) == {
        "wildcards",
        "sql",  # instances_instance
    }
    assert selected(operator_client, everyone, filter="note=like:\\") == {"backslash"}


def test_a_value_list_element_keeps_its_characters(operator_client, rows, tricky):
    everyone = {**rows, **tricky}
    notes = [TRICKY["sql"], TRICKY["newline"]]
    assert selected(operator_client, everyone, filter={"attributes.note": {"in": notes}}) == {
        "sql",
        "newline",
    }


# --- limits -----------------------------------------------------------------------------------


def test_an_operand_of_1000_characters_is_accepted_and_1001_refused(operator_client, rows):
    Instance.objects.filter(pk=rows["p1"]).update(data={"note": "x" * 1000})

    accepted = selected(operator_client, rows, filter={"attributes": {"note": {"eq": "x" * 1000}}})
    refused = listed(operator_client, filter={"attributes": {"note": {"eq": "x" * 1001}}})
    legacy_refused = listed(operator_client, filter=f"note=eq:{'x' * 1001}")

    assert accepted == {"p1"}
    for response in (refused, legacy_refused):
        assert response.status_code == 400
        body = response.json()
        assert body["errorCode"] == "invalid_filter"
        assert "1001 characters" in body["detail"]
        assert "limited to 1000" in body["detail"]


@pytest.mark.parametrize("op", ["in", "nin", "between"])
def test_each_list_element_is_held_to_the_operand_limit(operator_client, rows, op):
    fine = listed(operator_client, filter={"attributes": {"note": {op: ["a" * 1000, "b"]}}})
    too_long = listed(operator_client, filter={"attributes": {"note": {op: ["a", "b" * 1001]}}})
    legacy = listed(operator_client, filter=f"note={op}:a,{'b' * 1001}")

    assert fine.status_code == 200, fine.content
    for response in (too_long, legacy):
        assert response.status_code == 400
        assert response.json()["errorCode"] == "invalid_filter"
        assert "limited to 1000" in response.json()["detail"]


def _filter_of_length(length: int) -> str:
    """A valid JSON filter of exactly `length` characters that selects p1."""
    head = '{"or": [{"key": {"eq": "payment-12345"}}'
    tail = "]}"
    pads = []
    size = len(head) + len(tail)
    while size < length:
        wrapper = len(', {"key": {"eq": ""}}')
        room = min(1000, length - size - wrapper)
        if room < 0:  # too little left for another clause: widen the previous one
            break
        pads.append("z" * room)
        size += wrapper + room
    text = head + "".join(f', {{"key": {{"eq": "{pad}"}}}}' for pad in pads) + tail
    if len(text) < length:
        text = text.replace('"payment-12345"', '"payment-12345"' + " " * (length - len(text)), 1)
    assert len(text) == length
    return text


def test_a_filter_of_5000_characters_is_accepted_and_5001_refused(operator_client, rows):
    accepted = listed(operator_client, filter=_filter_of_length(5000))
    refused = listed(operator_client, filter=_filter_of_length(5001))

    assert accepted.status_code == 200, accepted.content
    assert {item["id"] for item in accepted.json()["items"]} == {rows["p1"]}
    assert refused.status_code == 400
    assert refused.json()["errorCode"] == "invalid_filter"
    assert "5001 characters" in refused.json()["detail"]
    assert "limit is 5000" in refused.json()["detail"]


# --- groupBy ----------------------------------------------------------------------------------


def test_group_by_with_count(operator_client, rows):
    example = {"groupBy": {"field": "attributes.status", "aggregations": {"count": True}}}
    response = listed(operator_client, filter=example)

    assert response.status_code == 200, response.content
    assert response.json() == {
        "groups": [
            {"name": "approved", "count": 2},
            {"name": "pending", "count": 2},
            {"name": "rejected", "count": 1},
        ]
    }


def test_group_by_with_every_aggregation(operator_client, rows):
    example = {
        "groupBy": {
            "field": "attributes.currency",
            "aggregations": {
                "count": True,
                "sum": "attributes.amount",
                "avg": "attributes.amount",
                "min": "attributes.amount",
                "max": "attributes.amount",
            },
        }
    }
    groups = listed(operator_client, filter=example).json()["groups"]

    # EUR's "700" is a string: counted, but no number to sum.
    assert groups == [
        {"name": "EUR", "count": 2, "sum": 300, "avg": 300, "min": 300, "max": 300},
        {
            "name": "USD",
            "count": 3,
            "sum": 21550,
            "avg": pytest.approx(21550 / 3),
            "min": 50,
            "max": 20000,
        },
    ]


def test_group_by_in_the_envelope_with_a_filter(operator_client, rows):
    envelope = {
        "filter": {"attributes": {"status": {"eq": "pending"}}},
        "groupBy": {"field": "attributes.currency"},
        "aggregations": {"count": True, "sum": "attributes.amount"},
    }
    assert listed(operator_client, filter=envelope).json() == {
        "groups": [{"name": "USD", "count": 2, "sum": 21500}]
    }


def test_group_by_as_parameters_and_on_several_fields(operator_client, rows):
    as_parameters = listed(
        operator_client,
        filter={"status": {"in": ["Active", "Busy"]}},
        groupBy={"fields": ["status", "attributes.priority"]},
        aggregations={"count": True, "max": "attributes.amount"},
    )
    assert as_parameters.json() == {
        "groups": [
            {"name": ["A", "high"], "count": 1, "max": 1500},
            {"name": ["A", "low"], "count": 1, "max": 20000},
            {"name": ["B", "low"], "count": 1, "max": 300},
        ]
    }
    missing_field = listed(operator_client, groupBy={"field": "attributes.priority"})
    assert missing_field.json()["groups"][-1] == {"name": None, "count": 1}  # p4 has none


def test_group_by_a_date_column_min_and_max(operator_client, rows):
    groups = listed(
        operator_client,
        groupBy={"field": "status"},
        aggregations={"count": True, "min": "createdAt", "max": "createdAt"},
    ).json()["groups"]
    assert groups[0] == {
        "name": "A",
        "count": 2,
        "min": "2024-01-05T09:00:00+00:00",
        "max": "2024-02-10T09:00:00+00:00",
    }


@pytest.mark.parametrize(
    "group",
    [
        {"groupBy": {"field": "nope"}},
        {"groupBy": {}},
        {"groupBy": {"field": "status", "fields": ["key"]}},
        {"groupBy": {"field": "status", "aggregations": {"median": "attributes.amount"}}},
        {"groupBy": {"field": "status", "aggregations": {"sum": "status"}}},
        {"groupBy": {"field": "status", "aggregations": {"count": "yes"}}},
    ],
)
def test_bad_group_by_is_400(operator_client, rows, group):
    response = listed(operator_client, filter=group)
    assert response.status_code == 400
    assert response.json()["errorCode"] in ("invalid_filter", "invalid_column")


# --- sort / orderBy and paging -----------------------------------------------------------------


def test_sort_by_one_field_either_parameter(operator_client, rows):
    newest = ordered(operator_client, rows, sort={"field": "createdAt", "direction": "desc"})
    by_status = ordered(operator_client, rows, orderBy={"field": "key", "direction": "asc"})

    assert newest == ["p3", "p5", "p2", "p1", "p4"]
    assert by_status == ["p3", "p1", "p2", "p4", "p5"]  # no key sorts last


def test_sort_by_several_fields(operator_client, rows):
    documented = {
        "fields": [
            {"field": "status", "direction": "asc"},
            {"field": "createdAt", "direction": "desc"},
        ]
    }
    assert ordered(operator_client, rows, sort=documented) == ["p3", "p1", "p2", "p4", "p5"]
    by_data = {
        "fields": [
            {"field": "attributes.currency", "direction": "DESC"},
            {"field": "attributes.amount"},
        ]
    }
    # Within EUR, p5's string "700" sorts before the number 300 (PostgreSQL orders JSON strings
    # before numbers).
    assert ordered(operator_client, rows, sort=by_data) == ["p4", "p1", "p3", "p5", "p2"]


def test_sort_and_order_by_together_are_refused(operator_client, rows):
    response = listed(operator_client, sort="createdAt", orderBy="key")
    assert response.status_code == 400
    assert response.json()["errorCode"] == "invalid_filter"


def test_page_links_are_strings_empty_where_there_is_no_page(operator_client, rows):
    first = listed(operator_client, sort="createdAt", pageSize="2").json()
    middle = listed(operator_client, sort="createdAt", pageSize="2", page="2").json()
    last = listed(operator_client, sort="createdAt", pageSize="2", page="3").json()

    assert first["links"]["prev"] == ""
    assert last["links"]["next"] == ""
    for body in (first, middle, last):
        assert all(isinstance(link, str) for link in body["links"].values())
    assert parse_qs(urlparse(first["links"]["next"]).query)["page"] == ["2"]
    assert parse_qs(urlparse(middle["links"]["prev"]).query)["page"] == ["1"]
    assert parse_qs(urlparse(middle["links"]["next"]).query)["page"] == ["3"]
    assert parse_qs(urlparse(last["links"]["self"]).query)["page"] == ["3"]
    assert parse_qs(urlparse(last["links"]["first"]).query)["page"] == ["1"]
    walked = [item["id"] for body in (first, middle, last) for item in body["items"]]
    assert walked == [rows[label] for label in ("p4", "p1", "p2", "p5", "p3")]


def test_documented_pagination_parameters(operator_client, rows):
    body = listed(operator_client, filter={"status": {"eq": "Active"}}, page="1", pageSize="20")
    assert {item["id"] for item in body.json()["items"]} == {rows["p1"], rows["p3"]}
    assert body.json()["links"]["next"] == body.json()["links"]["prev"] == ""


# --- the documented errors --------------------------------------------------------------------


def test_invalid_filter_syntax(operator_client, rows):
    body = listed(operator_client, filter='{"status": ').json()
    assert body["error"]["code"] == "invalid_filter"
    assert body["error"]["message"].startswith("Invalid filter syntax. Valid JSON expected.")


def test_unsupported_operator(operator_client, rows):
    body = listed(operator_client, filter={"attributes": {"name": {"regex": "^a"}}}).json()
    assert body["error"] == {
        "code": "unsupported_operator",
        "message": "'regex' operator is not supported on 'attributes.name'",
        "supportedOperators": list(OPERATORS),
    }
    assert body["error"]["supportedOperators"] == [
        "eq",
        "ne",
        "gt",
        "ge",
        "lt",
        "le",
        "between",
        "like",
        "startswith",
        "endswith",
        "in",
        "nin",
        "isnull",
    ]


def test_invalid_column(operator_client, rows):
    body = listed(operator_client, filter={"invalidColumn": {"eq": "x"}}).json()
    assert body["error"]["code"] == "invalid_column"
    assert body["error"]["message"] == (
        "'invalidColumn' is not a valid Instance column. Use 'attributes.fieldName' for JSON "
        "fields."
    )
    documented = ["key", "flow", "status", "currentState", "createdAt", "modifiedAt"]
    assert {*documented, "completedAt", "isTransient"} <= set(body["error"]["validColumns"])


# --- GetInstances tasks (type 15) read through the same language ----------------------------


@pytest.mark.parametrize(
    ("config_filter", "expected"),
    [
        ('{"status":{"eq":"active"}}', {"p1", "p3"}),
        ('{"and":[{"status":{"eq":"Active"}},{"attributes.amount":{"gt":"1000"}}]}', {"p1", "p3"}),
        ('{"and":[{"state":{"eq":"processing"}},{"attributes.priority":{"eq":"high"}}]}', {"p5"}),
        ("priority=eq:high", {"p1", "p5"}),
        ({"attributes": {"currency": {"eq": "EUR"}}}, {"p2", "p5"}),  # an object in the config
    ],
)
def test_the_get_instances_reader_takes_the_documented_filters(rows, config_filter, expected):
    items = OrmInstanceReader().instances(
        "core", FLOW, filter_text=config_filter, page=1, page_size=50
    )
    label_of = {instance_id: label for label, instance_id in rows.items()}
    assert {label_of[item["id"]] for item in items} == expected


def test_the_get_instances_reader_takes_a_list_of_filters_and_a_sort(rows):
    # A task config's `filter` list: every one must hold; its `sort` orders the page.
    items = OrmInstanceReader().instances(
        "core",
        FLOW,
        filter_text=['{"status":{"eq":"active"}}', {"attributes": {"amount": {"gt": "1000"}}}],
        page=1,
        page_size=50,
        sort="attributes.amount",
    )
    label_of = {instance_id: label for label, instance_id in rows.items()}
    labels = [label_of[item["id"]] for item in items]
    assert set(labels) == {"p1", "p3"}
    amounts = [item["data"]["amount"] for item in items]
    assert amounts == sorted(amounts)


# --- event mappings that answer a filter ------------------------------------------------------

NUDGE_MAPPING = """
def handler(context):
    return {"filter": context.event_payload["select"], "body": {"nudged": True}}
"""


@pytest.mark.parametrize(
    "select",
    [
        {"attributes": {"region": {"eq": "north"}}},  # a JSON filter object
        '{"attributes": {"region": {"like": "NORTH"}}}',
        "region=eq:north",
    ],
)
def test_an_event_mapping_selects_instances_with_the_query_language(operator_client, select):
    publish(
        workflow(
            [
                state(
                    "waiting",
                    1,
                    [transition("nudge", "nudged", 3, event={"mapping": script(NUDGE_MAPPING)})],
                ),
                state("nudged", 3, subType=1),
            ],
            key="nudge-flow",
        )
    )
    base = "/api/v1/core/workflows/nudge-flow/instances"
    started = {
        region: operator_client.post(
            f"{base}/start?sync=true", {"region": region}, format="json"
        ).json()["id"]
        for region in ("north", "south", "northeast")
    }

    answer = operator_client.post(
        f"{base}/events?action=transition&transitionKey=nudge", {"select": select}, format="json"
    )
    jobs_run_due()

    assert answer.status_code == 200, answer.content
    wanted = (
        {started["north"], started["northeast"]} if "like" in str(select) else {started["north"]}
    )
    assert set(answer.json()["instances"]) == wanted
    nudged = Instance.objects.filter(workflow_key="nudge-flow", current_state="nudged")
    assert {str(pk) for pk in nudged.values_list("pk", flat=True)} == wanted


# --- functions/data?filter= -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data_filter", "shown"),
    [
        ({"attributes": {"amount": {"gt": "1000"}}}, True),
        ({"attributes": {"amount": {"gt": "100000"}}}, False),
        ("currency=eq:USD", True),
        ("currency=eq:EUR", False),
        ({"status": {"eq": "Active"}, "attributes": {"priority": {"eq": "high"}}}, True),
    ],
)
def test_the_data_function_answers_only_an_instance_the_filter_selects(
    operator_client, rows, data_filter, shown
):
    value = json.dumps(data_filter) if isinstance(data_filter, dict) else data_filter
    response = operator_client.get(f"{BASE}/{rows['p1']}/functions/data", {"filter": value})

    assert response.status_code == 200, response.content
    assert response.json()["data"] == (ROWS["p1"]["data"] if shown else None)
    assert "ETag" not in response  # whether it matches is no part of any ETag


def test_the_data_function_refuses_a_bad_filter_or_a_group_by(operator_client, rows):
    url = f"{BASE}/{rows['p1']}/functions/data"
    bad = operator_client.get(url, {"filter": '{"nope": {"eq": 1}}'})
    grouped = operator_client.get(url, {"filter": '{"groupBy": {"field": "status"}}'})

    assert (bad.status_code, bad.json()["errorCode"]) == (400, "invalid_column")
    assert (grouped.status_code, grouped.json()["errorCode"]) == (400, "invalid_filter")
