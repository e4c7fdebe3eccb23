"""The client's core without a server: which refusals are retried and how long it waits
(exponential back-off with full jitter, Retry-After, bounded attempts), problem+json read into
typed errors, a 202 followed through the state long-poll, paging by cursor, the query builder
and the credentials sent (httpx.MockTransport where a whole client is driven)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from vnext_client._transport import Pause, Send, send
from vnext_client.errors import error_from_response
from vnext_client.query import filter_text

from vnext_client import (
    AsyncClient,
    Busy,
    Client,
    Conflict,
    InvalidFilter,
    NotFound,
    RetryPolicy,
    ServerError,
    TooManyRequests,
    ValidationError,
    WaitTimeout,
    column,
    data,
    sort_text,
    status,
)

BASE = "http://vnext.test"
FLOW = "/api/v1/core/workflows/orders/instances"


def problem(status_code: int, code: str, **extra: Any) -> httpx.Response:
    body = {
        "type": f"https://vnext.dev/errors/{code}",
        "title": "Refused",
        "status": status_code,
        "detail": f"because {code}",
        "errorCode": code,
        "error": {"code": code, "message": f"because {code}"},
        **extra,
    }
    return httpx.Response(
        status_code,
        json=body,
        headers={"Content-Type": "application/problem+json"},
        request=httpx.Request("PATCH", f"{BASE}{FLOW}/1/transitions/go"),
    )


def ok(body: Any = None) -> httpx.Response:
    return httpx.Response(200, json=body or {"id": "1", "status": "A"})


def replay(operation: Any, answers: list[httpx.Response]) -> tuple[list[float], Any]:
    """Feed `answers` to `operation` one per request it sends: the pauses it asked for and
    what it returned."""
    pauses: list[float] = []
    step = operation.send(None)
    queue = list(answers)
    try:
        while True:
            if isinstance(step, Pause):
                pauses.append(step.seconds)
                step = operation.send(None)
            else:
                assert isinstance(step, Send)
                step = operation.send(queue.pop(0))
    except StopIteration as done:
        return pauses, done.value


PATCH = Send("PATCH", f"{FLOW}/1/transitions/go")


def test_busy_is_retried_with_exponential_back_off_and_full_jitter():
    policy = RetryPolicy(attempts=5, base_delay=0.1, max_delay=0.3, random=lambda: 0.5)
    busy = [problem(409, "Instance:100031") for _ in range(4)]

    pauses, response = replay(send(PATCH, policy), [*busy, ok()])

    # half (the jitter drawn) of 0.1, 0.2, 0.4 -> capped at 0.3, 0.8 -> 0.3
    assert pauses == pytest.approx([0.05, 0.1, 0.15, 0.15])
    assert response.status_code == 200


def test_the_jitter_spreads_waits_over_the_whole_window():
    draws = iter([0.0, 0.999])
    policy = RetryPolicy(base_delay=1.0, max_delay=10.0, random=lambda: next(draws))
    assert policy.delay(0, None) == 0.0
    assert policy.delay(3, None) == pytest.approx(7.992)


def test_attempts_are_bounded_then_busy_is_raised():
    policy = RetryPolicy(attempts=3, random=lambda: 0.0)
    with pytest.raises(Busy) as refused:
        replay(send(PATCH, policy), [problem(409, "Instance:100031", instanceId="1")] * 3)
    assert (refused.value.status, refused.value.code, refused.value.instance_id) == (
        409,
        "Instance:100031",
        "1",
    )


def test_retry_after_is_honoured_and_capped():
    policy = RetryPolicy(max_retry_after=5.0, random=lambda: 0.0)
    throttled = problem(429, "App:900008")
    throttled.headers["Retry-After"] = "2"
    longer = problem(429, "App:900008")
    longer.headers["Retry-After"] = "60"

    pauses, _ = replay(send(PATCH, policy), [throttled, longer, ok()])

    assert pauses == [2.0, 5.0]


def test_refusals_that_may_have_changed_something_are_not_retried():
    policy = RetryPolicy(random=lambda: 0.0)
    with pytest.raises(Conflict) as locked:
        replay(send(PATCH, policy), [problem(409, "ResourceLockConflict"), ok()])
    assert not isinstance(locked.value, Busy)
    # A write may have been applied before the database went away: never repeated.
    with pytest.raises(ServerError):
        replay(send(PATCH, policy), [problem(503, "App:900009"), ok()])
    # A read is.
    pauses, response = replay(send(Send("GET", FLOW), policy), [problem(503, "App:900009"), ok()])
    assert (len(pauses), response.status_code) == (1, 200)


def test_a_problem_body_becomes_a_typed_error():
    response = problem(
        400,
        "App:900002",
        errors=[{"pointer": "/attributes/amount", "message": "must be a number"}],
        instanceId="42",
    )
    error = error_from_response(response)
    assert type(error) is ValidationError
    assert (error.status, error.code, error.title, error.detail) == (
        400,
        "App:900002",
        "Refused",
        "because App:900002",
    )
    assert error.pointers == ["/attributes/amount"]
    assert error.errors[0].message == "must be a number"
    assert error.instance_id == "42"
    assert "/attributes/amount: must be a number" in str(error)

    column_error = error_from_response(
        problem(400, "invalid_column", error={"code": "invalid_column", "validColumns": ["key"]})
    )
    assert isinstance(column_error, InvalidFilter)
    assert column_error.extra == {"validColumns": ["key"]}
    assert isinstance(error_from_response(problem(404, "Instance:100017")), NotFound)
    assert isinstance(error_from_response(problem(429, "App:900008")), TooManyRequests)


def test_an_answer_that_is_not_json_is_still_a_typed_error():
    response = httpx.Response(
        502, text="<html>bad gateway</html>", request=httpx.Request("GET", f"{BASE}{FLOW}")
    )
    error = error_from_response(response)
    assert isinstance(error, ServerError)
    assert (error.status, error.code) == (502, "")
    assert "bad gateway" in error.detail


class FakeServer:
    """A scripted vNext: a 202 start whose instance is Busy until the second state read."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path
        location = f"{BASE}{FLOW}/7"
        if path == f"{FLOW}/start":
            return httpx.Response(
                202, json={"id": "7", "status": "B"}, headers={"Location": location}
            )
        if path == f"{FLOW}/7/functions/state":
            if "If-None-Match" not in request.headers:
                return httpx.Response(
                    200, json={"status": "B", "eTag": "e1"}, headers={"ETag": '"e1"'}
                )
            return httpx.Response(
                200, json={"status": "A", "state": "ready", "eTag": "e2"}, headers={"ETag": '"e2"'}
            )
        if path == f"{FLOW}/7":
            return httpx.Response(
                200,
                json={
                    "id": "7",
                    "key": "k",
                    "eTag": "t",
                    "entityEtag": "d",
                    "attributes": {"x": 1},
                    "metadata": {"status": "A", "currentState": "ready"},
                },
            )
        return httpx.Response(404, json={"errorCode": "App:900004", "status": 404})


def test_a_202_is_followed_through_the_state_long_poll():
    server = FakeServer()
    with Client(BASE, token="t0k", transport=httpx.MockTransport(server)) as client:
        result = client.start("core", "orders", {"x": 1}, sync=False)

    assert (result.accepted, result.status, result.attributes) == (True, "A", {"x": 1})
    assert result.location == f"{BASE}{FLOW}/7"
    start, plain, parked, read = server.requests
    assert (start.method, start.url.params["sync"]) == ("POST", "false")
    assert json.loads(start.content) == {"attributes": {"x": 1}}
    assert start.headers["Authorization"] == "Token t0k"
    assert "wait" not in plain.url.params
    assert (parked.headers["If-None-Match"], parked.url.params["wait"]) == ('"e1"', "25")
    assert read.url.path == f"{FLOW}/7"


def test_follow_false_answers_the_202_itself():
    server = FakeServer()
    with Client(BASE, transport=httpx.MockTransport(server)) as client:
        accepted = client.start("core", "orders", sync=False, follow=False)
    assert (accepted.accepted, accepted.status, accepted.id) == (True, "B", "7")
    assert len(server.requests) == 1


def test_watch_times_out_when_nothing_changes():
    def unchanged(request: httpx.Request) -> httpx.Response:
        if "If-None-Match" in request.headers:
            return httpx.Response(304, headers={"ETag": '"e1"'})
        return httpx.Response(200, json={"status": "A", "state": "s", "eTag": "e1"})

    with Client(BASE, transport=httpx.MockTransport(unchanged)) as client:
        watching = client.watch(client.ref("core", "orders", "7"), timeout=0.2)
        first = next(watching)
        with pytest.raises(WaitTimeout):
            next(watching)  # 304 after 304 until the 0.2 s pass
    assert first.state == "s"


def test_the_async_client_pages_by_cursor():
    seen: list[dict[str, str]] = []

    def pages(request: httpx.Request) -> httpx.Response:
        params = dict(request.url.params)
        seen.append(params)
        if "cursor" not in params:
            body = {"items": [{"id": "1"}], "hasNext": True, "nextCursor": "c2", "page": 1}
        else:
            body = {"items": [{"id": "2"}], "hasNext": False, "nextCursor": None, "page": 2}
        return httpx.Response(200, json={"pageSize": 1, "links": {}, **body})

    async def listed() -> list[str]:
        transport = httpx.MockTransport(pages)
        async with AsyncClient(BASE, bearer="jwt", transport=transport) as client:
            found = client.iter_instances("core", "orders", filter=status("Active"), page_size=1)
            return [instance.id async for instance in found]

    assert asyncio.run(listed()) == ["1", "2"]
    first, second = seen
    assert first == {"filter": '{"status":{"eq":"Active"}}', "pageSize": "1"}
    assert second == {**first, "cursor": "c2"}


def test_credentials_are_one_of_token_bearer_or_basic():
    sent: list[str] = []

    def record(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers.get("Authorization", ""))
        return httpx.Response(200, json={"items": []})

    transport = httpx.MockTransport(record)
    for options in ({"token": "abc"}, {"bearer": "jwt"}, {"auth": ("ops", "pw")}):
        with Client(BASE, transport=transport, **options) as client:
            client.history(client.ref("core", "orders", "7"))
    assert sent == ["Token abc", "Bearer jwt", "Basic b3BzOnB3"]
    with pytest.raises(ValueError, match="one of"):
        Client(BASE, token="a", auth=("b", "c"))


def test_the_query_builder_writes_the_servers_json():
    expression = (data("amount").gt(500) & column("status").eq("Active")) | ~data(
        "customer.segment"
    ).isnull()
    assert expression.to_json() == {
        "or": [
            {"and": [{"attributes": {"amount": {"gt": 500}}}, {"status": {"eq": "Active"}}]},
            {"not": {"attributes": {"customer.segment": {"isnull": True}}}},
        ]
    }
    chained = data("a").eq(1) & data("b").eq(2) & data("c").between(1, 3)
    assert len(chained.to_json()["and"]) == 3  # one `and` of three, not nested
    assert status("Active", "Busy").to_json() == {"status": {"in": ["Active", "Busy"]}}
    assert filter_text("customerId=eq:C-1") == "customerId=eq:C-1"
    assert filter_text({"key": {"startswith": "o-"}}) == '{"key":{"startswith":"o-"}}'
    assert json.loads(sort_text("-createdAt", "key")) == {
        "fields": [
            {"field": "createdAt", "direction": "desc"},
            {"field": "key", "direction": "asc"},
        ]
    }
