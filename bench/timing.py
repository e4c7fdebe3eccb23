"""Small timing helpers shared by the benchmarks."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def per_call_seconds(action: Callable[[], object], *, repeat: int = 5, number: int = 2000) -> float:
    """Median over `repeat` rounds of the mean time of one call, in seconds."""
    rounds = []
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(number):
            action()
        rounds.append((time.perf_counter() - started) / number)
    return statistics.median(rounds)


def report(name: str, seconds: float, baseline_name: str, baseline: float) -> None:
    """One line: the figure, the baseline, and their ratio."""
    print(
        f"{name:<44} {seconds * 1e6:9.1f} us   {baseline_name}: {baseline * 1e6:8.2f} us   "
        f"ratio {seconds / baseline:6.1f}x"
    )


def percentile(values: list[int] | list[float], fraction: float) -> float:
    """The nearest-rank percentile of `values` (`fraction` 0.5 = the median)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]
