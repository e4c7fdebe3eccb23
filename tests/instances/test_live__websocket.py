"""The live state WebSocket (`/ws/{domain}/workflows/{workflow}/instances/{instance}/`): the
state function's body on connect and after every change, only for callers allowed to read the
instance (token, or a session from this site's pages), nothing left behind on disconnect."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from asgiref.testing import ApplicationCommunicator
from channels.layers import get_channel_layer
from rest_framework.authtoken.models import Token
from rest_framework_simplejwt.tokens import AccessToken

from instances.services import RequestInfo, instance_start, instance_transition
from tests.instances.workflows import ping_pong, publish
from vnext.asgi import application

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def token(operator: Any) -> str:
    return str(Token.objects.create(user=operator).key)


@pytest.fixture
def instance_id() -> str:
    publish(ping_pong())
    outcome = instance_start(domain="core", workflow="ping-pong", body={}, info=RequestInfo())
    return str(outcome.instance.id)


def socket(
    instance_id: str,
    query: str = "",
    headers: list[Any] | None = None,
    subprotocols: list[str] | None = None,
    path: str | None = None,
) -> Any:
    path = path or f"/ws/core/workflows/ping-pong/instances/{instance_id}/"
    scope = {
        "type": "websocket",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": headers or [],
        "subprotocols": subprotocols or [],
        "server": ("testserver", 80),
        "client": ("127.0.0.1", 5000),
    }
    return ApplicationCommunicator(application, scope)


def fire(instance_id: str) -> None:
    instance_transition(
        domain="core", workflow="ping-pong", ref=instance_id, transition_key="to-pong", body={},
        info=RequestInfo(actor="someone"),
    )  # fmt: skip


def test_the_state_on_connect_and_after_a_change(instance_id, token):
    async def scenario() -> list[dict[str, Any]]:
        communicator = socket(instance_id, f"token={token}")
        await communicator.send_input({"type": "websocket.connect"})
        assert (await communicator.receive_output(10))["type"] == "websocket.accept"
        first = json.loads((await communicator.receive_output(10))["text"])
        await sync_to_async(fire, thread_sensitive=False)(instance_id)
        second = json.loads((await communicator.receive_output(10))["text"])
        await communicator.send_input({"type": "websocket.disconnect", "code": 1000})
        await communicator.wait(5)
        return [first, second]

    first, second = async_to_sync(scenario)()
    assert (first["state"], second["state"]) == ("ping", "pong")
    assert first["eTag"] != second["eTag"]
    assert not get_channel_layer().groups.get(f"vnext.instance.{instance_id}")


@pytest.mark.parametrize(
    ("query", "headers", "codes"),
    [
        ("", [], (4401, 4403)),
        ("token=wrong", [], (4401, 4403)),
        # A session cookie from another site's page is not used.
        ("", [(b"cookie", b"sessionid=x"), (b"origin", b"http://evil.example")], (4401, 4403)),
    ],
    ids=["no credentials", "bad token", "foreign origin"],
)
def test_callers_who_may_not_read_it_are_closed(instance_id, query, headers, codes):
    closed = async_to_sync(refusal)(socket(instance_id, query, headers))
    assert closed["type"] == "websocket.close"
    assert closed["code"] in codes


async def refusal(communicator: Any) -> dict[str, Any]:
    """Accepted, then closed at once: a close before the accept would reach the client as a
    bare HTTP 403, its code lost."""
    await communicator.send_input({"type": "websocket.connect"})
    assert (await communicator.receive_output(10))["type"] == "websocket.accept"
    return await communicator.receive_output(10)


@pytest.mark.parametrize("scheme", ["token", "bearer"])
def test_a_credential_in_the_subprotocol_is_read_and_vnext_is_chosen(
    instance_id, token, operator, scheme
):
    credential = token if scheme == "token" else str(AccessToken.for_user(operator))

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        communicator = socket(instance_id, subprotocols=["vnext", f"{scheme}.{credential}"])
        await communicator.send_input({"type": "websocket.connect"})
        accepted = await communicator.receive_output(10)
        first = json.loads((await communicator.receive_output(10))["text"])
        await communicator.send_input({"type": "websocket.disconnect", "code": 1000})
        await communicator.wait(5)
        return accepted, first

    accepted, first = async_to_sync(scenario)()
    # The chosen subprotocol is `vnext`, never the one carrying the token.
    assert (accepted["type"], accepted["subprotocol"]) == ("websocket.accept", "vnext")
    assert first["state"] == "ping"
    refused = socket(instance_id, subprotocols=["vnext", f"{scheme}.wrong"])
    assert async_to_sync(refusal)(refused)["code"] == 4401


def test_a_websocket_on_another_path_is_closed_with_4404():
    closed = async_to_sync(refusal)(socket("", path="/api/v1/definitions/workflow/core"))
    assert (closed["type"], closed["code"]) == ("websocket.close", 4404)


def test_an_unknown_instance_is_closed_with_4404(token):
    publish(ping_pong())
    closed = async_to_sync(refusal)(
        socket("00000000-0000-0000-0000-000000000000", f"token={token}")
    )
    assert (closed["type"], closed["code"]) == ("websocket.close", 4404)
