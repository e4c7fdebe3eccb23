"""Which project modules a request crosses: a sync transition over the API and an async
transition job, traced call by call (issue 31's before/after table).

Not a timing: `sys.setprofile` records every Python call whose code lives in the project
(`instances`, `workflows`, `locks`, `vnext`); the engine (`instances.engine.*`) counts as one
stop, since the question is how the band between the engine and the adapters is walked. The
printed route collapses consecutive calls in one module; "re-entries" counts how often the
route comes back to a module it had left (the back-and-forth a newcomer has to follow).
"""

from __future__ import annotations

import sys
import types
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from bench.bench_transitions import NEXT_KEY, prepare_database
from bench.transition_workflows import DOMAIN, NO_TASK

PROJECT = ("instances", "workflows", "locks", "vnext")
ENGINE = "instances.engine"


@dataclass(frozen=True)
class Route:
    """The modules one action called into, in order, consecutive repeats collapsed."""

    label: str
    stops: tuple[str, ...]

    @property
    def modules(self) -> int:
        """How many distinct modules the route enters."""
        return len(set(self.stops))

    @property
    def reentries(self) -> Counter[str]:
        """Per module, how many times the route came back to it after leaving it."""
        seen: set[str] = set()
        back: Counter[str] = Counter()
        for stop in self.stops:
            if stop in seen:
                back[stop] += 1
            seen.add(stop)
        return back


def _stop(module: str) -> str | None:
    if module.split(".")[0] not in PROJECT:
        return None
    return ENGINE if module.startswith(ENGINE + ".") else module


def route(label: str, action: Callable[[], Any]) -> Route:
    """Run `action` under a profiler and return the modules it called into."""
    stops: list[str] = []

    def profiler(frame: types.FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        stop = _stop(str(frame.f_globals.get("__name__", "")))
        if stop is not None and (not stops or stops[-1] != stop):
            stops.append(stop)

    sys.setprofile(profiler)
    try:
        action()
    finally:
        sys.setprofile(None)
    return Route(label, tuple(stops))


def _client() -> Client:
    user, _ = get_user_model().objects.get_or_create(
        username="bench-operator", defaults={"is_superuser": True, "is_staff": True}
    )
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)
    return client


def _checked(response: Any, status: int) -> Any:
    if response.status_code != status:
        raise RuntimeError(f"{response.status_code}: {response.content[:300]!r}")
    return response.json() if response.content else None


def routes() -> list[Route]:
    """The two routes: a sync transition through the API, an async transition job."""
    prepare_database()
    client = _client()
    base = f"/api/v1/{DOMAIN}/workflows/{NO_TASK}/instances"
    started = _checked(
        client.post(f"{base}/start?sync=true", {"attributes": {}}, "application/json"), 200
    )
    ref = started["id"]
    # Warm every lazy import and cache once, so the trace shows the steady-state route.
    _checked(
        client.patch(
            f"{base}/{ref}/transitions/{NEXT_KEY['ping']}?sync=true", {}, "application/json"
        ),
        200,
    )
    sync = route(
        "sync transition (PATCH ?sync=true)",
        lambda: _checked(
            client.patch(
                f"{base}/{ref}/transitions/{NEXT_KEY['pong']}?sync=true", {}, "application/json"
            ),
            200,
        ),
    )
    _checked(
        client.patch(f"{base}/{ref}/transitions/{NEXT_KEY['ping']}", {}, "application/json"), 202
    )
    call_command("jobs_run", verbosity=0)
    _checked(
        client.patch(f"{base}/{ref}/transitions/{NEXT_KEY['pong']}", {}, "application/json"), 202
    )
    job = route("async transition job (jobs_run)", lambda: call_command("jobs_run", verbosity=0))
    return [sync, job]


def middle_band(whole: Route) -> Route:
    """The same route with only `instances` modules outside the engine (the middle band)."""
    stops: list[str] = []
    for stop in whole.stops:
        if stop.startswith("instances.") and stop != ENGINE and (not stops or stops[-1] != stop):
            stops.append(stop)
    return Route(f"{whole.label}, middle band only", tuple(stops))


def main() -> None:
    """Print each route, whole and its middle band: modules in order, distinct count, re-entries."""
    for one in [shown for whole in routes() for shown in (whole, middle_band(whole))]:
        back = one.reentries
        print(
            f"\n{one.label}: {one.modules} modules, {len(one.stops)} stops, "
            f"{sum(back.values())} re-entries"
        )
        print("  " + " -> ".join(stop.removeprefix("instances.") for stop in one.stops))
        if back:
            print("  back into: " + ", ".join(f"{m} x{n}" for m, n in back.most_common()))
