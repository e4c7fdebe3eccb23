"""The I/O-free core shared by `Client` and `AsyncClient`: every operation is a generator that
yields what it needs done (`Send` a request, `Pause`, `Emit` a value to an iterator) and gets
the response back, so retries with back-off, 202 following, paging and long-poll watching are
written once; `drive` / `drive_async` (and the `stream` pair) do the I/O.

Retries: only answers that say nothing happened are repeated — 409 `Instance:100031` (Busy,
refused before any write), 429 (throttled), and 503 for reads (a write may have been applied
before the database went away, so a transition is never repeated on a 503)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx

from vnext_client.errors import BUSY_CODE, VNextError, WaitTimeout, error_from_response

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Send:
    """Send one request; the driver sends the `httpx.Response` back into the operation.
    `url` is a path under the base URL or an absolute URL (a `Location`)."""

    method: str
    url: str
    params: Mapping[str, str] | None = None
    json: Any = None
    headers: Mapping[str, str] | None = None
    # The read timeout of this request (a long-poll waits longer than the client's timeout).
    read_timeout: float | None = None


@dataclass(frozen=True)
class Pause:
    """Wait `seconds` before going on."""

    seconds: float


@dataclass(frozen=True)
class Emit(Generic[T]):
    """Hand `value` to the iterator the operation feeds."""

    value: T


Step = Send | Pause | Emit[Any]
# An operation: yields steps, is sent responses (None after a pause or an emit), returns R.
Operation = Generator[Step, httpx.Response | None, R]


@dataclass(frozen=True)
class RetryPolicy:
    """How refusals that changed nothing are retried: at most `attempts` tries in all, the
    n-th wait drawn uniformly from 0 to `min(max_delay, base_delay * 2**n)` ("full jitter",
    so clients refused together do not come back together), or the server's `Retry-After`
    when it sends one (capped at `max_retry_after`). `attempts=1` never retries."""

    attempts: int = 8
    base_delay: float = 0.1
    max_delay: float = 5.0
    max_retry_after: float = 30.0
    # Injected in tests: a number in [0, 1).
    random: Callable[[], float] = field(default=random.random, repr=False, compare=False)

    def delay(self, retry: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number `retry` (0 for the first)."""
        if retry_after is not None:
            return min(retry_after, self.max_retry_after)
        ceiling = min(self.max_delay, self.base_delay * (2**retry))
        return ceiling * self.random()


NO_RETRY = RetryPolicy(attempts=1)


def retryable(response: httpx.Response, method: str) -> bool:
    """Whether an error answer is one that changed nothing, so it may be sent again."""
    status = response.status_code
    if status == 429:
        return True
    if status == 503:
        return method in ("GET", "HEAD")
    if status == 409:
        try:
            body = response.json()
        except ValueError:
            return False
        return isinstance(body, dict) and body.get("errorCode") == BUSY_CODE
    return False


def send(
    request: Send, policy: RetryPolicy, *, ok: frozenset[int] = frozenset()
) -> Operation[httpx.Response]:
    """Send `request`, retrying per `policy`; the response when it is 2xx or in `ok` (304…),
    else its typed `VNextError`."""
    retry = 0
    while True:
        response = yield request
        assert response is not None
        if response.is_success or response.status_code in ok:
            return response
        if retry + 1 < policy.attempts and retryable(response, request.method):
            yield Pause(policy.delay(retry, _retry_after(response)))
            retry += 1
            continue
        raise error_from_response(response)


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def json_of(response: httpx.Response) -> Any:
    """The decoded body; a 2xx that is not JSON is the server (or a proxy) misbehaving."""
    try:
        return response.json()
    except ValueError as exc:
        raise VNextError(
            status=response.status_code,
            title="not JSON",
            detail=f"expected a JSON answer, got {response.text[:200]!r}",
            method=response.request.method,
            url=str(response.request.url),
        ) from exc


def quoted(etag: str) -> str:
    """An ETag as `If-None-Match` sends it."""
    return etag if etag.startswith(('"', "W/")) else f'"{etag}"'


class Deadline:
    """A point in time (monotonic clock) after `seconds`, or never when `seconds` is None."""

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.at = None if seconds is None else clock() + seconds

    def remaining(self) -> float | None:
        """Seconds left (0 when passed), None when there is no deadline."""
        return None if self.at is None else max(0.0, self.at - self.clock())

    def passed(self) -> bool:
        """Whether the deadline is behind us."""
        left = self.remaining()
        return left is not None and left <= 0

    def check(self, what: str) -> None:
        """Raise `WaitTimeout` once the deadline has passed."""
        if self.passed():
            raise WaitTimeout(what)


# --- drivers: the only I/O -------------------------------------------------------------------


def _http_request(http: httpx.Client | httpx.AsyncClient, step: Send) -> httpx.Request:
    extensions: dict[str, Any] = {}
    if step.read_timeout is not None:
        timeout = http.timeout
        extensions["timeout"] = httpx.Timeout(
            timeout.connect, read=step.read_timeout, write=timeout.write, pool=timeout.pool
        ).as_dict()
    return http.build_request(
        step.method,
        step.url,
        params=dict(step.params) if step.params else None,
        json=step.json,
        headers=dict(step.headers) if step.headers else None,
        extensions=extensions or None,
    )


class _Run(Generic[R]):
    """One operation being driven; `result` is its return value once it has finished."""

    def __init__(self, operation: Operation[R]) -> None:
        self.operation = operation
        self.result: R | None = None

    def step(self, reply: httpx.Response | None) -> Step | None:
        """The operation's next step, None when it has returned."""
        try:
            return self.operation.send(reply)
        except StopIteration as done:
            self.result = done.value
            return None

    def steps(self, http: httpx.Client) -> Iterator[Any]:
        """Do the operation's I/O with a blocking client, yielding what it emits."""
        reply: httpx.Response | None = None
        try:
            while (step := self.step(reply)) is not None:
                reply = None
                if isinstance(step, Send):
                    reply = http.send(_http_request(http, step))
                elif isinstance(step, Pause):
                    time.sleep(step.seconds)
                else:
                    yield step.value
        finally:
            self.operation.close()

    async def asteps(self, http: httpx.AsyncClient) -> AsyncIterator[Any]:
        """Do the operation's I/O with an async client, yielding what it emits."""
        reply: httpx.Response | None = None
        try:
            while (step := self.step(reply)) is not None:
                reply = None
                if isinstance(step, Send):
                    reply = await http.send(_http_request(http, step))
                elif isinstance(step, Pause):
                    await asyncio.sleep(step.seconds)
                else:
                    yield step.value
        finally:
            self.operation.close()


def drive(operation: Operation[R], http: httpx.Client) -> R:
    """Run an operation with a blocking client; its return value."""
    run = _Run(operation)
    for emitted in run.steps(http):
        raise TypeError(f"a single-answer operation emitted {emitted!r}")
    return run.result  # type: ignore[return-value]


def stream(operation: Operation[None], http: httpx.Client) -> Iterator[Any]:
    """Run an operation with a blocking client as an iterator of what it emits."""
    return _Run(operation).steps(http)


async def drive_async(operation: Operation[R], http: httpx.AsyncClient) -> R:
    """Run an operation with an async client; its return value."""
    run = _Run(operation)
    async for emitted in run.asteps(http):
        raise TypeError(f"a single-answer operation emitted {emitted!r}")
    return run.result  # type: ignore[return-value]


def stream_async(operation: Operation[None], http: httpx.AsyncClient) -> AsyncIterator[Any]:
    """Run an operation with an async client as an async iterator of what it emits."""
    return _Run(operation).asteps(http)
