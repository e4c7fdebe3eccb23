"""No credential from a URL in a log line: the production formatters and the filter on uvicorn's
loggers write the value of a credential-like query parameter `[redacted]`, and a JSON line stays
JSON."""

from __future__ import annotations

import json
import logging

import pytest

from vnext.observability import FieldsFormatter, JsonFormatter, RedactCredentials


def record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("uvicorn.error", logging.INFO, __file__, 1, message, args, None)
    for key, value in extra.items():
        setattr(made, key, value)
    return made


@pytest.mark.parametrize(
    "url",
    [
        "/ws/core/workflows/w/instances/i/?token=SECRET1",
        "/api/v1/x?page=2&access_token=SECRET1",
        "/hook?X-Amz-Security-Token=SECRET1;api_key=SECRET1",
        # In quotes: the JSON line escapes them, and the escape must survive.
        '"/quoted?session=SECRET1"',
    ],
)
def test_the_json_line_carries_no_credential_and_stays_json(url):
    line = JsonFormatter().format(
        record('%s - "WebSocket %s" [accepted]', "127.0.0.1:5000", url, request=f"<GET '{url}'>")
    )
    assert "SECRET1" not in line
    parsed = json.loads(line)
    assert "[redacted]" in parsed["message"]
    assert "[redacted]" in parsed["request"]


def test_the_plain_line_carries_no_credential():
    line = FieldsFormatter("%(message)s").format(record("GET %s", "/x?token=SECRET1&page=2"))
    assert line == "GET /x?token=[redacted]&page=2"


def test_the_filter_keeps_the_arguments_uvicorns_access_formatter_unpacks():
    access = record('%s - "%s %s HTTP/%s" %d', "127.0.0.1:1", "GET", "/x?token=SECRET1", "1.1", 200)
    assert RedactCredentials().filter(access)
    assert access.args == ("127.0.0.1:1", "GET", "/x?token=[redacted]", "1.1", 200)
    assert access.getMessage() == '127.0.0.1:1 - "GET /x?token=[redacted] HTTP/1.1" 200'
