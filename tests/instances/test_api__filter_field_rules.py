"""A filter or sort may not probe what a read hides: on role-matrix-lab's master schema, a field
`x-roles` leaves out for the caller, or masks, hashes or encrypts for them, is refused with
400 `invalid_column` in every form of the query language (filter, sort, groupBy,
aggregations), while a caller who reads it clear may filter on it (and everyone on the
unguarded fields)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.instances.scenario_api import WorkflowApi, import_examples
from tests.instances.test_scenarios__role_matrix_lab import AUDITOR, MAKER, caller

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def examples(db: None) -> None:
    import_examples()


@pytest.fixture
def maker() -> WorkflowApi:
    return caller("mia", MAKER)


@pytest.fixture
def auditor() -> WorkflowApi:
    return caller("aylin", AUDITOR)


def listed(api: WorkflowApi, **query: str) -> Any:
    return api.client.get(api.base, query)


def ids(response: Any) -> list[str]:
    assert response.status_code == 200, response.content
    return [item["id"] for item in response.json()["items"]]


@pytest.mark.parametrize(
    "field",
    [
        pytest.param("auditTrail", id="x-roles-allow-list"),
        pytest.param("decisionNote", id="x-roles-deny"),
        pytest.param("maskedExceptAuditor", id="x-masking"),
        pytest.param("customer.tckn", id="nested-x-masking"),
        pytest.param("hashedCustomerNo", id="x-encryption-hash"),
    ],
)
def test_a_maker_may_not_filter_or_sort_on_what_it_cannot_read(maker, field):
    maker.started({"attributes": {"caseRef": "case-1"}})

    nested: dict[str, Any] = {"eq": "x"}
    for segment in reversed(field.split(".")):
        nested = {segment: nested}
    for response in (
        listed(maker, filter=json.dumps({f"attributes.{field}": {"eq": "x"}})),
        listed(maker, filter=json.dumps({"attributes": nested})),
        listed(maker, filter=f"{field}=eq:x"),
        listed(maker, filter=f"attributes.{field} eq 'x'"),
        listed(maker, sort=f"attributes.{field}"),
        listed(maker, orderBy=json.dumps({"fields": [{"field": f"attributes.{field}"}]})),
        listed(maker, groupBy=json.dumps({"field": f"attributes.{field}"})),
        listed(
            maker, groupBy='{"field": "status"}', aggregations=f'{{"max": "attributes.{field}"}}'
        ),
    ):
        assert response.status_code == 400, response.content
        assert response.json()["errorCode"] == "invalid_column"


def test_the_auditor_filters_on_the_fields_it_reads_clear(maker, auditor):
    ref = maker.started({"attributes": {"caseRef": "case-2"}})

    found = listed(auditor, filter=json.dumps({"attributes.auditTrail": {"eq": "created;seeded"}}))
    missed = listed(auditor, filter="attributes.auditTrail eq 'nothing'")
    masked_for_all = listed(auditor, filter="attributes.maskedForAll eq 'x'")

    assert ids(found) == [ref]
    assert ids(missed) == []
    assert masked_for_all.status_code == 400  # masked for every caller, the auditor too


def test_everyone_filters_on_the_unguarded_fields(maker):
    ref = maker.started({"attributes": {"caseRef": "case-3"}})

    assert ids(listed(maker, filter="attributes.caseRef eq 'case-3'")) == [ref]
    assert ids(listed(maker, sort="attributes.caseRef")) == [ref]
