"""The operator's inspector page: an instance with 500 transitions and 200 data versions,
rendered by the admin (in-process test client, logged in, the diagram already drawn once for
the version). The figure is its server time, median of several renders, against the same page
of an instance with 2 transitions measured in the same run."""

from __future__ import annotations

import statistics
import time

from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from bench.bench_transitions import prepare_database
from bench.summary import record
from tests.instances.operator_fixtures import long_history_instance

ROUNDS = 15


def _render_ms(client: Client, url: str) -> float:
    client.get(url)  # warm: the version's diagram, the templates
    times = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200
    return statistics.median(times)


def main() -> None:
    """Measure the inspector of a long and a short history; record the long one's time."""
    prepare_database()
    user, _ = get_user_model().objects.get_or_create(
        username="bench-operator", defaults={"is_superuser": True, "is_staff": True}
    )
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)
    long = long_history_instance(transitions=500, versions=200)
    short = long_history_instance(transitions=2, versions=1)
    page = "admin:instances_instance_change"
    long_ms = _render_ms(client, reverse(page, args=[long.pk]))
    short_ms = _render_ms(client, reverse(page, args=[short.pk]))
    print(f"inspector: 500 transitions + 200 data versions {long_ms:.0f} ms, 2 transitions "
          f"{short_ms:.0f} ms")  # fmt: skip
    record(
        "admin: inspector, 500 transitions, 200 versions",
        long_ms,
        "ms",
        baseline="same page, 2 transitions",
        baseline_value=short_ms,
        target="<= 300 ms",
        met=long_ms <= 300,
    )
