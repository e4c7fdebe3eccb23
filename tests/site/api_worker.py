"""A second Django process for tests: it answers API calls read from stdin, one a line
(`<token> <path>`), printing each one's status on stdout. It has its own process-local cache,
as another server process would (`python -m tests.site.api_worker`, DATABASE_URL set), or the
cache CACHE_URL names, its keys prefixed with TEST_CACHE_KEY_PREFIX when set."""

from __future__ import annotations

import os
import sys


def main() -> None:
    """Serve GETs with `Authorization: Token <token>` through the whole Django stack."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "vnext.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.cache import cache
    from django.test import Client

    # django-environ's CACHE_URL cannot set Django's KEY_PREFIX: it is set here, before the
    # cache is first used.
    if os.environ.get("TEST_CACHE_KEY_PREFIX"):
        settings.CACHES["default"]["KEY_PREFIX"] = os.environ["TEST_CACHE_KEY_PREFIX"]
    assert cache.key_prefix == settings.CACHES["default"].get("KEY_PREFIX", "")

    client = Client()
    print("ready", flush=True)
    for line in sys.stdin:
        token, path = line.split()
        response = client.get(
            path, headers={"Authorization": f"Token {token}", "Host": "localhost"}
        )
        print(response.status_code, flush=True)


if __name__ == "__main__":
    main()
