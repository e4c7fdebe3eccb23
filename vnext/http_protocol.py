"""uvicorn's httptools protocol with a limit on the request line and headers
(`MAX_HEADER_BYTES`, 431): httptools has none, and buffers a header whole however long it is.

uvicorn imports this module before the app, in every worker process, so it imports nothing that
needs Django set up (the settings are read when a connection opens, after the app is loaded).
"""

from __future__ import annotations

import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from instances.engine.errors import Codes
from vnext.conf import vnext_setting
from vnext.problems import PROBLEM_JSON, problem_body


class HeadTooLarge(Exception):
    """Raised in a parser callback to stop httptools on a head over the limit."""


class HeaderLimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, refusing a request whose request line and headers run over
    `MAX_HEADER_BYTES` with 431: as soon as that many bytes came without the end of the headers,
    or, for a head that arrived whole in one read, when it ends."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_limit = int(vnext_setting("MAX_HEADER_BYTES"))
        self._head_bytes = 0
        self._reading_head = True
        self._head_refused = False

    def on_headers_complete(self) -> None:
        """The head is whole: refuse it when too long, else stop counting until the next one."""
        self._reading_head = False
        self._head_bytes = 0
        head = len(self.url) + sum(len(name) + len(value) for name, value in self.headers)
        if head > self._head_limit:
            # httptools stops and uvicorn answers its parse error through send_400_response.
            self._head_refused = True
            raise HeadTooLarge
        super().on_headers_complete()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a parse error: 431 when the error was a head over the limit."""
        if self._head_refused:
            self._refuse_head()
            return
        super().send_400_response(msg)

    def on_message_complete(self) -> None:
        """The request is whole: what comes next on the connection is the next head."""
        super().on_message_complete()
        self._reading_head = True

    def data_received(self, data: bytes) -> None:
        """Parse, then count the bytes when they all belonged to an unfinished head."""
        reading_before = self._reading_head
        super().data_received(data)
        # A chunk that finished a head (or began the next one) is not counted: the count can
        # run short by one chunk, never refuse a request whose head fits.
        if not (reading_before and self._reading_head) or self.transport.is_closing():
            return
        self._head_bytes += len(data)
        if self._head_bytes > self._head_limit:
            self._refuse_head()

    def _refuse_head(self) -> None:
        detail = f"the request line and headers are over {self._head_limit} bytes"
        self.logger.warning("request refused (431): %s", detail)
        body = json.dumps(problem_body(Codes.APP_HEADERS_TOO_LARGE, detail)).encode()
        content = [STATUS_LINE[431]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                b"content-type: " + PROBLEM_JSON.encode() + b"\r\n",
                b"content-length: " + str(len(body)).encode() + b"\r\n",
                b"connection: close\r\n\r\n",
                body,
            ]
        )
        self.transport.write(b"".join(content))
        self.transport.close()
