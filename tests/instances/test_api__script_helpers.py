"""Helper libraries end to end: a `sys-mappings` helper and a workflow declaring it in
`attributes.scripts.helpers` are published through the API; a transition's mapping imports the
helper by its key and what it computes lands in the instance data. A workflow importing a
helper it does not declare is refused at publish."""

from __future__ import annotations

from typing import Any

import pytest

from instances.models import Instance
from tests.engine.builders import script, state, transition, workflow
from workflows.models import Component

pytestmark = pytest.mark.django_db
PUBLISH = "/api/v1/definitions/publish"
BASE = "/api/v1/core/workflows/quote/instances"

PRICING = """
import decimal

VAT = decimal.Decimal("0.20")


def total(net):
    amount = decimal.Decimal(str(net)) * (1 + VAT)
    return str(amount.quantize(decimal.Decimal("0.01")))
"""
PRICE_MAPPING = """
from helpers import quote_pricing


def handler(context):
    return {"net": context.body["net"], "total": quote_pricing.total(context.body["net"])}
"""
HELPER = {
    "key": "quote-pricing",
    "domain": "core",
    "version": "1.0.0",
    "flow": "sys-mappings",
    "flowVersion": "1.0.0",
    "tags": ["test"],
    "attributes": {"name": "QuotePricing", "code": PRICING, "encoding": "NAT"},
}
HELPER_REF = {"key": "quote-pricing", "domain": "core", "version": "1.0.0", "flow": "sys-mappings"}


def quote(helpers: list[dict[str, str]]) -> dict[str, Any]:
    return workflow(
        [
            state("open", 1, [transition("price", "priced", mapping=script(PRICE_MAPPING))]),
            state("priced", 3, subType=1),
        ],
        key="quote",
        scripts={"helpers": helpers},
    )


def test_a_transition_mapping_computes_with_the_workflow_s_helper(operator_client):
    published = operator_client.post(PUBLISH, [HELPER, quote([HELPER_REF])], format="json")
    assert published.status_code == 200, published.json()

    started = operator_client.post(f"{BASE}/start?sync=true", {}, format="json")
    assert started.status_code == 200, started.json()
    instance_id = started.json()["id"]
    priced = operator_client.patch(
        f"{BASE}/{instance_id}/transitions/price?sync=true", {"net": 99.99}, format="json"
    )

    assert priced.status_code == 200, priced.json()
    assert priced.json()["attributes"] == {"net": 99.99, "total": "119.99"}
    row = Instance.objects.get(pk=instance_id)
    assert (row.current_state, row.data) == ("priced", {"net": 99.99, "total": "119.99"})


def test_a_workflow_importing_an_undeclared_helper_is_refused_at_publish(operator_client):
    assert operator_client.post(PUBLISH, HELPER, format="json").status_code == 200

    refused = operator_client.post(PUBLISH, quote([]), format="json")

    assert refused.status_code == 400
    body = refused.json()
    assert body["errorCode"] == "App:900006"
    assert [error["pointer"] for error in body["errors"]] == [
        "/attributes/states/0/transitions/0/mapping/code"
    ]
    assert "no helper 'quote_pricing' is declared" in body["errors"][0]["message"]
    assert not Component.objects.filter(key="quote").exists()
