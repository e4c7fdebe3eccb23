"""What the runtime measures, and the trace spans it opens.

Metrics are prometheus-client collectors, process-wide (one registry per process; several
processes of one installation add up through `PROMETHEUS_MULTIPROC_DIR`, see README
"Observability"). Figures the database holds (job queue depth and age, Busy instances, open
incidents) are not counted here: `/metrics` reads them when it is scraped, so every process
agrees on them.

Spans come from the OpenTelemetry API, which is a no-op until a tracer provider is installed
(`vnext.observability` does when an exporter is configured): without one a span costs a
function call.

Label values are bounded: workflow and transition keys are the published definitions', outcomes
and kinds are fixed vocabularies, steps are the pipeline's classes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any

from opentelemetry import trace
from prometheus_client import Counter, Gauge, Histogram

tracer = trace.get_tracer("vnext")

# The fields every log line of the current operation carries (request_id, instance_id,
# transition, job_id, ...): set where an operation starts, read by the log formatter.
# An immutable empty default: every binding makes a new mapping.
_NO_FIELDS: Mapping[str, Any] = MappingProxyType({})
_log_fields: ContextVar[Mapping[str, Any]] = ContextVar("vnext_log_fields", default=_NO_FIELDS)


def log_fields() -> Mapping[str, Any]:
    """The fields bound to the current operation (thread or task)."""
    return _log_fields.get()


# Where a job keeps the id of the request that accepted it (its log lines repeat it).
REQUEST_ID_KEY = "requestId"


def with_request_id(payload: dict[str, Any]) -> dict[str, Any]:
    """`payload` with the current request's id (when one is bound and it has none)."""
    request_id = _log_fields.get().get("request_id")
    if request_id is None or REQUEST_ID_KEY in payload:
        return payload
    return {**payload, REQUEST_ID_KEY: request_id}


@contextmanager
def bound(**fields: Any) -> Iterator[None]:
    """Add `fields` (None values are left out) to every log line written inside the block."""
    added = {key: value for key, value in fields.items() if value is not None}
    token = _log_fields.set({**_log_fields.get(), **added})
    try:
        yield
    finally:
        _log_fields.reset(token)


# Seconds: a step or a script call is usually well under 10 ms; a transition with HTTP tasks can
# take seconds; a fan-out batch or a job minutes.
_FAST = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_SLOW = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

TRANSITIONS = Counter(
    "vnext_transitions",
    "Transitions run (each hop of an automatic chain counts), by outcome: completed (the hop "
    "reached its target or a rest point), faulted, diverted (an error boundary's rollback or "
    "notify), retry_scheduled (a boundary retry job), rejected (refused before any write)",
    ["domain", "workflow", "transition", "outcome"],
)
TRANSITION_SECONDS = Histogram(
    "vnext_transition_duration_seconds",
    "Wall time of one transition hop, its tasks included",
    ["domain", "workflow"],
    buckets=_SLOW,
)
STEP_SECONDS = Histogram(
    "vnext_step_duration_seconds",
    "Wall time of one pipeline step (the seed's LifecycleOrder steps)",
    ["step"],
    buckets=(*_FAST, 5.0, 10.0, 30.0),
)
JOBS = Counter(
    "vnext_jobs",
    "Jobs that ended an attempt, by kind and outcome (succeeded, skipped, instance_faulted, "
    "retry: the attempt failed and the job will run again, failed, lost_lease: another worker "
    "took it over)",
    ["kind", "outcome"],
)
JOB_SECONDS = Histogram(
    "vnext_job_duration_seconds", "Wall time of one job attempt", ["kind"], buckets=_SLOW
)
TIMER_LATENESS = Histogram(
    "vnext_timer_lateness_seconds",
    "How long after it was due a timer or timeout job started",
    ["kind"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0),
)
SCRIPT_CALLS = Counter(
    "vnext_script_calls",
    "Script calls to the isolated worker pool, by outcome: ok, error (the script raised or "
    "answered wrongly), timeout (the worker was killed at the deadline), resource_limit, "
    "unavailable (no worker in time)",
    ["outcome"],
)
SCRIPT_SECONDS = Histogram(
    "vnext_script_call_duration_seconds",
    "Wall time of one script call, the round trip to the worker included",
    buckets=_FAST,
)
SCRIPT_RESTARTS = Counter(
    "vnext_script_worker_restarts",
    "Script workers replaced, by reason (timeout, died)",
    ["reason"],
)
FAN_OUT_BATCHES = Counter(
    "vnext_fan_out_batches", "Fan-out batches run, by outcome (succeeded, failed)", ["outcome"]
)
FAN_OUT_ITEMS = Counter(
    "vnext_fan_out_items",
    "Fan-out items, by outcome (succeeded, failed, timed_out, cancelled, not_started)",
    ["outcome"],
)
FAN_OUT_SECONDS = Histogram(
    "vnext_fan_out_batch_duration_seconds", "Wall time of one fan-out batch", buckets=_SLOW
)
FAN_OUT_SATURATED = Counter(
    "vnext_fan_out_bulkhead_saturated",
    "Fan-out batches that had to wait for the process-wide item limit",
)
LONG_POLLS = Counter(
    "vnext_long_polls",
    "Long-poll waits (state?wait=N), by outcome: changed (answered with a new body), timeout "
    "(304 after N seconds), stale (the eTag was already old: answered at once), gone (the "
    "client left first), refused (429: the caller had its cap of long-polls parked)",
    ["outcome"],
)
LONG_POLL_WAITING = Gauge(
    "vnext_long_polls_waiting",
    "Long-poll requests being held now",
    multiprocess_mode="livesum",
)


# None: trace when a tracer provider is installed (an exporter was configured, or an operator's
# own OpenTelemetry set-up); True / False: forced (`set_tracing`).
_tracing_forced: bool | None = None


def set_tracing(enabled: bool | None) -> None:
    """Force spans on or off (None: decide by the installed tracer provider). The global provider
    cannot be replaced or removed once set, so this is how spans stop."""
    global _tracing_forced
    _tracing_forced = enabled


# Once installed, a tracer provider stays (OpenTelemetry sets the global one once): a process
# that has one asks no more. Without one it asks at most every PROVIDER_RECHECK_SECONDS:
# `get_tracer_provider()` reads the environment each time, and ~20 steps a hop ask.
PROVIDER_RECHECK_SECONDS = 1.0
_provider_installed = False
_provider_checked_at = -PROVIDER_RECHECK_SECONDS


def tracing() -> bool:
    """Whether spans are made: forced by `set_tracing`, else once a tracer provider is
    installed (noticed within `PROVIDER_RECHECK_SECONDS`)."""
    global _provider_installed, _provider_checked_at
    if _tracing_forced is not None:
        return _tracing_forced
    if _provider_installed:
        return True
    now = time.monotonic()
    if now - _provider_checked_at >= PROVIDER_RECHECK_SECONDS:
        _provider_checked_at = now
        installed = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
        _provider_installed = installed
    return _provider_installed


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[Any]:
    """An OpenTelemetry span named `name`, attributes with a None value left out; nothing at
    all (not even the API's no-op span, ~20 us) while no tracer provider is installed."""
    if not tracing():
        yield None
        return
    shown = {f"vnext.{key}": value for key, value in attributes.items() if value is not None}
    with tracer.start_as_current_span(name, attributes=shown) as current:
        yield current


# The step histogram's children by step name: `labels()` costs more than the observation.
_step_timers: dict[str, Any] = {}


class timed_step:  # a lower-case name: used like the context managers beside it
    """Time one pipeline step (and trace it, when tracing): `with timed_step(name): ...`. A
    class, not a generator: it runs ~20 times a transition."""

    __slots__ = ("name", "span", "started", "timer")

    def __init__(self, step: str) -> None:
        timer = _step_timers.get(step)
        if timer is None:
            timer = _step_timers.setdefault(step, STEP_SECONDS.labels(step))
        self.name = step
        self.timer = timer
        self.span: Any = None
        self.started = 0.0

    def __enter__(self) -> None:
        if tracing():
            self.span = span(f"step {self.name}", step=self.name)
            self.span.__enter__()
        self.started = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.timer.observe(time.perf_counter() - self.started)
        if self.span is not None:
            self.span.__exit__(*exc)


def transition_done(
    *, domain: str, workflow: str, transition: str, outcome: str, seconds: float
) -> None:
    """Count one transition hop and its duration."""
    TRANSITIONS.labels(domain, workflow, transition, outcome).inc()
    TRANSITION_SECONDS.labels(domain, workflow).observe(seconds)


def script_called(outcome: str, seconds: float) -> None:
    """Count one script call."""
    SCRIPT_CALLS.labels(outcome).inc()
    SCRIPT_SECONDS.observe(seconds)
