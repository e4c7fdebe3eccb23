"""Bad input is never a 500 (issue "Access control and the API contract", item 5): an oversized
body is 413, JSON nested past the parser's limit, over-long numbers in the body, a filter or
`page`, and NUL characters in a business key, a reference or a filter are 400 with the error
body; nothing is written. So are a form field nested 5,000 levels and a form index far past its
siblings (issue 30, item 8), and a static path that climbs out of the static folders is a 400."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlencode

import httpx
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


FORMS: dict[str, tuple[list[tuple[str, str]], str]] = {
    "a form field nested 5,000 levels": (
        [("attributes" + "[a]" * 5000, "x")],
        "/attributes/a/a/a",
    ),
    "a form index a billion past its siblings": (
        [("attributes[items][0]", "x"), ("attributes[items][1000000000]", "y")],
        "/attributes/items",
    ),
    "a lone form index of 5,000 digits": (
        [("attributes[items][" + "9" * 5000 + "]", "x")],
        "/attributes/items",
    ),
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


@pytest.mark.parametrize("case", list(FORMS))
def test_bad_forms_are_400_at_their_pointer(client: Any, case: str):
    fields, pointer = FORMS[case]
    response = client.generic(
        "POST", START, urlencode(fields), content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code == 400, response.content[:300]
    assert response["Content-Type"] == "application/problem+json"
    body = json.loads(response.content)
    assert body["errorCode"] == "App:900002"
    assert body["errors"][0]["pointer"].startswith(pointer)
    assert not Instance.objects.exists()


def test_a_static_path_out_of_the_static_folders_is_400_not_the_file():
    # Served by the ASGI application's static handler (not Django's URLconf), as `make run` does.
    from vnext.asgi import application

    async def fetch(path: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=application, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            return await http.get(path)

    climbing = asyncio.run(fetch("/static/%2e%2e/vnext/settings.py"))
    present = asyncio.run(fetch("/static/admin/css/base.css"))

    assert climbing.status_code == 400
    assert "SECRET_KEY" not in climbing.text
    assert present.status_code == 200
