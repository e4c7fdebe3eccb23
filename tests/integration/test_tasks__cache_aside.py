"""The cache-aside task (type 18) end to end over HTTP, against the Redis running here: the key
from the task-level input handler; a miss runs the source HTTP task (its mapping shapes what is
cached, with the TTL), a second instance is a hit (the source is not called again); a store
that is down with `bypassOnCacheError: false` fails with `Task:CacheAside:ReadFailed`, an empty
key with `Task:CacheAside:KeyMissing`, each matched by an error boundary; with the default
bypass the source answers and nothing is cached."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any, cast

import httpx
import pytest
import redis

from instances.models import InstanceTask
from tests.engine.builders import script, task_component
from tests.instances.answers import fault_code
from tests.instances.http_server import http_server
from tests.instances.workflows import http_task
from tests.integration.task_targets_support import (
    REDIS_URL,
    abort_on,
    active_incident,
    answer_of,
    calls_workflow,
    closed_port,
    publish,
    reference,
    run_call,
)

pytestmark = pytest.mark.django_db

KEYED = """
def input_handler(task, context):
    task.key = "profile:" + context.instance.data["customer"]
    return None

def output_handler(context):
    meta = context.body["metadata"] or {}
    return {"profile": context.body["data"], "hit": meta.get("CacheHit"),
            "refreshed": meta.get("Refreshed"), "ok": context.body["is_success"]}
"""
UNKEYED = """
def output_handler(context):
    return {"ok": context.body["is_success"]}
"""
SOURCE_MAPPING = """
def output_handler(context):
    return {"name": "Ada", "counted": context.body["data"]["counted"]}
"""


def cache_task(counter: str, **config: Any) -> dict[str, Any]:
    source = {"key": "profile-source", "domain": "core", "version": "1.0.0", "flow": "sys-tasks"}
    return task_component(
        "cached-profile",
        "18",
        {
            "ttlInSeconds": 60,
            "sourceTask": source,
            "sourceMapping": script(SOURCE_MAPPING),
            **config,
        },
    )


@pytest.fixture
def store(settings: Any) -> Iterator[tuple[redis.Redis, str]]:
    prefix = f"vnext:test:{uuid.uuid4().hex[:8]}:"
    settings.VNEXT = {
        **settings.VNEXT,
        "STATE_STORES": {"statestore": {"kind": "redis", "url": REDIS_URL, "prefix": prefix}},
    }
    client = redis.Redis.from_url(REDIS_URL)
    yield client, prefix
    for key in client.scan_iter(f"{prefix}*"):
        client.delete(key)


def test_a_miss_runs_the_source_and_caches_its_shaped_value_a_second_run_hits(
    operator_client, store
):
    client, prefix = store
    counter = uuid.uuid4().hex[:8]
    with http_server() as base:
        publish(
            http_task("profile-source", f"{base}/counted/{counter}"),
            cache_task(counter),
            calls_workflow(reference("cached-profile", KEYED)),
        )
        first_id, first = run_call(operator_client)
        second_id, second = run_call(operator_client)
        calls = httpx.get(f"{base}/count/{counter}").json()["count"]
    profile = {"name": "Ada", "counted": True}
    assert first.json()["attributes"] == {
        "customer": "c-9",
        "profile": profile,
        "hit": False,
        "refreshed": True,
        "ok": True,
    }
    assert second.json()["attributes"] == {
        "customer": "c-9",
        "profile": profile,
        "hit": True,
        "refreshed": False,
        "ok": True,
    }
    assert calls == 1  # the hit did not call the source
    stored = cast(dict[bytes, bytes], client.hgetall(prefix + "custom:profile:c-9"))
    assert json.loads(stored[b"data"]) == profile
    assert 0 < client.ttl(prefix + "custom:profile:c-9") <= 60
    # One journal row per run, the cache-aside task's (the source has none of its own).
    [miss] = InstanceTask.objects.filter(instance_id=first_id)
    [hit] = InstanceTask.objects.filter(instance_id=second_id)
    assert (miss.task_key, miss.status, hit.task_key, hit.status) == (
        "cached-profile",
        "succeeded",
        "cached-profile",
        "succeeded",
    )
    assert answer_of(miss)["metadata"] == {
        "StoreName": "statestore",
        "Key": "custom:profile:c-9",
        "CacheHit": False,
        "Refreshed": True,
        "ETag": "1",
    }
    assert answer_of(hit)["metadata"]["CacheHit"] is True


@pytest.mark.parametrize(
    ("mapping", "bypass", "code"),
    [
        pytest.param(KEYED, False, "Task:CacheAside:ReadFailed", id="store-down-no-bypass"),
        pytest.param(UNKEYED, True, "Task:CacheAside:KeyMissing", id="empty-key"),
    ],
)
def test_a_failure_is_matched_by_a_boundary_on_its_code(
    operator_client, settings, mapping, bypass, code
):
    url = f"redis://127.0.0.1:{closed_port()}/0"
    settings.VNEXT = {
        **settings.VNEXT,
        "STATE_STORES": {"statestore": {"kind": "redis", "url": url, "timeout_seconds": 2}},
    }
    with http_server() as base:
        publish(
            http_task("profile-source", f"{base}/counted/{uuid.uuid4().hex[:8]}"),
            cache_task("x", bypassOnCacheError=bypass),
            calls_workflow(reference("cached-profile", mapping, **abort_on(code))),
        )
        instance_id, response = run_call(operator_client)
    assert fault_code(response) == code
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert (journal.status, journal.error_code) == ("failed", code)
    incident = active_incident(operator_client, instance_id)
    assert (incident["errorCode"], incident["boundaryAction"]) == (code, "Abort")


def test_a_store_that_is_down_is_bypassed_by_default(operator_client, settings):
    url = f"redis://127.0.0.1:{closed_port()}/0"
    settings.VNEXT = {
        **settings.VNEXT,
        "STATE_STORES": {"statestore": {"kind": "redis", "url": url, "timeout_seconds": 2}},
    }
    with http_server() as base:
        publish(
            http_task("profile-source", f"{base}/counted/{uuid.uuid4().hex[:8]}"),
            cache_task("x"),
            calls_workflow(reference("cached-profile", KEYED)),
        )
        instance_id, response = run_call(operator_client)
    assert response.json()["attributes"]["profile"] == {"name": "Ada", "counted": True}
    assert response.json()["attributes"]["refreshed"] is False
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert journal.status == "succeeded"
    cache_error = answer_of(journal)["metadata"]["CacheError"]
    assert cache_error.startswith("read: ")
    assert "; write: " in cache_error
