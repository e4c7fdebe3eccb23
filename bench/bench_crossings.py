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
    """The module-to-module calls one action made, in order: (caller, callee, climbed), where
    `climbed` says the callee was already running further down the stack (a callback that
    climbs back into a module the route had passed through, e.g. the engine calling into the
    services that called it)."""

    label: str
    calls: tuple[tuple[str, str, bool], ...]

    @property
    def modules(self) -> list[str]:
        """The modules entered, in the order first entered."""
        seen: dict[str, None] = {}
        for caller, callee, _ in self.calls:
            seen.setdefault(caller)
            seen.setdefault(callee)
        return list(seen)

    @property
    def edges(self) -> Counter[tuple[str, str]]:
        """How often each module called each other module."""
        return Counter((caller, callee) for caller, callee, _ in self.calls)

    @property
    def climbs(self) -> Counter[str]:
        """Per module, how often the route climbed back into it while it was still running."""
        return Counter(callee for _, callee, climbed in self.calls if climbed)


def _stop(module: str) -> str | None:
    if module.split(".")[0] not in PROJECT:
        return None
    return ENGINE if module.startswith(ENGINE + ".") else module


def route(label: str, action: Callable[[], Any]) -> Route:
    """Run `action` under a profiler and return the module-to-module calls it made."""
    calls: list[tuple[str, str, bool]] = []
    stack: list[str | None] = []  # one entry per Python frame: its project module, or None

    def profiler(frame: types.FrameType, event: str, _arg: Any) -> None:
        if event == "return":
            if stack:
                stack.pop()
            return
        if event != "call":
            return
        stop = _stop(str(frame.f_globals.get("__name__", "")))
        caller = next((each for each in reversed(stack) if each is not None), None)
        if stop is not None and caller is not None and stop != caller:
            calls.append((caller, stop, stop in stack))
        stack.append(stop)

    sys.setprofile(profiler)
    try:
        action()
    finally:
        sys.setprofile(None)
    return Route(label, tuple(calls))


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


def _short(module: str) -> str:
    return module.removeprefix("instances.")


def main() -> None:
    """Print each route: the modules it enters, its module-to-module calls, and its climbs."""
    for one in routes():
        middle = [m for m in one.modules if m.startswith("instances.") and m != ENGINE]
        print(
            f"\n{one.label}: {len(one.modules)} modules ({len(middle)} of the middle band), "
            f"{len(one.calls)} calls between modules over {len(one.edges)} edges, "
            f"{sum(one.climbs.values())} climbs back"
        )
        print("  modules: " + ", ".join(_short(m) for m in one.modules))
        print(
            "  climbs back into: "
            + (", ".join(f"{_short(m)} x{n}" for m, n in one.climbs.most_common()) or "none")
        )
        print(
            "  edges: "
            + ", ".join(f"{_short(a)}->{_short(b)} x{n}" for (a, b), n in sorted(one.edges.items()))
        )
