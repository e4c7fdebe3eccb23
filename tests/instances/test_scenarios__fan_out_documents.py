"""SCENARIOS.md section 7, fan-out-documents: a Fan-Out task (type 21) over `$.documents` with an
HTTP inner task, `allSettled`, the default output packaging, and the single-write invariant;
driven through the HTTP API with the scripts in Python
(`examples/core/Workflows/fan-out-documents/src/`) and a local stub standing in for the mock API
(`tests/instances/fan_out_stub.py`).

One difference from the vNext runtime, by design: this engine writes the instance data once per
transition hop, so the stamp before the batch, the batch and the stamp after it land in ONE data
version (vNext writes one per task: `after - before == 2`). The invariant the scenario guards
holds more strictly here: the batch adds at most one write, never `1 + N`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from instances.models import InstanceDataVersion, InstanceTask
from instances.wiring import engine
from tests.instances.fan_out_stub import FanOutStub, fan_out_stub
from tests.instances.scenario_api import WorkflowApi, import_examples

pytestmark = pytest.mark.django_db

TASK = "fan-out-documents-task"


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[FanOutStub]:
    """The mock API, and the mapping pointed at it through `context.configuration`."""
    with fan_out_stub(slow_seconds=0.3) as running:
        configuration = engine().config.script_configuration
        monkeypatch.setitem(configuration, "Example:ApiBaseUrl", running.base_url)
        yield running


@pytest.fixture
def api(db: None, operator_client: Any, stub: FanOutStub) -> WorkflowApi:
    import_examples()
    return WorkflowApi(operator_client, "fan-out-documents")


def documents(*ids: str) -> dict[str, Any]:
    return {"documents": [{"id": i, "url": f"https://docs.example/{i}"} for i in ids]}


def test_five_documents_all_succeed_in_index_order_and_complete(api, stub):
    ids = ("DOC-1", "DOC-2", "DOC-SLOW-3", "DOC-4", "DOC-5")
    instance_id = api.started(documents(*ids))
    assert api.detail(instance_id)["metadata"]["currentState"] == "documents-received"
    assert api.detail(instance_id)["attributes"]["documentCount"] == 5

    body = api.fired(instance_id, "process-documents")

    assert body["status"] == "C"
    data = api.detail(instance_id)["attributes"]
    assert api.detail(instance_id)["metadata"]["currentState"] == "documents-completed"
    results = data["documentResults"]
    assert [(r["index"], r["itemKey"], r["isSuccess"]) for r in results] == [
        (index, doc_id, True) for index, doc_id in enumerate(ids)
    ]
    assert set(results[0]) == {
        "index", "itemKey", "isSuccess", "data", "errorCode", "errorMessage", "durationMs"
    }  # fmt: skip
    assert results[2]["data"] == {
        "documentId": "DOC-SLOW-3",
        "path": "/api/fan-out/slow-documents/process",
    }
    assert results[2]["durationMs"] >= 250  # the slow endpoint's 0.3 s
    assert data["documentResultsSummary"] == {
        "total": 5, "succeeded": 5, "failed": 0, "timedOut": False
    }  # fmt: skip
    assert stub.calls == {doc_id: 1 for doc_id in ids}


def test_two_failures_of_five_settle_without_fault_on_the_partial_failure_path(api, stub):
    ids = ("DOC-1", "DOC-FAIL-2", "DOC-3", "DOC-FAIL-4", "DOC-5")
    instance_id = api.started(documents(*ids))

    body = api.fired(instance_id, "process-documents")

    assert body["status"] == "C"
    detail = api.detail(instance_id)
    assert detail["metadata"]["currentState"] == "documents-partial-failure"
    summary = detail["attributes"]["documentResultsSummary"]
    assert summary == {"total": 5, "succeeded": 3, "failed": 2, "timedOut": False}
    failed = [r for r in detail["attributes"]["documentResults"] if not r["isSuccess"]]
    assert [(r["itemKey"], r["errorCode"]) for r in failed] == [
        ("DOC-FAIL-2", "Task:Http:500"),
        ("DOC-FAIL-4", "Task:Http:500"),
    ]
    assert all(r["errorMessage"] for r in failed)


def test_the_batch_is_one_data_write_and_its_items_are_journalled_under_it(api, stub):
    instance_id = api.started(documents("DOC-1", "DOC-FAIL-2", "DOC-3"))
    versions_before = InstanceDataVersion.objects.filter(instance_id=instance_id).count()

    api.fired(instance_id, "process-documents")

    data = api.detail(instance_id)["attributes"]
    # The hop that ran the batch (with its two stamps) wrote once; the automatic hop after it
    # writes nothing of its own.
    written = InstanceDataVersion.objects.filter(instance_id=instance_id).count()
    assert written - versions_before == 1
    assert data["versionBeforeFanOutBatch"] == data["versionAfterFanOut"]
    head = InstanceDataVersion.objects.filter(instance_id=instance_id).latest("created_at")
    probe = api.client.get(api.url(instance_id, "functions", "data"), {"version": head.version})
    assert probe.status_code == 200
    assert probe.json()["data"]["documentResultsSummary"]["failed"] == 1
    major, minor, patch = (int(part) for part in head.version.split("."))
    beyond = api.client.get(
        api.url(instance_id, "functions", "data"), {"version": f"{major}.{minor}.{patch + 1}"}
    )
    assert (beyond.status_code, beyond.json()["data"]) == (200, None)
    rows = InstanceTask.objects.filter(instance_id=instance_id, task_key__startswith=TASK)
    assert sorted((r.task_key, r.status, r.error_code) for r in rows) == [
        (TASK, "succeeded", ""),
        (f"{TASK}#0", "succeeded", ""),
        (f"{TASK}#1", "failed", "Task:Http:500"),
        (f"{TASK}#2", "succeeded", ""),
    ]


def test_no_documents_is_an_empty_batch_that_completes(api, stub):
    instance_id = api.started({"documents": []})

    api.fired(instance_id, "process-documents")

    detail = api.detail(instance_id)
    assert detail["metadata"]["currentState"] == "documents-completed"
    assert detail["attributes"]["documentResults"] == []
    assert detail["attributes"]["documentResultsSummary"]["total"] == 0
    assert not stub.calls


def test_cancel_ends_in_documents_cancelled(api, stub):
    instance_id = api.started(documents("DOC-1"))

    response = api.fire(instance_id, "cancel-fan-out-documents")

    assert response.status_code == 200, response.content
    detail = api.detail(instance_id)
    assert (detail["metadata"]["currentState"], detail["metadata"]["status"]) == (
        "documents-cancelled",
        "C",
    )
    assert not stub.calls
