"""Run every benchmark: `python -m bench [name ...]`.

The `transitions`, `jobs`, `locks`, `subflows`, `longpoll`, `serving`, `fuzz`, `fanout`,
`admin`, `observability`, `funnel`, `crossings`, `order`, `http_order`, `batches` and
`events` suites need PostgreSQL: before Django is set up, `DATABASE_URL` is pointed at the
benchmarks' own database (`vnext_bench`, created when missing; `BENCH_DATABASE_URL` overrides
it), so `make bench` never writes to the test database.
The other suites use no database.

`python -m bench soak [options]` is the fault-injection soak (bench/soak.py), never part of the
default list: it runs the production topology with Celery for many minutes in `vnext_soak`.
`python -m bench scale [--instances N]` measures every read at 2,000 and at N instances
(bench/bench_scale.py); it is not in the default list either (it builds a million rows).
"""

from __future__ import annotations

import os
import sys

import django

SUITES = (
    "scripts",
    "validation",
    "transitions",
    "jobs",
    "locks",
    "subflows",
    "longpoll",
    "serving",
    "fuzz",
    "fanout",
    "admin",
    "observability",
    "funnel",
    "crossings",
    "order",
    "http_order",
    "batches",
    "events",
)
# Every suite but these needs PostgreSQL.
DATABASE_SUITES = set(SUITES) - {"scripts", "validation"}


def main(argv: list[str]) -> None:
    """Set up Django, then run the named benchmarks (default: all)."""
    if argv[:1] == ["soak"]:
        # Not a suite of `make bench`: it runs for many minutes, kills workers and restarts
        # PostgreSQL, in its own database (bench/soak.py).
        from bench.soak import main as soak

        soak(argv[1:])
        return
    if argv[:1] == ["scale"]:
        # Not a suite of `make bench` either: it builds a million instances (bench/bench_scale.py).
        from bench.database import use_bench_database

        use_bench_database()
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
        django.setup()
        from bench.bench_scale import main as scale
        from bench.summary import print_summary

        try:
            scale(argv[1:])
        finally:
            print_summary()
        return
    names = argv or list(SUITES)
    unknown = [name for name in names if name not in SUITES]
    if unknown:
        raise SystemExit(f"unknown suite(s) {unknown}; choose from {list(SUITES)}")
    if DATABASE_SUITES.intersection(names):
        from bench.database import use_bench_database

        use_bench_database()
    # The project's settings plus the bench-only app of the django-fsm-2 baseline.
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    django.setup()
    from bench import (
        bench_admin,
        bench_batches,
        bench_crossings,
        bench_events,
        bench_fanout,
        bench_funnel,
        bench_fuzz,
        bench_http_order,
        bench_jobs,
        bench_locks,
        bench_longpoll,
        bench_observability,
        bench_order,
        bench_scripts,
        bench_serving,
        bench_subflows,
        bench_transitions,
        bench_validation,
    )

    suites = {
        "scripts": bench_scripts.main,
        "validation": bench_validation.main,
        "transitions": bench_transitions.main,
        "jobs": bench_jobs.main,
        "locks": bench_locks.main,
        "fanout": bench_fanout.main,
        "admin": bench_admin.main,
        "subflows": bench_subflows.main,
        "longpoll": bench_longpoll.main,
        "serving": bench_serving.main,
        "fuzz": bench_fuzz.main,
        "observability": bench_observability.main,
        "funnel": bench_funnel.main,
        "crossings": bench_crossings.main,
        "order": bench_order.main,
        "http_order": bench_http_order.main,
        "batches": bench_batches.main,
        "events": bench_events.main,
    }
    from bench.summary import print_summary

    try:
        for name in names:
            print(f"\n== {name} ==")
            suites[name]()
    finally:
        print_summary()


if __name__ == "__main__":
    main(sys.argv[1:])
