"""The benchmarks' own PostgreSQL database, so they never touch `vnext_test` (or any other data).

`use_bench_database()` runs BEFORE `django.setup()`: it creates the database `vnext_bench` when it
is missing (psycopg, autocommit, through the server's `postgres` maintenance database) and points
`DATABASE_URL` at it for this process and its children (the HTTP server the suite starts). Django's
`migrate` is then run against it by the suite. Override the URL with `BENCH_DATABASE_URL`.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

DEFAULT_BENCH_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/vnext_bench"


def bench_database_url() -> str:
    """`BENCH_DATABASE_URL`, or the default `vnext_bench` database on the local server."""
    return os.environ.get("BENCH_DATABASE_URL") or DEFAULT_BENCH_DATABASE_URL


def libpq_url(url: str, database: str | None = None) -> str:
    """The URL psycopg accepts (`postgresql://`), optionally naming another database."""
    parts = urlsplit(url)
    path = f"/{database}" if database is not None else parts.path
    return urlunsplit(("postgresql", parts.netloc, path, parts.query, parts.fragment))


def use_bench_database() -> str:
    """Create the bench database if missing and make it Django's default; return its URL."""
    import psycopg
    from psycopg import sql

    url = bench_database_url()
    name = urlsplit(url).path.lstrip("/")
    if not name or name in ("postgres", "vnext_test", "template0", "template1"):
        raise SystemExit(f"refusing to benchmark in database {name!r}: use a dedicated one")
    with psycopg.connect(libpq_url(url, "postgres"), autocommit=True) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists is None:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    os.environ["DATABASE_URL"] = url
    return url
