"""`Client` (blocking) and `AsyncClient` (asyncio): the same methods over the same I/O-free
operations (`_operations`), one driving them with `httpx.Client`, the other with
`httpx.AsyncClient`."""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, Self

import httpx

from vnext_client._operations import Filters, Operations
from vnext_client._transport import RetryPolicy, drive, drive_async, stream, stream_async
from vnext_client.models import (
    HistoryEntry,
    Instance,
    InstanceData,
    InstanceLike,
    InstanceRef,
    InstanceState,
    Page,
    Schema,
    TransitionResult,
    View,
)

USER_AGENT = "vnext-client/0.1.0"


def _settings(
    base_url: str,
    *,
    token: str | None,
    bearer: str | None,
    auth: tuple[str, str] | None,
    timeout: float | httpx.Timeout,
    headers: Mapping[str, str] | None,
) -> dict[str, Any]:
    """The `httpx.Client` / `httpx.AsyncClient` arguments both clients build from theirs."""
    if sum(given is not None for given in (token, bearer, auth)) > 1:
        raise ValueError("give one of token, bearer or auth")
    sent = {"User-Agent": USER_AGENT, "Accept": "application/json", **(headers or {})}
    if token is not None:
        sent["Authorization"] = f"Token {token}"
    elif bearer is not None:
        sent["Authorization"] = f"Bearer {bearer}"
    return {
        "base_url": base_url.rstrip("/"),
        "headers": sent,
        "auth": httpx.BasicAuth(*auth) if auth is not None else None,
        "timeout": timeout,
    }


class _Base:
    """What both clients hold: the operations with their settings."""

    def __init__(
        self,
        *,
        retry: RetryPolicy | None,
        follow_timeout: float,
        long_poll_seconds: float,
    ) -> None:
        self._ops = Operations(
            retry=retry or RetryPolicy(),
            follow_timeout=follow_timeout,
            long_poll_seconds=long_poll_seconds,
        )

    @staticmethod
    def ref(domain: str, workflow: str, instance: str) -> InstanceRef:
        """An instance by domain, workflow and id or business key."""
        return InstanceRef(domain, workflow, instance)


class Client(_Base):
    """A blocking client of the vNext API.

    `base_url` is the server (`http://127.0.0.1:8000`); credentials are one of `token` (an API
    token: `Authorization: Token …`), `bearer` (a JWT) or `auth` (user name and password, HTTP
    Basic). `timeout` applies to each request (a long-poll adds its wait). Refusals that
    changed nothing (409 Busy, 429) are retried per `retry`; a 202 is followed for up to
    `follow_timeout` seconds; `long_poll_seconds` is how long each long-poll asks the server
    to hold. `transport` is for tests (`httpx.MockTransport`)."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        bearer: str | None = None,
        auth: tuple[str, str] | None = None,
        timeout: float | httpx.Timeout = 10.0,
        retry: RetryPolicy | None = None,
        follow_timeout: float = 60.0,
        long_poll_seconds: float = 25.0,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(
            retry=retry, follow_timeout=follow_timeout, long_poll_seconds=long_poll_seconds
        )
        settings = _settings(
            base_url, token=token, bearer=bearer, auth=auth, timeout=timeout, headers=headers
        )
        self.http = httpx.Client(transport=transport, **settings)

    def close(self) -> None:
        """Close the connections."""
        self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- runs ----------------------------------------------------------------------------------

    def start(
        self,
        domain: str,
        workflow: str,
        attributes: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
        tags: Sequence[str] | None = None,
        stage: str | None = None,
        version: str | None = None,
        sync: bool = True,
        follow: bool = True,
    ) -> TransitionResult:
        """Start an instance (idempotent by `key`). `sync=True` runs it to its next rest
        point and answers with it; `sync=False` is accepted as a job (202), which is followed
        until the instance is no longer busy unless `follow=False`."""
        return drive(
            self._ops.start(
                domain,
                workflow,
                attributes,
                key=key,
                tags=tags,
                stage=stage,
                version=version,
                sync=sync,
                follow=follow,
            ),
            self.http,
        )

    def transition(
        self,
        instance: InstanceLike,
        transition: str,
        attributes: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
        tags: Sequence[str] | None = None,
        stage: str | None = None,
        sync: bool = True,
        follow: bool = True,
    ) -> TransitionResult:
        """Fire `transition` on `instance` with `attributes` (merged into its data); 409 Busy
        is retried with back-off, then raised as `Busy`. `sync` and `follow` as for `start`."""
        return drive(
            self._ops.transition(
                instance,
                transition,
                attributes,
                key=key,
                tags=tags,
                stage=stage,
                sync=sync,
                follow=follow,
            ),
            self.http,
        )

    def retry(
        self,
        instance: InstanceLike,
        attributes: Mapping[str, Any] | None = None,
        *,
        sync: bool = True,
        follow: bool = True,
    ) -> TransitionResult:
        """Retry a faulted instance, its data merged with `attributes` first; `ValidationError`
        `Instance:100027` when it is not faulted."""
        return drive(
            self._ops.retry_instance(instance, attributes, sync=sync, follow=follow), self.http
        )

    def ack(self, instance: InstanceLike) -> TransitionResult:
        """Acknowledge the long-poll of a state that stops it (`interaction.ack`): the paused
        run goes on."""
        return drive(self._ops.ack(instance), self.http)

    # --- reads ---------------------------------------------------------------------------------

    def get(self, instance: InstanceLike) -> Instance:
        """The instance with its metadata and data."""
        return drive(self._ops.get(instance), self.http)

    def history(self, instance: InstanceLike) -> builtins.list[HistoryEntry]:
        """Every transition attempt of the instance, oldest first."""
        return drive(self._ops.history(instance), self.http)

    def state(self, instance: InstanceLike) -> InstanceState:
        """The state function: where the instance is and what may be fired next."""
        return drive(self._ops.state(instance), self.http)

    def watch(
        self,
        instance: InstanceLike,
        *,
        until: Callable[[InstanceState], bool] | None = None,
        timeout: float | None = None,
    ) -> Iterator[InstanceState]:
        """The state now, then every new state as it happens (the state function long-polled
        with its ETag), until `until` holds for one, by default until the instance completes;
        `WaitTimeout` after `timeout` seconds."""
        return stream(self._ops.watch(instance, until=until, timeout=timeout), self.http)

    def data(self, instance: InstanceLike) -> InstanceData:
        """The data function: the instance's data as the caller may see it."""
        return drive(self._ops.data(instance), self.http)

    def view(
        self, instance: InstanceLike, transition: str | None = None, *, platform: str | None = None
    ) -> View:
        """The view function: the state's view, or `transition`'s."""
        return drive(self._ops.view(instance, transition, platform), self.http)

    def schema(self, instance: InstanceLike, transition: str | None = None) -> Schema:
        """The schema function: `transition`'s schema (or the workflow's master schema)."""
        return drive(self._ops.schema(instance, transition), self.http)

    def function(
        self,
        instance: InstanceLike,
        name: str,
        *,
        method: str = "GET",
        params: Mapping[str, str] | None = None,
        body: Any = None,
    ) -> Any:
        """Call the custom function `name` the instance's workflow declares; its answer."""
        return drive(
            self._ops.function(instance, name, method=method, params=params, body=body),
            self.http,
        )

    # --- lists ---------------------------------------------------------------------------------

    def list(
        self,
        domain: str,
        workflow: str,
        *,
        filter: Filters = None,
        sort: str | None = None,
        page: int | None = None,
        page_size: int | None = None,
        cursor: str | None = None,
    ) -> Page:
        """One page of instances. `filter`: a `query.Filter`, the server's JSON object or text
        (several: all must hold); `sort`: `-createdAt,key` or `query.sort_text(...)`."""
        return drive(
            self._ops.page(
                domain,
                workflow,
                filter=filter,
                sort=sort,
                page=page,
                page_size=page_size,
                cursor=cursor,
            ),
            self.http,
        )

    def pages(
        self,
        domain: str,
        workflow: str,
        *,
        filter: Filters = None,
        sort: str | None = None,
        page_size: int | None = None,
    ) -> Iterator[Page]:
        """Every page of the listing, fetched as the iteration reaches it."""
        operation = self._ops.pages(
            domain, workflow, filter=filter, sort=sort, page_size=page_size, items=False
        )
        return stream(operation, self.http)

    def iter_instances(
        self,
        domain: str,
        workflow: str,
        *,
        filter: Filters = None,
        sort: str | None = None,
        page_size: int | None = None,
    ) -> Iterator[Instance]:
        """Every instance of the listing, page after page."""
        operation = self._ops.pages(
            domain, workflow, filter=filter, sort=sort, page_size=page_size, items=True
        )
        return stream(operation, self.http)

    def groups(
        self,
        domain: str,
        workflow: str,
        group_by: str | Mapping[str, Any],
        *,
        filter: Filters = None,
        aggregations: str | Mapping[str, Any] | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """The instances grouped (`{"field": "attributes.currency"}`), with `aggregations`
        (`{"count": true, "sum": "attributes.amount"}`)."""
        operation = self._ops.groups(
            domain, workflow, group_by, filter=filter, aggregations=aggregations
        )
        return drive(operation, self.http)


class AsyncClient(_Base):
    """The asyncio twin of `Client`: the same arguments and methods, awaited (`watch`,
    `pages` and `iter_instances` are async iterators)."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        bearer: str | None = None,
        auth: tuple[str, str] | None = None,
        timeout: float | httpx.Timeout = 10.0,
        retry: RetryPolicy | None = None,
        follow_timeout: float = 60.0,
        long_poll_seconds: float = 25.0,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(
            retry=retry, follow_timeout=follow_timeout, long_poll_seconds=long_poll_seconds
        )
        settings = _settings(
            base_url, token=token, bearer=bearer, auth=auth, timeout=timeout, headers=headers
        )
        self.http = httpx.AsyncClient(transport=transport, **settings)

    async def aclose(self) -> None:
        """Close the connections."""
        await self.http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- runs ----------------------------------------------------------------------------------

    async def start(
        self,
        domain: str,
        workflow: str,
        attributes: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
        tags: Sequence[str] | None = None,
        stage: str | None = None,
        version: str | None = None,
        sync: bool = True,
        follow: bool = True,
    ) -> TransitionResult:
        """See `Client.start`."""
        return await drive_async(
            self._ops.start(
                domain,
                workflow,
                attributes,
                key=key,
                tags=tags,
                stage=stage,
                version=version,
                sync=sync,
                follow=follow,
            ),
            self.http,
        )

    async def transition(
        self,
        instance: InstanceLike,
        transition: str,
        attributes: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
        tags: Sequence[str] | None = None,
        stage: str | None = None,
        sync: bool = True,
        follow: bool = True,
    ) -> TransitionResult:
        """See `Client.transition`."""
        return await drive_async(
            self._ops.transition(
                instance,
                transition,
                attributes,
                key=key,
                tags=tags,
                stage=stage,
                sync=sync,
                follow=follow,
            ),
            self.http,
        )

    async def retry(
        self,
        instance: InstanceLike,
        attributes: Mapping[str, Any] | None = None,
        *,
        sync: bool = True,
        follow: bool = True,
    ) -> TransitionResult:
        """See `Client.retry`."""
        return await drive_async(
            self._ops.retry_instance(instance, attributes, sync=sync, follow=follow), self.http
        )

    async def ack(self, instance: InstanceLike) -> TransitionResult:
        """See `Client.ack`."""
        return await drive_async(self._ops.ack(instance), self.http)

    # --- reads ---------------------------------------------------------------------------------

    async def get(self, instance: InstanceLike) -> Instance:
        """See `Client.get`."""
        return await drive_async(self._ops.get(instance), self.http)

    async def history(self, instance: InstanceLike) -> builtins.list[HistoryEntry]:
        """See `Client.history`."""
        return await drive_async(self._ops.history(instance), self.http)

    async def state(self, instance: InstanceLike) -> InstanceState:
        """See `Client.state`."""
        return await drive_async(self._ops.state(instance), self.http)

    def watch(
        self,
        instance: InstanceLike,
        *,
        until: Callable[[InstanceState], bool] | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[InstanceState]:
        """See `Client.watch` (`async for state in client.watch(instance)`)."""
        return stream_async(self._ops.watch(instance, until=until, timeout=timeout), self.http)

    async def data(self, instance: InstanceLike) -> InstanceData:
        """See `Client.data`."""
        return await drive_async(self._ops.data(instance), self.http)

    async def view(
        self, instance: InstanceLike, transition: str | None = None, *, platform: str | None = None
    ) -> View:
        """See `Client.view`."""
        return await drive_async(self._ops.view(instance, transition, platform), self.http)

    async def schema(self, instance: InstanceLike, transition: str | None = None) -> Schema:
        """See `Client.schema`."""
        return await drive_async(self._ops.schema(instance, transition), self.http)

    async def function(
        self,
        instance: InstanceLike,
        name: str,
        *,
        method: str = "GET",
        params: Mapping[str, str] | None = None,
        body: Any = None,
    ) -> Any:
        """See `Client.function`."""
        return await drive_async(
            self._ops.function(instance, name, method=method, params=params, body=body),
            self.http,
        )

    # --- lists ---------------------------------------------------------------------------------

    async def list(
        self,
        domain: str,
        workflow: str,
        *,
        filter: Filters = None,
        sort: str | None = None,
        page: int | None = None,
        page_size: int | None = None,
        cursor: str | None = None,
    ) -> Page:
        """See `Client.list`."""
        return await drive_async(
            self._ops.page(
                domain,
                workflow,
                filter=filter,
                sort=sort,
                page=page,
                page_size=page_size,
                cursor=cursor,
            ),
            self.http,
        )

    def pages(
        self,
        domain: str,
        workflow: str,
        *,
        filter: Filters = None,
        sort: str | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[Page]:
        """See `Client.pages`."""
        operation = self._ops.pages(
            domain, workflow, filter=filter, sort=sort, page_size=page_size, items=False
        )
        return stream_async(operation, self.http)

    def iter_instances(
        self,
        domain: str,
        workflow: str,
        *,
        filter: Filters = None,
        sort: str | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[Instance]:
        """See `Client.iter_instances`."""
        operation = self._ops.pages(
            domain, workflow, filter=filter, sort=sort, page_size=page_size, items=True
        )
        return stream_async(operation, self.http)

    async def groups(
        self,
        domain: str,
        workflow: str,
        group_by: str | Mapping[str, Any],
        *,
        filter: Filters = None,
        aggregations: str | Mapping[str, Any] | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """See `Client.groups`."""
        operation = self._ops.groups(
            domain, workflow, group_by, filter=filter, aggregations=aggregations
        )
        return await drive_async(operation, self.http)
