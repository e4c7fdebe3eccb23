"""Fan-out on PostgreSQL with real threads: a 200-item batch is one data write; items of
concurrent batches run at once up to the bulkheads, and no further (counted at the target, not
assumed); SubProcess inner tasks start one child each; and a process refuses to boot with a
limit of 0."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from instances.models import Correlation, Instance, InstanceDataVersion, InstanceTask
from instances.wiring import engine
from tests.engine.builders import script, state, transition, workflow
from tests.engine.builders import task_component as task
from tests.instances.fan_out_stub import FanOutStub, fan_out_stub
from tests.instances.workflows import http_task, publish

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
BASE = "/api/v1/core/workflows/{}/instances"
INNER = {"key": "inner", "domain": "core", "version": "1.0.0", "flow": "sys-tasks"}
FAN = {"key": "fan", "domain": "core", "version": "1.0.0", "flow": "sys-tasks"}


def fan_flow(key: str = "fan-flow", mapping: str | None = None) -> dict[str, Any]:
    reference: dict[str, Any] = {"order": 1, "task": FAN}
    if mapping is not None:
        reference["mapping"] = script(mapping)
    return workflow(
        [
            state("ready", 1, [transition("go", "done", onExecutionTasks=[reference])]),
            state("done", 3, subType=1),
        ],
        key=key,
    )


def start(client: APIClient, workflow: str, data: dict[str, Any]) -> str:
    response = client.post(f"{BASE.format(workflow)}/start?sync=true", data, format="json")
    assert response.status_code == 200, response.content
    return str(response.json()["id"])


def go(client: APIClient, workflow: str, instance_id: str) -> Any:
    url = f"{BASE.format(workflow)}/{instance_id}/transitions/go?sync=true"
    return client.patch(url, {}, format="json")


@pytest.fixture
def global_limit(settings) -> Iterator[int]:
    """A process-wide fan-out limit of 8 for the duration (a new engine takes it)."""
    before = settings.VNEXT
    settings.VNEXT = {**before, "FAN_OUT_MAX_CONCURRENT_ITEMS": 8}
    engine.cache_clear()
    yield 8
    # Put the setting back first: an engine built between this and the `settings` fixture's
    # own undo (a teardown that reaches the engine) would otherwise keep the limit of 8.
    settings.VNEXT = before
    engine.cache_clear()


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[FanOutStub]:
    with fan_out_stub() as running:
        yield running


ECHO_MAPPING = """
def item_input_handler(task, context, item):
    return ScriptResponse(data=item.value)
"""


def test_a_200_item_batch_is_one_data_version_row(operator_client):
    publish(
        task("inner", "7", {}),
        task("fan", "21", {"itemsPath": "$.items", "task": INNER}),
        fan_flow(mapping=ECHO_MAPPING),
    )
    instance_id = start(operator_client, "fan-flow", {"items": [{"n": i} for i in range(200)]})
    before = InstanceDataVersion.objects.filter(instance_id=instance_id).count()

    response = go(operator_client, "fan-flow", instance_id)

    assert response.status_code == 200, response.content
    assert InstanceDataVersion.objects.filter(instance_id=instance_id).count() - before == 1
    row = Instance.objects.get(pk=instance_id)
    assert row.data["fanOutResultsSummary"] == {
        "total": 200, "succeeded": 200, "failed": 0, "timedOut": False
    }  # fmt: skip
    assert [r["data"]["n"] for r in row.data["fanOutResults"]] == list(range(200))
    journal = InstanceTask.objects.filter(instance_id=instance_id, task_key__startswith="fan")
    assert journal.count() == 201  # the batch and its 200 items


SLEEP_MAPPING = """
def item_input_handler(task, context, item):
    task.url = context.configuration["Example:ApiBaseUrl"] + "/api/fan-out/sleep?ms=300"
    return ScriptResponse()
"""


def test_three_batches_of_five_slots_never_run_more_than_the_global_eight(
    operator, operator_client, global_limit, stub, monkeypatch, caplog
):
    caplog.set_level(logging.WARNING, "instances.engine.fan_out")
    monkeypatch.setitem(engine().config.script_configuration, "Example:ApiBaseUrl", stub.base_url)
    publish(
        http_task("inner", "API_BASEURL/placeholder", "POST"),
        task(
            "fan",
            "21",
            {"itemsPath": "$.items", "task": INNER, "execution": {"maxDegreeOfParallelism": 5}},
        ),
        fan_flow(mapping=SLEEP_MAPPING),
    )
    ids = [
        start(operator_client, "fan-flow", {"items": [{"n": i} for i in range(10)]})
        for _ in range(3)
    ]
    barrier = threading.Barrier(3)
    answers: list[Any] = [None] * 3

    def fire(index: int) -> None:
        client = APIClient()
        client.force_authenticate(operator)
        try:
            barrier.wait(timeout=30)
            answers[index] = go(client, "fan-flow", ids[index]).status_code
        finally:
            connection.close()

    threads = [threading.Thread(target=fire, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert answers == [200, 200, 200]
    assert sum(stub.calls.values()) == 30
    # 3 x 5 slots would allow 15 at once; the global limit caps the target's load at 8. More
    # than one batch's 5 ran at once, and items waited for the global limit: it is what held.
    assert 5 < stub.peak <= global_limit
    saturated = [r for r in caplog.records if r.getMessage().startswith("FanOutBulkheadSaturated")]
    assert saturated
    for instance_id in ids:
        summary = Instance.objects.get(pk=instance_id).data["fanOutResultsSummary"]
        assert summary["succeeded"] == 10


DELAY_MAPPING = """
def item_input_handler(task, context, item):
    base = context.configuration["Example:ApiBaseUrl"]
    task.url = base + "/api/fan-out/sleep?ms=" + str(item.value["ms"])
    return ScriptResponse()
"""


def run_batches_at_once(operator, stub: FanOutStub, monkeypatch, instances: int) -> list[str]:
    """Start `instances` instances of 6 items (each a 1 s call to the stub, 3 at a time), then
    let all their `go` transitions go at once from threads of their own; their ids."""
    monkeypatch.setitem(engine().config.script_configuration, "Example:ApiBaseUrl", stub.base_url)
    publish(
        http_task("inner", "API_BASEURL/placeholder", "POST"),
        task(
            "fan",
            "21",
            {"itemsPath": "$.items", "task": INNER, "execution": {"maxDegreeOfParallelism": 3}},
        ),
        fan_flow(mapping=DELAY_MAPPING),
    )
    client = APIClient()
    client.force_authenticate(operator)
    ids = [start(client, "fan-flow", {"items": [{"ms": 1000}] * 6}) for _ in range(instances)]
    barrier = threading.Barrier(instances)
    answers: list[Any] = [None] * instances

    def fire(index: int) -> None:
        own = APIClient()
        own.force_authenticate(operator)
        try:
            barrier.wait(timeout=30)
            answers[index] = go(own, "fan-flow", ids[index]).status_code
        finally:
            connection.close()

    threads = [threading.Thread(target=fire, args=(i,)) for i in range(instances)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert answers == [200] * instances
    assert sum(stub.calls.values()) == 6 * instances
    return ids


def test_items_of_different_instances_run_at_once_up_to_every_batch_limit(
    operator, operator_client, stub, monkeypatch
):
    # Nothing narrower than the bulkheads (script workers, the HTTP client's pool, a shared
    # lock) holds items back: 4 batches of 3 slots, under the default process-wide 64, put all
    # 12 calls in flight at once.
    ids = run_batches_at_once(operator, stub, monkeypatch, instances=4)

    assert stub.peak == 4 * 3
    for instance_id in ids:
        summary = Instance.objects.get(pk=instance_id).data["fanOutResultsSummary"]
        assert summary["succeeded"] == 6


def test_items_of_different_instances_run_at_once_up_to_the_process_limit(
    operator, operator_client, global_limit, stub, monkeypatch
):
    # 4 x 3 slots would allow 12; the process-wide 8 is reached and holds.
    ids = run_batches_at_once(operator, stub, monkeypatch, instances=4)

    assert stub.peak == global_limit
    for instance_id in ids:
        summary = Instance.objects.get(pk=instance_id).data["fanOutResultsSummary"]
        assert summary["succeeded"] == 6


CHILD_MAPPING = """
def item_input_handler(task, context, item):
    task.key = context.instance.id + "-doc-" + str(item.index)
    task.body = {"document": item.value, "parent": context.instance.id}
    return ScriptResponse()

def output_handler(context, result):
    return {"children": [i.data["id"] for i in result.items if i.is_success]}
"""


def test_subprocess_items_start_one_child_each_under_the_parent(operator_client):
    child = workflow(
        [state("c-open", 1, [transition("c-close", "c-done")]), state("c-done", 3, subType=1)],
        key="doc-child",
    )
    child["attributes"]["type"] = "P"
    publish(
        child,
        task("inner", "14", {"domain": "core", "flow": "doc-child"}),
        task("fan", "21", {"itemsPath": "$.docs", "task": INNER}),
        fan_flow(mapping=CHILD_MAPPING),
    )
    instance_id = start(operator_client, "fan-flow", {"docs": [{"code": c} for c in "abc"]})

    response = go(operator_client, "fan-flow", instance_id)

    assert response.status_code == 200, response.content
    children = Instance.objects.filter(workflow_key="doc-child")
    assert sorted(str(c.key) for c in children) == [f"{instance_id}-doc-{i}" for i in range(3)]
    assert sorted(Instance.objects.get(pk=instance_id).data["children"]) == sorted(
        str(c.pk) for c in children
    )
    assert Correlation.objects.filter(parent_id=uuid.UUID(instance_id), type="P").count() == 3


def test_a_process_refuses_to_boot_with_a_fan_out_limit_of_zero():
    env = {**os.environ, "VNEXT_FAN_OUT_MAX_CONCURRENT_ITEMS": "0"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    booted = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert booted.returncode != 0
    assert "FAN_OUT_MAX_CONCURRENT_ITEMS" in booted.stderr
    assert "must be an integer >= 1, not 0" in booted.stderr
