"""Publish refuses a pub/sub, state-store or cache-aside task whose named target settings do not
configure, and fields the runtime would not honour, each at its pointer with a plain message."""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.builders import task_component

pytestmark = pytest.mark.django_db
PUBLISH = "/api/v1/definitions/publish"
SOURCE = {"key": "src", "domain": "core", "version": "1.0.0"}


def refusals(client: Any, document: dict[str, Any]) -> dict[str, str]:
    response = client.post(PUBLISH, document, format="json")
    assert response.status_code == 400, response.json()
    return {error["pointer"]: error["message"] for error in response.json()["errors"]}


def test_an_unconfigured_pubsub_target_is_refused_at_its_pointer(operator_client, settings):
    settings.VNEXT = {
        **settings.VNEXT,
        "PUBSUB_TARGETS": {"audit": {"kind": "redis-streams", "url": "redis://x"}},
    }
    errors = refusals(
        operator_client, task_component("p", "4", {"pubSubName": "orders-bus", "topic": "t"})
    )
    assert errors == {
        "/attributes/config/pubSubName": "pub/sub target 'orders-bus' is not configured: "
        "VNEXT['PUBSUB_TARGETS'] has no entry 'orders-bus' (configured: audit)"
    }


def test_a_configured_target_publishes(operator_client, settings):
    settings.VNEXT = {
        **settings.VNEXT,
        "PUBSUB_TARGETS": {"audit": {"kind": "redis-streams", "url": "redis://x"}},
    }
    response = operator_client.post(
        PUBLISH, task_component("p", "4", {"pubSubName": "audit", "topic": "t"}), format="json"
    )
    assert response.status_code == 200, response.json()


def test_an_unconfigured_state_store_and_unhonoured_fields_are_refused(operator_client, settings):
    settings.VNEXT = {**settings.VNEXT, "STATE_STORES": {}}
    errors = refusals(
        operator_client,
        task_component(
            "s", "17", {"command": "get", "storeName": "cache", "ttlInSeconds": 5, "query": {}}
        ),
    )
    assert set(errors) == {
        "/attributes/config/storeName",
        "/attributes/config/ttlInSeconds",
        "/attributes/config/query",
    }
    assert errors["/attributes/config/storeName"].startswith(
        "state store 'cache' is not configured"
    )
    assert errors["/attributes/config/ttlInSeconds"] == "applies to set, not to 'get'"
    # Without storeName the default store must be configured.
    errors = refusals(operator_client, task_component("s", "17", {"command": "get", "key": "k"}))
    assert list(errors) == ["/attributes/config"]
    assert "DEFAULT_STATE_STORE 'statestore'" in errors["/attributes/config"]


def test_a_cache_aside_with_a_script_key_or_key_expression_is_refused(operator_client, settings):
    settings.VNEXT = {
        **settings.VNEXT,
        "STATE_STORES": {"statestore": {"kind": "redis", "url": "redis://x"}},
    }
    code = {"location": "dynamicExpresso", "encoding": "NAT", "code": '"k"'}
    errors = refusals(
        operator_client,
        task_component("c", "18", {"sourceTask": SOURCE, "key": code, "keyExpression": code}),
    )
    assert "a computed key (a script) is not run here" in errors["/attributes/config/key"]
    assert "removed" in errors["/attributes/config/keyExpression"]
