"""Observability wiring: JSON log lines carrying the operation's fields, the request id
middleware, the OpenTelemetry exporter set-up, and the `/metrics` view.

- Logs: `JsonFormatter` writes one JSON object per line with the time, level, logger, message,
  the operation's bound fields (`request_id`, `instance_id`, `transition`, `job_id`, ...; see
  `instances.engine.telemetry.bound`) and the record's `extra` fields. `LOG_FORMAT=plain` gives
  the human form. Both write the value of a credential-like query parameter (`?token=`,
  `access_token`, `api_key`, ...) as `[redacted]`, and so does `RedactCredentials` on uvicorn's
  own loggers: uvicorn logs every WebSocket's URL, query string included.
- Request id: `RequestIdMiddleware` takes `X-Request-ID` when it is a sane token (else makes
  one), binds it for the request's log lines and answers it in the same header; a job accepted by
  the request carries it, so the job's lines repeat it.
- Traces: `configure_tracing()` installs an SDK tracer provider exporting over OTLP/HTTP when
  `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set; otherwise the
  API stays a no-op.
- Metrics: `metrics_view` serves the process registry, or every process's through
  `PROMETHEUS_MULTIPROC_DIR`, plus the database figures (`instances.metrics`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.http import HttpRequest, HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)

from instances.engine.telemetry import bound, log_fields
from vnext.conf import vnext_setting

REQUEST_ID_HEADER = "X-Request-ID"
HTTP_REQUESTS = Counter(
    "vnext_http_requests",
    "HTTP requests answered, by method, route (the URL pattern) and status",
    ["method", "route", "status"],
)
HTTP_SECONDS = Histogram(
    "vnext_http_request_duration_seconds",
    "Wall time of a request through Django, by route (a long-poll's wait is not in it)",
    ["route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
# A caller's id is kept when it is a plain token (a UUID, a gateway's trace id): never free text.
SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
# LogRecord attributes that are not `extra` fields.
_RECORD_FIELDS = frozenset(
    set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}
)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the bound fields, `extra`."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(log_fields())
        for key, value in vars(record).items():
            if key not in _RECORD_FIELDS and key not in line:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        # The whole line: an `extra` field (django.request's request) may show a URL too.
        return redact_credentials(json.dumps(line, default=str, ensure_ascii=False))


# A query parameter whose name says it carries a credential, up to the end of its value (a
# backslash ends it too: in a JSON line it escapes the quote that follows).
_CREDENTIAL_PARAMETER = re.compile(
    r"(?i)([?&;][\w.\-]*(?:token|key|secret|passw|auth|session|signature|credential)[\w.\-]*=)"
    r"[^&;\s\"'#\\]*"
)
REDACTED = "[redacted]"


def redact_credentials(text: str) -> str:
    """`text` with the value of every credential-like query parameter in it replaced."""
    return _CREDENTIAL_PARAMETER.sub(rf"\1{REDACTED}", text)


class RedactCredentials(logging.Filter):
    """Redacts credential-like query parameters in a record's message and arguments (in place,
    so formatters that unpack the arguments, as uvicorn's access formatter does, still work)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record; never drop it."""
        if isinstance(record.msg, str):
            record.msg = redact_credentials(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(
                redact_credentials(arg) if isinstance(arg, str) else arg for arg in record.args
            )
        elif isinstance(record.args, dict):
            record.args = {
                key: redact_credentials(arg) if isinstance(arg, str) else arg
                for key, arg in record.args.items()
            }
        return True


def redact_credentials_in(*logger_names: str) -> None:
    """Put `RedactCredentials` on these loggers (once): records logged on them directly, as
    uvicorn's are, pass it whatever handlers their configuration gave them."""
    for name in logger_names:
        log = logging.getLogger(name)
        if not any(isinstance(existing, RedactCredentials) for existing in log.filters):
            log.addFilter(RedactCredentials())


class FieldsFormatter(logging.Formatter):
    """The plain form, with the bound fields appended as `key=value`."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as text, then its operation's fields."""
        text = super().format(record)
        fields = " ".join(f"{key}={value}" for key, value in log_fields().items())
        return redact_credentials(f"{text} [{fields}]" if fields else text)


def request_id_of(request: HttpRequest) -> str:
    """The request's id: the caller's `X-Request-ID` when it is a sane token, else a new one."""
    given = request.headers.get(REQUEST_ID_HEADER, "")
    return given if SANE_REQUEST_ID.fullmatch(given) else uuid.uuid4().hex


class RequestIdMiddleware:
    """Binds a request id to every log line of the request and answers it in `X-Request-ID`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        """Run the request with its id bound; count it by route and status."""
        request_id = request_id_of(request)
        request.META["VNEXT_REQUEST_ID"] = request_id
        started = time.perf_counter()
        with bound(request_id=request_id):
            response = self.get_response(request)
        response[REQUEST_ID_HEADER] = request_id
        match = getattr(request, "resolver_match", None)
        # The URL pattern, not the path: instance ids and keys would make every path a series.
        route = match.route if match is not None else "unmatched"
        HTTP_REQUESTS.labels(request.method or "", route, str(response.status_code)).inc()
        HTTP_SECONDS.labels(route).observe(time.perf_counter() - started)
        return response


_tracing_lock = threading.Lock()
_tracing_configured = False


def configure_tracing() -> bool:
    """Install the OTLP/HTTP span exporter when an endpoint is configured (once per process);
    True when spans are exported."""
    global _tracing_configured
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not endpoint:
        return False
    with _tracing_lock:
        if _tracing_configured:
            return True
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        name = os.environ.get("OTEL_SERVICE_NAME", "vnext")
        provider = TracerProvider(resource=Resource.create({"service.name": name}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
        _tracing_configured = True
        return True


def scrape_registry() -> CollectorRegistry:
    """The registry `/metrics` serves: every process's metrics when `PROMETHEUS_MULTIPROC_DIR`
    is set (each process writes its own files there), else this process's."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return REGISTRY


def metrics_view(request: HttpRequest) -> HttpResponse:
    """`GET /metrics`: Prometheus text format. With `VNEXT_METRICS_TOKEN` set, the scraper
    must send `Authorization: Bearer <token>` (401 otherwise)."""
    from instances.metrics import DatabaseCollector

    token = vnext_setting("METRICS_TOKEN")
    if token and request.headers.get("Authorization", "") != f"Bearer {token}":
        response = HttpResponse("metrics need the scrape token\n", status=401)
        response["WWW-Authenticate"] = "Bearer"
        return response
    body = generate_latest(scrape_registry()) + generate_latest(DatabaseCollector.registry())
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
