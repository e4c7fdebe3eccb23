"""Another server process for tests: `python -m tests.site.api_worker` (DATABASE_URL set)
answers API calls read from stdin, one a line (`<method> <token> <path>`; a POST sends `{}`),
printing each one's status and `Retry-After` on stdout. It has its own process-local cache, as
another server process would, or the cache CACHE_URL names, its keys prefixed with
TEST_CACHE_KEY_PREFIX when set. `Worker` starts one and talks to it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    """Serve each call through the whole Django stack (middleware, DRF, the cache)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "vnext.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.cache import cache
    from django.db import connections
    from django.test import Client

    # django-environ's CACHE_URL cannot set Django's KEY_PREFIX: it is set here, before the
    # cache is first used.
    if os.environ.get("TEST_CACHE_KEY_PREFIX"):
        settings.CACHES["default"]["KEY_PREFIX"] = os.environ["TEST_CACHE_KEY_PREFIX"]
    assert cache.key_prefix == settings.CACHES["default"].get("KEY_PREFIX", "")

    client = Client()
    print("ready", flush=True)
    for line in sys.stdin:
        method, token, path = line.split()
        headers = {"Authorization": f"Token {token}", "Host": "localhost"}
        if method == "POST":
            response = client.post(path, "{}", content_type="application/json", headers=headers)
        else:
            response = client.get(path, headers=headers)
        print(response.status_code, response.get("Retry-After", "-"), flush=True)
    # Closed before exiting, so the test database is free to drop once the test ends.
    connections.close_all()


class Worker:
    """One `api_worker` process, with `env` laid over this environment."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.site.api_worker"],
            cwd=ROOT,
            env={**os.environ, **env},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._line() == "ready"

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"the worker exited with {self.process.poll()}"
        return line.strip()

    def call(self, method: str, token: str, path: str) -> tuple[int, str]:
        """The status and `Retry-After` (`-`: none) of the call, as this process answers it."""
        assert self.process.stdin is not None
        self.process.stdin.write(f"{method} {token} {path}\n")
        self.process.stdin.flush()
        status, retry_after = self._line().split()
        return int(status), retry_after

    def status(self, token: str, path: str) -> int:
        """The status of `GET path` with the token."""
        return self.call("GET", token, path)[0]

    def stop(self) -> None:
        """Close its input (it exits), and wait."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        finally:
            if self.process.poll() is None:
                self.process.kill()


def current_database_url() -> str:
    """The URL of the database this test process uses (pytest-django's test database)."""
    from django.db import connection

    db = connection.settings_dict
    credentials = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    host = db["HOST"] or "127.0.0.1"
    return f"postgres://{credentials}@{host}:{db['PORT'] or 5432}/{db['NAME']}"


if __name__ == "__main__":
    main()
