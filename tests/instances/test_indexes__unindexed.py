"""A filter or sort on a data field no search index serves keeps answering exactly, and on a
big table says so: `X-VNext-Unindexed` names the fields and a log line gives the plan's cost
(`VNEXT_UNINDEXED_WARN_ROWS`, the planner's row estimate; 0 here, so every table is big).
Publishing a workflow whose x-indexed fields lack their indexes logs that they are pending."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from instances.api.read_views import UNINDEXED_HEADER
from tests.instances.indexed import BASE, make_instances, publish_indexed

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]
ROWS = 30


@pytest.fixture
def big(settings: Any) -> None:
    settings.VNEXT = {**settings.VNEXT, "UNINDEXED_WARN_ROWS": 0}


@pytest.fixture
def listing(operator_client: Any) -> Any:
    publish_indexed()
    make_instances(ROWS)

    def get(**params: Any) -> Any:
        query = {
            name: json.dumps(value) if isinstance(value, dict) else value
            for name, value in params.items()
        }
        response = operator_client.get(BASE, {"pageSize": "100", **query})
        assert response.status_code == 200, response.content
        return response

    return get


def keys(response: Any) -> list[str]:
    return [item["key"] for item in response.json()["items"]]


def test_a_filter_on_an_unindexed_field_answers_exactly_and_says_so(big, listing, caplog):
    with caplog.at_level(logging.WARNING, logger="instances.indexes"):
        response = listing(filter={"attributes": {"note": {"eq": "note-7"}}})

    assert keys(response) == ["pay-7"]
    assert response[UNINDEXED_HEADER] == "attributes.note"
    [record] = [r for r in caplog.records if r.name == "instances.indexes"]
    message = record.getMessage()
    assert "core/pay" in message
    assert "attributes.note" in message
    assert "plan cost" in message


def test_a_sort_and_a_range_on_unindexed_fields_answer_in_order(big, listing):
    response = listing(filter={"attributes": {"note": {"ge": "note-27"}}}, sort="-attributes.note")

    # Compared and sorted as text: "note-3" follows "note-29".
    assert keys(response) == [*(f"pay-{i}" for i in range(9, 2, -1)), "pay-29", "pay-28", "pay-27"]
    assert response[UNINDEXED_HEADER] == "attributes.note"


def test_indexed_fields_filtered_and_sorted_as_their_indexes_serve_say_nothing(big, listing):
    response = listing(
        filter={
            "and": [
                {"attributes": {"amount": {"gt": "20"}}},
                {"attributes": {"name": {"like": "NAME-2"}}},
                {"attributes": {"when": {"ge": "2024-01-01T23:00:00+01:00"}}},
                {"attributes.customer.id": {"isnull": False}},
            ]
        },
        sort="-attributes.amount",
    )

    assert keys(response) == [f"pay-{i}" for i in range(29, 21, -1)]
    assert UNINDEXED_HEADER not in response


def test_an_operator_an_indexed_fields_indexes_do_not_serve_is_named(big, listing):
    # A number field gets no trigram index: `like` on it reads every row (and matches no
    # number: text operators match strings only).
    like = listing(filter={"attributes": {"amount": {"like": "2"}}})
    unindexed_and_indexed = listing(
        filter={"attributes": {"note": {"eq": "note-1"}, "amount": {"eq": 1}}}
    )

    assert keys(like) == []
    assert like[UNINDEXED_HEADER] == "attributes.amount"
    assert keys(unindexed_and_indexed) == ["pay-1"]
    assert unindexed_and_indexed[UNINDEXED_HEADER] == "attributes.note"


def test_groups_over_an_unindexed_filter_say_so_too(big, listing):
    response = listing(
        filter={"attributes": {"note": {"startswith": "note-2"}}},
        groupBy={"field": "status"},
    )

    assert {group["name"]: group["count"] for group in response.json()["groups"]} == {
        "A": 9,
        "C": 2,
    }
    assert response[UNINDEXED_HEADER] == "attributes.note"


def test_below_the_threshold_nothing_is_said(listing, caplog):
    # The default threshold (100,000 rows) is far above this table.
    with caplog.at_level(logging.WARNING, logger="instances.indexes"):
        response = listing(filter={"attributes": {"note": {"eq": "note-7"}}})

    assert keys(response) == ["pay-7"]
    assert UNINDEXED_HEADER not in response
    assert not [r for r in caplog.records if r.name == "instances.indexes"]


def test_publishing_x_indexed_fields_without_their_indexes_logs_them_pending(caplog):
    with caplog.at_level(logging.WARNING, logger="workflows.services"):
        publish_indexed()

    [record] = [r for r in caplog.records if r.name == "workflows.services"]
    message = record.getMessage()
    assert message.startswith("core/pay 1.0.0: the search indexes of its x-indexed fields ")
    assert "attributes.amount, attributes.customer.id, attributes.name, attributes.when" in message
    assert "manage.py indexes_apply --workflow core/pay" in message
