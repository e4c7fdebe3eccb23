"""Every API call the clients make, as I/O-free operations (`_transport`): the URL and body
built, the answer read into a typed result, 202s followed, pages walked, the state long-polled.
`Client` and `AsyncClient` only drive these."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from vnext_client._transport import (
    Deadline,
    Emit,
    Operation,
    RetryPolicy,
    Send,
    json_of,
    quoted,
    send,
)
from vnext_client.models import (
    HistoryEntry,
    Instance,
    InstanceData,
    InstanceLike,
    InstanceState,
    InstanceStatus,
    Page,
    Schema,
    TransitionResult,
    View,
)
from vnext_client.query import FilterLike, filter_text

API = "/api/v1"
# How much longer than the long-poll's own wait a read may take before it times out.
LONG_POLL_SLACK_SECONDS = 10.0
# The server holds a long-poll for at most VNEXT_LONG_POLL_MAX_SECONDS (60 by default).
MAX_LONG_POLL_SECONDS = 60.0
# The shortest wait asked for when a deadline is near (the server takes fractions).
MIN_LONG_POLL_SECONDS = 0.1

Filters = FilterLike | Sequence[FilterLike] | None


def _segment(value: str) -> str:
    return quote(str(value), safe="")


def workflow_path(domain: str, workflow: str) -> str:
    """`/api/v1/{domain}/workflows/{workflow}/instances`."""
    return f"{API}/{_segment(domain)}/workflows/{_segment(workflow)}/instances"


def instance_path(instance: InstanceLike) -> str:
    """The path of one instance."""
    return f"{workflow_path(instance.domain, instance.workflow)}/{_segment(instance.id)}"


def run_body(
    attributes: Mapping[str, Any] | None,
    *,
    key: str | None = None,
    tags: Sequence[str] | None = None,
    stage: str | None = None,
) -> dict[str, Any]:
    """The standard envelope `{attributes, key?, tags?, stage?}`. `attributes` is always
    there: a body without it is free-form to the server, which would take `key` for data."""
    body: dict[str, Any] = {"attributes": dict(attributes or {})}
    if key is not None:
        body["key"] = key
    if tags is not None:
        body["tags"] = list(tags)
    if stage is not None:
        body["stage"] = stage
    return body


def _sync(sync: bool) -> dict[str, str]:
    return {"sync": "true" if sync else "false"}


def _filters(filter: Filters) -> list[str]:
    if filter is None:
        return []
    if isinstance(filter, str | dict) or not isinstance(filter, Sequence):
        return [filter_text(filter)]
    return [filter_text(item) for item in filter]


def _completed(state: InstanceState) -> bool:
    return state.completed


@dataclass(frozen=True)
class Operations:
    """The operations with the client's settings: its retry policy, how long a 202 is followed
    (`follow_timeout`) and how long each long-poll waits (`long_poll_seconds`)."""

    retry: RetryPolicy
    follow_timeout: float = 60.0
    long_poll_seconds: float = 25.0

    # --- runs: start, transition, retry, ack ---------------------------------------------------

    def start(
        self,
        domain: str,
        workflow: str,
        attributes: Mapping[str, Any] | None,
        *,
        key: str | None,
        tags: Sequence[str] | None,
        stage: str | None,
        version: str | None,
        sync: bool,
        follow: bool,
    ) -> Operation[TransitionResult]:
        """`POST …/instances/start`."""
        params = _sync(sync) | ({"version": version} if version else {})
        body = run_body(attributes, key=key, tags=tags, stage=stage)
        request = Send("POST", f"{workflow_path(domain, workflow)}/start", params, body)
        return self._run(request, domain, workflow, follow)

    def transition(
        self,
        instance: InstanceLike,
        transition: str,
        attributes: Mapping[str, Any] | None,
        *,
        key: str | None,
        tags: Sequence[str] | None,
        stage: str | None,
        sync: bool,
        follow: bool,
    ) -> Operation[TransitionResult]:
        """`PATCH …/instances/{instance}/transitions/{transition}`."""
        url = f"{instance_path(instance)}/transitions/{_segment(transition)}"
        body = run_body(attributes, key=key, tags=tags, stage=stage)
        request = Send("PATCH", url, _sync(sync), body)
        return self._run(request, instance.domain, instance.workflow, follow)

    def retry_instance(
        self,
        instance: InstanceLike,
        attributes: Mapping[str, Any] | None,
        *,
        sync: bool,
        follow: bool,
    ) -> Operation[TransitionResult]:
        """`POST …/instances/{instance}/retry`."""
        request = Send(
            "POST", f"{instance_path(instance)}/retry", _sync(sync), run_body(attributes)
        )
        return self._run(request, instance.domain, instance.workflow, follow)

    def ack(self, instance: InstanceLike) -> Operation[TransitionResult]:
        """`PATCH …/instances/{instance}/longpoll/ack`."""
        request = Send("PATCH", f"{instance_path(instance)}/longpoll/ack")
        return self._run(request, instance.domain, instance.workflow, follow=False)

    def _run(
        self, request: Send, domain: str, workflow: str, follow: bool
    ) -> Operation[TransitionResult]:
        response = yield from send(request, self.retry)
        body = json_of(response)
        if response.status_code != 202:
            return TransitionResult.from_json(body, domain=domain, workflow=workflow)
        accepted = TransitionResult.from_json(
            body,
            domain=domain,
            workflow=workflow,
            accepted=True,
            location=response.headers.get("Location"),
        )
        if not follow:
            return accepted
        return (yield from self._follow(accepted))

    def _follow(self, accepted: TransitionResult) -> Operation[TransitionResult]:
        """Wait for an accepted run: long-poll the state function under the 202's `Location`
        until the instance (for a parent waiting on subflows: its active leaf, which is what
        the state function describes) is no longer Busy, then read the instance there."""
        location = accepted.location or instance_path(accepted)
        deadline = Deadline(self.follow_timeout)
        etag: str | None = None
        while True:
            request = self._state_request(location, etag, deadline)
            response = yield from send(request, self.retry, ok=_NOT_MODIFIED)
            if response.status_code == 200:
                state = json_of(response)
                etag = response.headers.get("ETag") or state.get("eTag")
                if state.get("status") != InstanceStatus.BUSY:
                    break
            deadline.check(
                f"instance {accepted.id} was still busy after {self.follow_timeout:g} s "
                "(a 202 followed; pass follow=False to get the accepted answer at once)"
            )
        read = yield from send(Send("GET", location), self.retry)
        instance = Instance.from_json(
            json_of(read), domain=accepted.domain, workflow=accepted.workflow
        )
        return TransitionResult(
            domain=accepted.domain,
            workflow=accepted.workflow,
            id=instance.id,
            status=instance.status,
            key=instance.key,
            attributes=instance.attributes,
            etag=instance.etag,
            entity_etag=instance.entity_etag,
            extensions=instance.extensions,
            retried_transition_id=accepted.retried_transition_id,
            accepted=True,
            location=location,
            raw=instance.raw,
        )

    def _state_request(self, base: str, etag: str | None, deadline: Deadline) -> Send:
        """A read of the state function under `base`: plain without an ETag, else a long-poll
        that the server holds until the ETag changes (or the wait, bounded by `deadline`,
        passes: 304)."""
        url = f"{base}/functions/state"
        if etag is None:
            return Send("GET", url)
        wait = min(self.long_poll_seconds, MAX_LONG_POLL_SECONDS)
        remaining = deadline.remaining()
        if remaining is not None:
            wait = max(MIN_LONG_POLL_SECONDS, min(wait, remaining))
        return Send(
            "GET",
            url,
            {"wait": f"{wait:g}"},
            headers={"If-None-Match": quoted(etag)},
            read_timeout=wait + LONG_POLL_SLACK_SECONDS,
        )

    # --- reads ---------------------------------------------------------------------------------

    def get(self, instance: InstanceLike) -> Operation[Instance]:
        """`GET …/instances/{instance}`."""
        response = yield from send(Send("GET", instance_path(instance)), self.retry)
        return Instance.from_json(
            json_of(response), domain=instance.domain, workflow=instance.workflow
        )

    def history(self, instance: InstanceLike) -> Operation[list[HistoryEntry]]:
        """`GET …/instances/{instance}/transitions`."""
        url = f"{instance_path(instance)}/transitions"
        response = yield from send(Send("GET", url), self.retry)
        return [HistoryEntry.from_json(row) for row in json_of(response).get("items") or []]

    def state(self, instance: InstanceLike) -> Operation[InstanceState]:
        """`GET …/functions/state`."""
        url = f"{instance_path(instance)}/functions/state"
        response = yield from send(Send("GET", url), self.retry)
        return _state_of(instance, json_of(response))

    def watch(
        self,
        instance: InstanceLike,
        *,
        until: Callable[[InstanceState], bool] | None,
        timeout: float | None,
    ) -> Operation[None]:
        """Emit the state now, then each new state the long-poll brings, until `until` holds
        for one (default: the instance completed); `WaitTimeout` after `timeout` seconds."""
        stop = until or _completed
        deadline = Deadline(timeout)
        base = instance_path(instance)
        etag: str | None = None
        while True:
            request = self._state_request(base, etag, deadline)
            response = yield from send(request, self.retry, ok=_NOT_MODIFIED)
            if response.status_code == 200:
                state = _state_of(instance, json_of(response))
                etag = response.headers.get("ETag") or state.etag
                yield Emit(state)
                if stop(state):
                    return
            deadline.check(f"instance {instance.id}: watch timed out after {timeout:g} s")

    def data(self, instance: InstanceLike) -> Operation[InstanceData]:
        """`GET …/functions/data`."""
        url = f"{instance_path(instance)}/functions/data"
        response = yield from send(Send("GET", url), self.retry)
        return InstanceData.from_json(json_of(response))

    def view(
        self, instance: InstanceLike, transition: str | None, platform: str | None
    ) -> Operation[View]:
        """`GET …/functions/view?transitionKey=&platform=`."""
        params = {
            name: value
            for name, value in (("transitionKey", transition), ("platform", platform))
            if value
        }
        url = f"{instance_path(instance)}/functions/view"
        response = yield from send(Send("GET", url, params or None), self.retry)
        return View.from_json(json_of(response))

    def schema(self, instance: InstanceLike, transition: str | None) -> Operation[Schema]:
        """`GET …/functions/schema?transitionKey=`."""
        params = {"transitionKey": transition} if transition else None
        url = f"{instance_path(instance)}/functions/schema"
        response = yield from send(Send("GET", url, params), self.retry)
        return Schema.from_json(json_of(response))

    def function(
        self,
        instance: InstanceLike,
        name: str,
        *,
        method: str,
        params: Mapping[str, str] | None,
        body: Any,
    ) -> Operation[Any]:
        """A custom function the workflow declares: its decoded answer as the server sends it."""
        url = f"{instance_path(instance)}/functions/{_segment(name)}"
        response = yield from send(Send(method.upper(), url, params, body), self.retry)
        return json_of(response) if response.content else None

    # --- lists ---------------------------------------------------------------------------------

    def page(
        self,
        domain: str,
        workflow: str,
        *,
        filter: Filters,
        sort: str | None,
        page: int | None,
        page_size: int | None,
        cursor: str | None = None,
    ) -> Operation[Page]:
        """`GET …/instances?filter=&sort=&page=&pageSize=&cursor=`: one page."""
        params: dict[str, Any] = {}
        filters = _filters(filter)
        if filters:
            params["filter"] = filters
        if sort:
            params["sort"] = sort
        if cursor:
            params["cursor"] = cursor
        elif page is not None:
            params["page"] = str(page)
        if page_size is not None:
            params["pageSize"] = str(page_size)
        response = yield from send(Send("GET", workflow_path(domain, workflow), params), self.retry)
        return Page.from_json(json_of(response), domain=domain, workflow=workflow)

    def pages(
        self,
        domain: str,
        workflow: str,
        *,
        filter: Filters,
        sort: str | None,
        page_size: int | None,
        items: bool,
    ) -> Operation[None]:
        """Emit every page (or, with `items`, every instance) from the first on. After the
        first page it follows `nextCursor` (keyset paging: the same order, any depth, and no
        row skipped or repeated when instances are added meanwhile), not page numbers."""
        cursor: str | None = None
        while True:
            page = yield from self.page(
                domain,
                workflow,
                filter=filter,
                sort=sort,
                page=None,
                page_size=page_size,
                cursor=cursor,
            )
            if items:
                for instance in page.items:
                    yield Emit(instance)
            else:
                yield Emit(page)
            if not page.has_next or not page.next_cursor:
                return
            cursor = page.next_cursor

    def groups(
        self,
        domain: str,
        workflow: str,
        group_by: str | Mapping[str, Any],
        *,
        filter: Filters,
        aggregations: str | Mapping[str, Any] | None,
    ) -> Operation[list[dict[str, Any]]]:
        """`GET …/instances?groupBy=`: the `groups` of the answer."""
        params: dict[str, Any] = {"groupBy": filter_text(_json_like(group_by))}
        filters = _filters(filter)
        if filters:
            params["filter"] = filters
        if aggregations is not None:
            params["aggregations"] = filter_text(_json_like(aggregations))
        response = yield from send(Send("GET", workflow_path(domain, workflow), params), self.retry)
        return list(json_of(response).get("groups") or [])


_NOT_MODIFIED = frozenset({304})


def _json_like(value: str | Mapping[str, Any]) -> str | dict[str, Any]:
    return value if isinstance(value, str) else dict(value)


def _state_of(instance: InstanceLike, body: Any) -> InstanceState:
    return InstanceState.from_json(
        body if isinstance(body, dict) else {},
        domain=instance.domain,
        workflow=instance.workflow,
        instance_id=instance.id,
    )
