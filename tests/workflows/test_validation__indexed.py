"""`x-indexed` at publish: true or false, and true only on a field reached from the root
through nested `properties` (its search indexes are on that one path); never on a field a
transform hides (test_validation__mutations.py covers those)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import DictResolver
from workflows.validation import validate_component

ROOT = "/attributes/schema"


def schema(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "key": "indexed",
        "domain": "core",
        "version": "1.0.0",
        "flow": "sys-schemas",
        "flowVersion": "1.0.0",
        "tags": ["test"],
        "attributes": {"type": "schema", "schema": {"type": "object", **body}},
    }


def violations(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [(v.pointer, v.message) for v in validate_component(schema(body), DictResolver([]))]


def test_fields_reached_through_properties_may_be_indexed():
    body = {
        "properties": {
            "amount": {"type": "number", "x-indexed": True},
            "note": {"type": "string", "x-indexed": False},
            "customer": {"type": "object", "properties": {"id": {"x-indexed": True}}},
        }
    }
    assert violations(body) == []


def test_x_indexed_is_true_or_false():
    assert violations({"properties": {"amount": {"x-indexed": "yes"}}}) == [
        (f"{ROOT}/properties/amount/x-indexed", "x-indexed is true or false")
    ]


ELSEWHERE = (
    "an indexed field is reached from the root through nested properties (not the root, nor "
    "under items, $defs, combinators or conditions): its indexes are on that one path"
)


@pytest.mark.parametrize(
    ("body", "pointer"),
    [
        ({"x-indexed": True, "properties": {}}, "/x-indexed"),
        (
            {"properties": {"lines": {"type": "array", "items": {"x-indexed": True}}}},
            "/properties/lines/items/x-indexed",
        ),
        (
            {"properties": {"lines": {"items": {"properties": {"sku": {"x-indexed": True}}}}}},
            "/properties/lines/items/properties/sku/x-indexed",
        ),
        (
            {"$defs": {"money": {"properties": {"amount": {"x-indexed": True}}}}},
            "/$defs/money/properties/amount/x-indexed",
        ),
        (
            {"oneOf": [{"properties": {"amount": {"x-indexed": True}}}]},
            "/oneOf/0/properties/amount/x-indexed",
        ),
    ],
    ids=["root", "items", "under-items", "defs", "combinator"],
)
def test_an_indexed_mark_anywhere_else_is_refused_with_its_pointer(body, pointer):
    assert violations(body) == [(f"{ROOT}{pointer}", ELSEWHERE)]
