"""The one table `make bench` ends with: each headline figure beside its same-run baseline, the
ratio, the target and whether this run met it. Suites `record` figures as they measure them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    """One row: what was measured, against what, and the target it is held to."""

    name: str
    value: float
    unit: str
    baseline: str
    baseline_value: float | None
    target: str
    met: bool | None

    @property
    def ratio(self) -> str:
        """value / baseline, when there is a baseline."""
        if not self.baseline_value:
            return "-"
        return f"{self.value / self.baseline_value:.2f}x"


_FIGURES: list[Figure] = []


def record(
    name: str,
    value: float,
    unit: str,
    *,
    baseline: str = "",
    baseline_value: float | None = None,
    target: str = "",
    met: bool | None = None,
) -> None:
    """Add a row to the closing table."""
    _FIGURES.append(Figure(name, value, unit, baseline, baseline_value, target, met))


def print_summary() -> None:
    """Print the table of every recorded figure (nothing when no suite recorded one)."""
    if not _FIGURES:
        return
    print("\n== summary (ratios against baselines measured in the same run) ==")
    header = (
        f"{'figure':<46} {'value':>11} {'baseline':<34} {'base':>9} {'ratio':>7} "
        f"{'target':<14} result"
    )
    print(header)
    for row in _FIGURES:
        base = f"{row.baseline_value:9.2f}" if row.baseline_value is not None else f"{'-':>9}"
        result = {True: "PASS", False: "FAIL", None: "-"}[row.met]
        print(
            f"{row.name:<46} {row.value:>8.2f} {row.unit:<2} {row.baseline:<34} {base} "
            f"{row.ratio:>7} {row.target:<14} {result}"
        )
