"""Where a custom function's answer is cached, through the HTTP API: `keyExpression` (a script in
the workers, `handler(context) -> str`) keys the entry instead of the static `key`; a generation
(`generationKey`, or `generationKeyExpression`'s value) is folded into the key, so bumping it
(`function_generation_bump`, `manage.py function_generation_bump`) or computing another one makes
every older entry unreachable; `storeName` picks the Django cache alias the entries live in;
`bypassOnCacheError` decides what a failing store does."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import httpx
import pytest
from django.core.cache import BaseCache, caches
from django.core.management import call_command

from instances.functions import function_generation_bump
from tests.engine.builders import script
from tests.instances.http_server import http_server
from tests.instances.workflows import http_ref, http_task, publish

pytestmark = pytest.mark.django_db

DOMAIN_FUNCTIONS = "/api/v1/core/functions"
LOCMEM = "django.core.cache.backends.locmem.LocMemCache"


def counted(name: str, base: str, counter: str, **cache: Any) -> list[dict[str, Any]]:
    """A domain function calling `/counted/<counter>` (the server counts its runs), `cache`d."""
    return [
        http_task(f"{name}-call", f"{base}/counted/{counter}"),
        {
            "key": name,
            "domain": "core",
            "version": "1.0.0",
            "flow": "sys-functions",
            "flowVersion": "1.0.0",
            "tags": ["test"],
            "attributes": {"scope": "D", "task": http_ref(f"{name}-call"), "cache": cache},
        },
    ]


def runs(base: str, counter: str) -> int:
    count: int = httpx.get(f"{base}/count/{counter}").json()["count"]
    return count


def expression(body: str) -> dict[str, str]:
    """An expression script: `handler(context)` returning `body`."""
    return script(f"def handler(context):\n    return {body}\n")


def test_a_key_expression_keys_the_entry_from_the_request(operator_client):
    counter = uuid.uuid4().hex
    with http_server() as base:
        publish(
            *counted(
                "customer-limits",
                base,
                counter,
                ttlInSeconds=60,
                keyExpression=expression("'limits:' + context.query.get('customer', '')"),
            )
        )
        url = f"{DOMAIN_FUNCTIONS}/customer-limits"

        for customer in ("c-1", "c-1", "c-2", "c-1", "c-2"):
            answer = operator_client.get(url, {"customer": customer})
            assert answer.json() == {"customerLimits": {"counted": True}}
        assert runs(base, counter) == 2


def test_a_key_expression_that_fails_or_gives_no_key_runs_uncached_and_the_call_succeeds(
    operator_client, caplog
):
    failing, empty = uuid.uuid4().hex, uuid.uuid4().hex
    with http_server() as base:
        publish(
            *counted(
                "flaky-key",
                base,
                failing,
                ttlInSeconds=60,
                keyExpression=expression("context.query['missing']"),
            ),
            *counted("no-key", base, empty, ttlInSeconds=60, keyExpression=expression("''")),
        )
        caplog.set_level(logging.WARNING, logger="vnext.functions")

        for name in ("flaky-key", "flaky-key", "no-key", "no-key"):
            assert operator_client.get(f"{DOMAIN_FUNCTIONS}/{name}").status_code == 200
        assert (runs(base, failing), runs(base, empty)) == (2, 2)
    assert any("keyExpression failed" in record.getMessage() for record in caplog.records)


def test_bumping_a_generation_makes_every_older_entry_unreachable(operator_client):
    counter, other = uuid.uuid4().hex, uuid.uuid4().hex
    with http_server() as base:
        publish(
            *counted(
                "fx-rates",
                base,
                counter,
                ttlInSeconds=600,
                keyExpression=expression("context.query.get('pair', '')"),
                generationKey="rates",
            ),
            *counted("fx-fees", base, other, ttlInSeconds=600, generationKey="fees"),
        )

        def call_all() -> None:
            for pair in ("EURTRY", "USDTRY"):
                operator_client.get(f"{DOMAIN_FUNCTIONS}/fx-rates", {"pair": pair})
            operator_client.get(f"{DOMAIN_FUNCTIONS}/fx-fees")

        call_all()
        call_all()
        assert (runs(base, counter), runs(base, other)) == (2, 1)

        function_generation_bump("core", "rates")
        call_all()
        call_all()
        # Both variants of the bumped generation ran again; the other generation did not.
        assert (runs(base, counter), runs(base, other)) == (4, 1)

        call_command("function_generation_bump", "core", "rates", "fees")
        call_all()
        assert (runs(base, counter), runs(base, other)) == (6, 2)


def test_a_computed_generation_that_changes_leaves_the_old_entries_behind(operator_client):
    counter = uuid.uuid4().hex
    with http_server() as base:
        publish(
            *counted(
                "daily-report",
                base,
                counter,
                ttlInSeconds=600,
                generationKeyExpression=expression("'report-' + context.query.get('day', '')"),
            )
        )
        url = f"{DOMAIN_FUNCTIONS}/daily-report"

        for day in ("mon", "mon", "tue", "tue"):
            operator_client.get(url, {"day": day})
        assert runs(base, counter) == 2
        # Bumping the computed generation by its name invalidates its entries.
        function_generation_bump("core", "report-tue")
        operator_client.get(url, {"day": "tue"})
        operator_client.get(url, {"day": "mon"})
        assert runs(base, counter) == 3


@pytest.fixture
def function_store(settings: Any) -> str:
    """A second locmem cache, `functions`, beside the default one."""
    settings.CACHES = {
        **settings.CACHES,
        "functions": {"BACKEND": LOCMEM, "LOCATION": f"functions-{uuid.uuid4().hex}"},
    }
    return "functions"


def test_store_name_puts_the_entries_in_that_cache_alias(operator_client, function_store):
    counter = uuid.uuid4().hex
    with http_server() as base:
        publish(*counted("stored", base, counter, ttlInSeconds=60, storeName=function_store))
        url = f"{DOMAIN_FUNCTIONS}/stored"

        operator_client.get(url)
        operator_client.get(url)
        assert runs(base, counter) == 1
        caches["default"].clear()
        operator_client.get(url)
        assert runs(base, counter) == 1  # not in the default cache
        caches[function_store].clear()
        operator_client.get(url)
        assert runs(base, counter) == 2


class DownCache(BaseCache):
    """A cache backend whose server is down."""

    def __init__(self, location: str, params: dict[str, Any]) -> None:
        super().__init__(params)

    def get(self, key: Any, default: Any = None, version: Any = None) -> Any:
        raise ConnectionError("cache down")

    def add(self, key: Any, value: Any, timeout: Any = None, version: Any = None) -> bool:
        raise ConnectionError("cache down")

    def set(self, key: Any, value: Any, timeout: Any = None, version: Any = None) -> None:
        raise ConnectionError("cache down")


def test_a_store_that_is_down_is_bypassed_unless_the_function_says_otherwise(
    operator_client, settings, caplog
):
    settings.CACHES = {**settings.CACHES, "down": {"BACKEND": f"{__name__}.DownCache"}}
    tolerant, strict = uuid.uuid4().hex, uuid.uuid4().hex
    with http_server() as base:
        publish(
            *counted("tolerant", base, tolerant, storeName="down", generationKey="g"),
            *counted(
                "strict",
                base,
                strict,
                storeName="down",
                generationKey="g",
                bypassOnCacheError=False,
            ),
        )
        caplog.set_level(logging.WARNING, logger="vnext.functions")

        for _ in range(2):
            assert operator_client.get(f"{DOMAIN_FUNCTIONS}/tolerant").status_code == 200
        refused = operator_client.get(f"{DOMAIN_FUNCTIONS}/strict")
        assert (refused.status_code, refused.json()["errorCode"]) == (503, "Function:CacheFailed")
        assert (runs(base, tolerant), runs(base, strict)) == (2, 0)
    assert any("generation read failed" in record.getMessage() for record in caplog.records)


def test_entries_of_different_verbs_are_apart(operator_client):
    counter = uuid.uuid4().hex
    with http_server() as base:
        publish(*counted("verbal", base, counter, ttlInSeconds=60))
        url = f"{DOMAIN_FUNCTIONS}/verbal"

        operator_client.get(url)
        operator_client.get(url)
        operator_client.post(url, {}, format="json")
        operator_client.post(url, {}, format="json")
        assert runs(base, counter) == 2
