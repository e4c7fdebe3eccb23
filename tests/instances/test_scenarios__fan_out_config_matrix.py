"""SCENARIOS.md section 8, fan-out-config-matrix: every join policy with its empty-batch rule,
item and batch timeouts, the two bulkhead widths, and the per-item error boundary, one case per
manual transition from the hub state; driven through the HTTP API with the mapping in Python
(`examples/core/Workflows/fan-out-config-matrix/src/FanOutCaseMapping.py`) and a local stub for
the mock API (`DOC-*` 200, `DOC-FAIL*` 500, `DOC-SLOW*` 200 after 1.5 s).

The workflow defines no state or workflow error boundary, so a failed join faults the instance
in the case's state. (The stored 1.0.0 has automatic transitions with no rule, which seed 001
refuses; the example gives them `triggerKind: 10`, the same unconditional move.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from instances.models import InstanceTask
from instances.wiring import engine
from tests.instances.fan_out_stub import FanOutStub, fan_out_stub
from tests.instances.scenario_api import WorkflowApi, import_examples

pytestmark = pytest.mark.django_db

SETTLED = ("case-settled", "C")


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[FanOutStub]:
    with fan_out_stub(slow_seconds=1.5) as running:
        configuration = engine().config.script_configuration
        monkeypatch.setitem(configuration, "Example:ApiBaseUrl", running.base_url)
        yield running


@pytest.fixture
def api(db: None, operator_client: Any, stub: FanOutStub) -> WorkflowApi:
    import_examples()
    return WorkflowApi(operator_client, "fan-out-config-matrix")


def run_case(api: WorkflowApi, case: str, *ids: str) -> tuple[str, dict[str, Any]]:
    """Start with `ids` as documents, fire `run-<case>`: the instance id and the answer."""
    instance_id = api.started({"documents": [{"id": doc_id} for doc_id in ids]})
    response = api.fire(instance_id, f"run-{case}")
    assert response.status_code == 200, response.content
    return instance_id, response.json()


def where(api: WorkflowApi, instance_id: str) -> tuple[str, str]:
    metadata = api.detail(instance_id)["metadata"]
    return metadata["currentState"], metadata["status"]


def results(api: WorkflowApi, instance_id: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    data = api.detail(instance_id)["attributes"]
    return data["caseResults"], data["caseResultsSummary"]


def codes(rows: list[dict[str, Any]]) -> list[str | None]:
    return [row["errorCode"] for row in rows]


def test_join_all_with_every_item_ok_settles(api):
    instance_id, _ = run_case(api, "join-all", "DOC-1", "DOC-2", "DOC-3")

    assert where(api, instance_id) == SETTLED
    _, summary = results(api, instance_id)
    assert summary == {"total": 3, "succeeded": 3, "failed": 0, "timedOut": False}


def test_join_all_with_one_failure_faults_in_the_case_state(api):
    instance_id, answer = run_case(api, "join-all", "DOC-1", "DOC-FAIL-2", "DOC-3")

    assert where(api, instance_id) == ("case-join-all", "F")
    assert answer["error"]["errorCode"] == "FanOut:JoinFailed"
    active = api.client.get(api.url(instance_id, "incidents", "active")).json()
    assert (active["errorCode"], active["taskKey"]) == (
        "FanOut:JoinFailed",
        "fanout-case-join-all-task",
    )


@pytest.mark.parametrize("case", ["join-all", "join-all-settled"])
def test_an_empty_batch_meets_all_and_all_settled(api, case):
    instance_id, _ = run_case(api, case)

    assert where(api, instance_id) == SETTLED
    rows, summary = results(api, instance_id)
    assert (rows, summary["total"]) == ([], 0)


@pytest.mark.parametrize(
    ("case", "ids", "expected"),
    [
        ("join-quorum", ("DOC-1", "DOC-FAIL-2", "DOC-3", "DOC-FAIL-4"), SETTLED),
        ("join-quorum", ("DOC-1", "DOC-FAIL-2", "DOC-FAIL-3"), ("case-join-quorum", "F")),
        ("join-quorum", (), ("case-join-quorum", "F")),
        ("join-first-success", ("DOC-FAIL-1", "DOC-2", "DOC-FAIL-3"), SETTLED),
        ("join-first-success", ("DOC-FAIL-1", "DOC-FAIL-2"), ("case-join-first-success", "F")),
        ("join-first-success", (), ("case-join-first-success", "F")),
    ],
)
def test_threshold_policies_count_successes_and_an_empty_batch_fails_them(api, case, ids, expected):
    instance_id, _ = run_case(api, case, *ids)

    assert where(api, instance_id) == expected


def test_a_straggler_times_out_on_its_own_and_the_batch_settles(api):
    instance_id, _ = run_case(api, "item-timeout", "DOC-1", "DOC-SLOW-2", "DOC-3")

    assert where(api, instance_id) == SETTLED
    rows, summary = results(api, instance_id)
    assert codes(rows) == [None, "FanOut:ItemTimeout", None]
    assert summary == {"total": 3, "succeeded": 2, "failed": 1, "timedOut": False}


def test_a_serial_batch_past_its_limit_times_out_and_still_settles(api):
    instance_id, _ = run_case(api, "batch-timeout-serial", "DOC-SLOW-1", "DOC-SLOW-2", "DOC-SLOW-3")

    assert where(api, instance_id) == SETTLED
    rows, summary = results(api, instance_id)
    # One slot: the first item fits in the 2 s, the second is cut by the batch's limit.
    assert codes(rows)[0] is None
    assert "FanOut:BatchTimeout" in codes(rows)
    assert summary["timedOut"] is True
    assert summary["succeeded"] == 1


def test_four_slots_run_the_same_three_slow_items_in_time(api, stub):
    instance_id, _ = run_case(api, "parallel-baseline", "DOC-SLOW-1", "DOC-SLOW-2", "DOC-SLOW-3")

    assert where(api, instance_id) == SETTLED
    _, summary = results(api, instance_id)
    assert summary == {"total": 3, "succeeded": 3, "failed": 0, "timedOut": False}
    assert stub.peak == 3


def test_an_item_boundary_ignore_keeps_a_failure_from_failing_join_all(api):
    instance_id, _ = run_case(api, "item-boundary-ignore", "DOC-1", "DOC-FAIL-2", "DOC-3")

    assert where(api, instance_id) == SETTLED
    rows, summary = results(api, instance_id)
    assert summary["failed"] == 0
    # The ignored failure stays visible on its row.
    assert (rows[1]["isSuccess"], rows[1]["errorCode"]) == (True, "Task:Http:500")


def test_an_item_boundary_retry_exhausts_in_its_own_row(api, stub):
    instance_id, _ = run_case(api, "item-boundary-retry", "DOC-1", "DOC-FAIL-2", "DOC-3")

    assert where(api, instance_id) == SETTLED
    rows, summary = results(api, instance_id)
    assert codes(rows) == [None, "Task:Http:500", None]
    assert summary["failed"] == 1
    assert stub.calls == {"DOC-1": 1, "DOC-FAIL-2": 3, "DOC-3": 1}  # the call + 2 retries
    row = InstanceTask.objects.get(
        instance_id=instance_id, task_key="fanout-case-item-boundary-retry-task#1"
    )
    assert (row.status, row.attempts) == ("failed", 3)


def test_a_durable_mode_task_is_refused_at_publish_naming_the_field(api):
    document = {
        "key": "fanout-durable-task",
        "version": "1.0.0",
        "domain": "core",
        "flow": "sys-tasks",
        "flowVersion": "1.0.0",
        "tags": ["fan-out"],
        "attributes": {
            "type": "21",
            "config": {
                "mode": "durable",
                "itemsPath": "$.documents",
                "task": {
                    "key": "process-document-task",
                    "domain": "core",
                    "flow": "sys-tasks",
                    "version": "1.0.0",
                },
            },
        },
    }

    response = api.client.post("/api/v1/definitions/publish", document, format="json")

    assert response.status_code == 400, response.content
    body = response.json()
    assert body["errorCode"] == "App:900006"
    assert [e["pointer"] for e in body["errors"]] == ["/attributes/config/mode"]
