"""Bad input is never a 500 (issue "Access control and the API contract", item 5): an oversized
body is 413, JSON nested past the parser's limit, over-long numbers in the body, a filter or
`page`, and NUL characters in a business key, a reference or a filter are 400 with the error
body; nothing is written."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from instances.models import Instance
from tests.instances.workflows import ping_pong, publish

pytestmark = pytest.mark.django_db
BASE = "/api/v1/core/workflows/ping-pong/instances"
START = f"{BASE}/start?sync=true"

BODIES: dict[str, tuple[bytes, int, str]] = {
    "a body over the upload limit": (
        b'{"a": "' + b"x" * (3 * 1024 * 1024) + b'"}',
        413,
        "App:900009",
    ),
    "JSON nested 100,000 levels": (b"[" * 100_000 + b"]" * 100_000, 400, "App:900002"),
    "attributes nested 900 levels": (
        b'{"attributes": ' + b'{"a": ' * 900 + b"1" + b"}" * 900 + b"}",
        400,
        "App:900002",
    ),
    "a 5,000-digit integer": (b'{"attributes": {"a": ' + b"9" * 5000 + b"}}", 400, "App:900002"),
    "a NUL in the business key": (b'{"key": "a\\u0000b"}', 400, "App:900002"),
    "a NUL in an attribute": (b'{"attributes": {"a": "x\\u0000y"}}', 400, "Instance:DataRefused"),
    "a lone surrogate in a key": (
        b'{"attributes": {"\\ud800": 1}}',
        400,
        "Instance:DataRefused",
    ),
}

QUERIES: dict[str, tuple[str, str]] = {
    "a 5,000-digit integer in a filter": (
        f"{BASE}?filter=attributes.a eq {'9' * 5000}",
        "invalid_filter",
    ),
    "a 5,000-digit page": (f"{BASE}?page={'9' * 5000}", "invalid_filter"),
    "a NUL in a filter": (f"{BASE}?filter=key eq 'a%00b'", "App:900002"),
    "a NUL in the instance reference": (f"{BASE}/a%00b", "App:900002"),
}


@pytest.fixture
def client(operator_client: APIClient) -> APIClient:
    publish(ping_pong())
    return operator_client


@pytest.mark.parametrize("case", list(BODIES))
def test_bad_bodies_are_refused_with_their_status(client: Any, case: str):
    body, status, code = BODIES[case]
    response = client.generic("POST", START, body, content_type="application/json")
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"] == "application/problem+json"
    assert json.loads(response.content)["errorCode"] == code
    assert not Instance.objects.exists()


@pytest.mark.parametrize("case", list(QUERIES))
def test_bad_queries_and_references_are_400(client: Any, case: str):
    url, code = QUERIES[case]
    response = client.get(url)
    assert response.status_code == 400, response.content[:300]
    assert response.json()["errorCode"] == code
