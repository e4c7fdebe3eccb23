"""The state-store task (type 17) end to end over HTTP, against the Redis running here: a `set`
(key and value from the input handler, a TTL), a `get` of it and a `get` of a missing key (a
success, `Found` false) in one transition; the entries under the store's prefix and the fixed
`custom:` one; first-write-wins refused with `Task:StateStore:ETagMismatch`, and a store that is
down with `Task:StateStore:Unavailable`, each matched by an error boundary."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest
import redis

from instances.models import Instance, InstanceTask
from tests.engine.builders import task_component
from tests.instances.answers import fault_code
from tests.integration.task_targets_support import (
    REDIS_URL,
    active_incident,
    answer_of,
    calls_workflow,
    closed_port,
    publish,
    reference,
    run_call,
)

pytestmark = pytest.mark.django_db

SET = """
def input_handler(task, context):
    task.key = "customer:" + context.instance.data["customer"]
    return ScriptResponse(data={"name": "Ada", "limits": [1, 2]})

def output_handler(context):
    return {"written": context.body["metadata"]}
"""
GET = """
def input_handler(task, context):
    task.key = "customer:" + context.instance.data["customer"]
    return None

def output_handler(context):
    meta = context.body["metadata"]
    return {"read": {"value": context.body["data"], "found": meta["Found"], "etag": meta["ETag"]}}
"""
SEEN = """
def input_handler(task, context):
    task.key = "customer:" + context.instance.data["customer"]
    return None

def output_handler(context):
    return {"seen": {"ok": context.body["is_success"], "error": context.body["error_message"]}}
"""
MISS = """
def output_handler(context):
    return {"miss": {"value": context.body["data"], "found": context.body["metadata"]["Found"]}}
"""


@pytest.fixture
def store(settings: Any) -> Iterator[tuple[redis.Redis, str]]:
    """The store `statestore` on the local Redis under a fresh prefix (removed afterwards)."""
    prefix = f"vnext:test:{uuid.uuid4().hex[:8]}:"
    settings.VNEXT = {
        **settings.VNEXT,
        "STATE_STORES": {"statestore": {"kind": "redis", "url": REDIS_URL, "prefix": prefix}},
    }
    client = redis.Redis.from_url(REDIS_URL)
    yield client, prefix
    for key in client.scan_iter(f"{prefix}*"):
        client.delete(key)


def test_set_then_get_and_a_miss_in_one_transition(operator_client, store):
    client, prefix = store
    publish(
        task_component("save-profile", "17", {"command": "set", "ttlInSeconds": 300}),
        task_component("read-profile", "17", {"command": "get", "storeName": "statestore"}),
        task_component("read-missing", "17", {"command": "get", "key": "nobody"}),
        calls_workflow(
            reference("save-profile", SET, 1),
            reference("read-profile", GET, 2),
            reference("read-missing", MISS, 3),
        ),
    )
    instance_id, response = run_call(operator_client)
    assert response.status_code == 200, response.json()
    key = "custom:customer:c-9"
    assert response.json()["attributes"] == {
        "customer": "c-9",
        "written": {"StoreName": "statestore", "Key": key, "ETag": "1"},
        "read": {"value": {"name": "Ada", "limits": [1, 2]}, "found": True, "etag": "1"},
        "miss": {"value": None, "found": False},
    }
    rows = InstanceTask.objects.filter(instance_id=instance_id).order_by("order")
    assert [(r.task_key, r.status, r.error_code) for r in rows] == [
        ("save-profile", "succeeded", ""),
        ("read-profile", "succeeded", ""),
        ("read-missing", "succeeded", ""),
    ]
    assert answer_of(rows[2])["metadata"] == {
        "StoreName": "statestore",
        "Key": "custom:nobody",
        "Found": False,
        "ETag": None,
    }
    entry = cast(dict[bytes, bytes], client.hgetall(prefix + key))
    assert json.loads(entry[b"data"]) == {"name": "Ada", "limits": [1, 2]}
    assert entry[b"version"] == b"1"
    assert 0 < client.ttl(prefix + key) <= 300


def test_first_write_wins_refuses_an_existing_entry_and_the_dapr_boundary_faults(
    operator_client, store
):
    client, prefix = store
    client.hset(prefix + "custom:customer:c-9", mapping={"data": '"old"', "version": 4})
    code = "Task:StateStore:ETagMismatch"
    boundary: dict[str, Any] = {
        "errorBoundary": {"onError": [{"action": 0, "errorTypes": ["DaprException"]}]}
    }
    publish(
        task_component("save-profile", "17", {"command": "set", "concurrency": "FirstWrite"}),
        calls_workflow(reference("save-profile", SET, **boundary)),
    )
    instance_id, response = run_call(operator_client)
    assert fault_code(response) == code
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert (journal.status, journal.error_code) == ("failed", code)
    assert (answer_of(journal)["status_code"], answer_of(journal)["is_success"]) == (409, False)
    assert "first write wins" in journal.error_message
    # Nothing was written over the entry.
    assert client.hgetall(prefix + "custom:customer:c-9") == {b"data": b'"old"', b"version": b"4"}
    incident = active_incident(operator_client, instance_id)
    assert (incident["errorCode"], incident["boundaryAction"]) == (code, "Abort")


def test_an_etag_that_matches_writes_the_next_version(operator_client, store):
    client, prefix = store
    client.hset(prefix + "custom:customer:c-9", mapping={"data": '"old"', "version": 4})
    publish(
        task_component("save-profile", "17", {"command": "set", "etag": "4"}),
        calls_workflow(reference("save-profile", SET)),
    )
    _, response = run_call(operator_client)
    assert response.json()["attributes"]["written"]["ETag"] == "5", response.json()
    assert client.hget(prefix + "custom:customer:c-9", "version") == b"5"


def test_a_store_that_is_down_fails_with_unavailable_under_a_boundary(operator_client, settings):
    code = "Task:StateStore:Unavailable"
    url = f"redis://127.0.0.1:{closed_port()}/0"
    settings.VNEXT = {
        **settings.VNEXT,
        "STATE_STORES": {"statestore": {"kind": "redis", "url": url, "timeout_seconds": 2}},
    }
    boundary: dict[str, Any] = {"errorBoundary": {"onError": [{"action": 0, "errorCodes": [code]}]}}
    publish(
        task_component("read-profile", "17", {"command": "get"}),
        calls_workflow(reference("read-profile", SEEN, **boundary)),
    )
    started = time.monotonic()
    instance_id, response = run_call(operator_client)
    assert time.monotonic() - started < 10
    assert fault_code(response) == code
    assert Instance.objects.get(pk=instance_id).status == "F"
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert (journal.status, journal.error_code) == ("failed", code)
    assert answer_of(journal)["metadata"]["Key"] == "custom:customer:c-9"
    incident = active_incident(operator_client, instance_id)
    assert (incident["errorCode"], incident["boundaryLevel"]) == (code, "Task")
