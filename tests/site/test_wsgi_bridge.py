"""The WSGI bridge (vnext/wsgi_bridge.py) driven as an ASGI app behind the serving layer: the
WSGI app reads the body the serving layer read, a whole answer goes out as its start and one
body message, a streamed one chunk by chunk in order, and without the serving layer the body is
read from the client as a2wsgi reads it."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from typing import Any, cast

from asgiref.sync import async_to_sync
from django.http import HttpResponse, StreamingHttpResponse

from tests.site.test_serving__layer import chunk, drive, post_scope
from vnext.serving import ServingLayer
from vnext.wsgi_bridge import OneHopWSGIMiddleware


class EchoApp:
    """A WSGI app answering what it read from `wsgi.input`, as a Django response would (whole,
    or streamed in `parts` chunks); it keeps the thread it ran in."""

    def __init__(self, *, streamed: bool = False) -> None:
        self.streamed = streamed
        self.threads: list[str] = []
        self.inputs: list[type] = []

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        self.threads.append(threading.current_thread().name)
        self.inputs.append(type(environ["wsgi.input"]))
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        if self.streamed:

            def parts() -> Iterator[bytes]:
                yield from (body[:3], body[3:])

            response: HttpResponse | StreamingHttpResponse = StreamingHttpResponse(parts())
        else:
            response = HttpResponse(body, content_type="application/json", status=201)
        start_response(
            f"{response.status_code} {response.reason_phrase}",
            [(name, value) for name, value in response.items()],
        )
        return response


def bridge(app: EchoApp) -> Any:
    """The bridge over `app` (a2wsgi types its apps and scopes more narrowly than ours)."""
    return OneHopWSGIMiddleware(cast(Any, app), workers=2)


def sized_scope(size: int) -> dict[str, Any]:
    return {**post_scope([(b"content-length", str(size).encode())]), "http_version": "1.1"}


def test_a_whole_answer_reads_the_served_body_and_goes_out_as_start_and_one_body():
    app = EchoApp()
    served = ServingLayer(bridge(app))
    parts = [chunk(b'{"a":', more=True), chunk(b" 1}", more=False)]

    sent = async_to_sync(drive)(served, sized_scope(8), parts)

    assert [message["type"] for message in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 201
    assert (b"content-type", b"application/json") in sent[0]["headers"]
    assert sent[1]["body"] == b'{"a": 1}'
    assert not sent[1].get("more_body", False)
    assert app.threads[0].startswith("WSGI")  # run on the bridge's pool, not the loop
    assert app.inputs == [io.BytesIO]  # the body the serving layer read, not read again


def test_a_streamed_answer_goes_out_chunk_by_chunk_after_its_start():
    served = ServingLayer(bridge(EchoApp(streamed=True)))

    sent = async_to_sync(drive)(served, sized_scope(6), [chunk(b"abcdef", more=False)])

    assert (sent[0]["type"], sent[0]["status"]) == ("http.response.start", 200)
    bodies = [message["body"] for message in sent[1:]]
    assert b"".join(bodies) == b"abcdef"
    assert bodies[:2] == [b"abc", b"def"]
    assert not sent[-1].get("more_body", False)


def test_without_the_serving_layer_the_body_is_read_from_the_client():
    parts = [chunk(b"ab", more=True), chunk(b"cd", more=False)]

    sent = async_to_sync(drive)(bridge(EchoApp()), sized_scope(4), parts)

    assert sent[0]["status"] == 201
    assert sent[1]["body"] == b"abcd"
