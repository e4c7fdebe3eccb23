"""Run every benchmark: `python -m bench [name ...]`."""

from __future__ import annotations

import os
import sys

import django


def main(argv: list[str]) -> None:
    """Set up Django, then run the named benchmarks (default: all)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "vnext.settings")
    django.setup()
    from bench import bench_scripts, bench_validation

    suites = {"scripts": bench_scripts.main, "validation": bench_validation.main}
    for name in argv or list(suites):
        print(f"\n== {name} ==")
        suites[name]()


if __name__ == "__main__":
    main(sys.argv[1:])
