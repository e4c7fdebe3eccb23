"""The live state of an instance over a WebSocket:
`/ws/{domain}/workflows/{workflow}/instances/{instance}/`.

On connect the caller gets the state function's body, then the body again after every change of
the instance (or of a subflow it waits for). Every body comes from the state function view
through the WSGI handler, with the caller's credentials (`Authorization` header, the subprotocol
`token.<key>` or `bearer.<jwt>` offered beside `vnext`, `?token=`, or the admin's session cookie,
from a page of this site only), so the socket shows exactly what `GET .../functions/state` would
and nobody sees an instance they may not read: a refused read accepts the socket and closes it at
once with 4000 + the HTTP status (4401, 4403, 4404): closing before accepting would reach the
client as a bare HTTP 403, the code lost.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import Any
from urllib.parse import parse_qs, urlparse

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from instances.api.longpoll import Answer, call_wsgi, get_scope, watched_instances
from instances.changes import group_name, serving_in

# The subprotocol the socket speaks, chosen when the client offers it (a browser offering a
# credential subprotocol must offer this one too: the server answers with one it was offered,
# and never with the one carrying the credential).
SUBPROTOCOL = "vnext"
# Credential subprotocols: `token.<key>` (an API token), `bearer.<jwt>`. They keep the credential
# out of the URL, which servers and proxies log.
CREDENTIAL_SUBPROTOCOLS = {"token.": "Token", "bearer.": "Bearer"}


class InstanceStateSocket(AsyncWebsocketConsumer):
    """Streams one instance's state function body on every change."""

    def __init__(self, *args: Any, wsgi_app: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Django's WSGI handler: every body is the state function view's answer.
        self.wsgi_app = wsgi_app

    async def connect(self) -> None:
        """Read the state as the caller; accept and send it, or close with 4000 + status."""
        self.joined: list[str] = []
        self.etag = ""
        serving_in(asyncio.get_running_loop())
        answer = await self._read()
        subprotocol = SUBPROTOCOL if SUBPROTOCOL in self.scope.get("subprotocols", []) else None
        await self.accept(subprotocol)
        if answer.status != 200:
            await self.close(code=4000 + answer.status)
            return
        ids = await sync_to_async(watched_instances, thread_sensitive=False)(self._state_scope())
        for instance_id in ids:
            group = group_name(instance_id)
            await self.channel_layer.group_add(group, self.channel_name)
            self.joined.append(group)
        await self._send_state(answer)

    async def disconnect(self, code: int) -> None:
        """Leave every group joined."""
        for group in getattr(self, "joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """Clients send nothing; any message asks for the current state again."""
        await self._send_state(await self._read(), force=True)

    async def instance_changed(self, message: dict[str, Any]) -> None:
        """A change notification of a watched instance: send the state if it changed."""
        answer = await self._read()
        if answer.status != 200:
            await self.close(code=4000 + answer.status)
            return
        await self._send_state(answer)

    async def _send_state(self, answer: Answer, *, force: bool = False) -> None:
        if answer.status != 200:
            return
        body = json.loads(answer.body)
        etag = str(body.get("eTag", ""))
        if etag == self.etag and not force:
            return
        self.etag = etag
        await self.send(text_data=json.dumps(body))

    async def _read(self) -> Answer:
        return await sync_to_async(call_wsgi, thread_sensitive=False)(
            self.wsgi_app, self._state_scope()
        )

    def _state_scope(self) -> MutableMapping[str, Any]:
        route = self.scope["url_route"]["kwargs"]
        path = (
            f"/api/v1/{route['domain']}/workflows/{route['workflow']}/instances/"
            f"{route['instance']}/functions/state"
        )
        sent = dict(self.scope.get("headers", []))
        headers = [
            (name, value)
            for name, value in sent.items()
            if name in (b"authorization", b"accept-language")
        ]
        if b"cookie" in sent and _same_origin(sent):
            # A session cookie rides along with any page's socket: only this site's pages may
            # use it (a token is never sent by the browser on its own).
            headers.append((b"cookie", sent[b"cookie"]))
        credential = _credential(self.scope)
        if credential and not any(name == b"authorization" for name, _ in headers):
            headers.append((b"authorization", credential.encode("latin1")))
        return get_scope(
            path,
            headers,
            server=self.scope.get("server") or ("localhost", 80),
            client=self.scope.get("client") or ("127.0.0.1", 0),
        )


class NoSuchSocket(AsyncWebsocketConsumer):
    """Any other WebSocket path: accepted and closed with 4404, a refusal like the others (no
    route would be an exception, and its traceback in the log, for every such upgrade)."""

    async def connect(self) -> None:
        """Accept, then close with 4404."""
        await self.accept()
        await self.close(code=4404)


def _credential(scope: MutableMapping[str, Any]) -> str | None:
    """The `Authorization` value a credential subprotocol or `?token=` carries, if any."""
    for offered in scope.get("subprotocols", []):
        for prefix, scheme in CREDENTIAL_SUBPROTOCOLS.items():
            if offered.startswith(prefix) and len(offered) > len(prefix):
                return f"{scheme} {offered[len(prefix) :]}"
    token = parse_qs(scope.get("query_string", b"").decode("latin1")).get("token")
    return f"Token {token[0]}" if token else None


def _same_origin(headers: dict[bytes, bytes]) -> bool:
    origin = urlparse(headers.get(b"origin", b"").decode("latin1"))
    host = headers.get(b"host", b"").decode("latin1")
    return bool(origin.netloc) and origin.netloc == host
