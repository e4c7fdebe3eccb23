"""The built-in function cache (seed 001 "Config (Built-in Function Cache)"): the data, view and
schema functions answer from Django's cache while their instance is unchanged — for the
workflow's `config.functionCache.ttlSeconds`, else the host default — and any change of the
instance drops it. The state function is not cached by it."""

from __future__ import annotations

from typing import Any

import pytest

from instances.models import Instance
from tests.engine.builders import state, transition, workflow
from tests.instances.workflows import publish

pytestmark = pytest.mark.django_db
BASE = "/api/v1/core/workflows/cached/instances"


def cached_flow(ttl: int | None) -> dict[str, Any]:
    extra: dict[str, Any] = {"config": {"functionCache": {"ttlSeconds": ttl}}} if ttl else {}
    return workflow(
        [
            state("ready", 1, [transition("go", "done")]),
            state("done", 2, [transition("back", "ready")]),
        ],
        key="cached",
        **extra,
    )


def data(client: Any, instance_id: str) -> dict[str, Any]:
    response = client.get(f"{BASE}/{instance_id}/functions/data")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()["data"]
    return body


def behind_its_back(instance_id: str, values: dict[str, Any]) -> None:
    """Change the stored data without the engine (no ETag change): only a cache hides it."""
    Instance.objects.filter(pk=instance_id).update(data=values)


def test_an_unchanged_instance_answers_from_the_cache_and_a_change_drops_it(
    operator_client, settings
):
    settings.VNEXT = {**settings.VNEXT, "FUNCTION_CACHE_SECONDS": 0}
    publish(cached_flow(ttl=120))  # the workflow's TTL, though the host caches nothing
    started = operator_client.post(
        f"{BASE}/start?sync=true", {"attributes": {"n": 1}}, format="json"
    )
    instance_id = started.json()["id"]

    assert data(operator_client, instance_id) == {"n": 1}
    behind_its_back(instance_id, {"n": 99})
    assert data(operator_client, instance_id) == {"n": 1}  # served from the cache

    went = operator_client.patch(
        f"{BASE}/{instance_id}/transitions/go?sync=true", {"attributes": {"m": 2}}, format="json"
    )
    assert went.status_code == 200
    assert data(operator_client, instance_id) == {"n": 99, "m": 2}  # the change dropped it


def test_without_a_ttl_the_host_default_applies_and_zero_turns_it_off(operator_client, settings):
    publish(cached_flow(ttl=None))
    started = operator_client.post(
        f"{BASE}/start?sync=true", {"attributes": {"n": 1}}, format="json"
    )
    instance_id = started.json()["id"]

    settings.VNEXT = {**settings.VNEXT, "FUNCTION_CACHE_SECONDS": 60}
    assert data(operator_client, instance_id) == {"n": 1}
    behind_its_back(instance_id, {"n": 5})
    assert data(operator_client, instance_id) == {"n": 1}

    settings.VNEXT = {**settings.VNEXT, "FUNCTION_CACHE_SECONDS": 0}
    assert data(operator_client, instance_id) == {"n": 5}


def test_the_state_function_is_never_served_by_it(operator_client, settings):
    settings.VNEXT = {**settings.VNEXT, "FUNCTION_CACHE_SECONDS": 60}
    publish(cached_flow(ttl=120))
    started = operator_client.post(f"{BASE}/start?sync=true", {}, format="json")
    instance_id = started.json()["id"]
    operator_client.get(f"{BASE}/{instance_id}/functions/state")

    Instance.objects.filter(pk=instance_id).update(current_state="done")

    state_now = operator_client.get(f"{BASE}/{instance_id}/functions/state").json()
    assert state_now["state"] == "done"
