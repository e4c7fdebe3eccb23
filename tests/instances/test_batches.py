"""Batch operations over a filter (`POST .../batches`): the matching ids frozen at creation, worked
off in chunks by the job runner, progress and per-item outcomes through the API, a dry-run count,
cancellation, and the audit of every item with channel `batch`."""

from __future__ import annotations

from typing import Any

import pytest

from instances.batches import batch_work
from instances.job_handlers import jobs_run_due
from instances.job_table import Job
from instances.models import Batch, BatchItem, Instance, OperatorAction
from tests.instances.operator_fixtures import faulted_instance, fixable
from tests.instances.test_repair__suspend_migrate import BASE, reminders, started
from tests.instances.workflows import publish

BATCHES = "/api/v1/core/workflows/reminders/batches"


def run_until_done(limit: int = 50) -> None:
    for _ in range(limit):
        if not Job.objects.filter(kind="batch", status__in=("pending", "running")).exists():
            return
        jobs_run_due()
    raise AssertionError("the batch job did not finish")


def create(client, body: dict[str, Any], path: str = BATCHES):
    return client.post(path, body, format="json")


@pytest.mark.django_db
def test_a_suspend_batch_freezes_the_matching_ids_and_reports_each_outcome(
    operator_client, settings
):
    settings.VNEXT = {**settings.VNEXT, "BATCH_CHUNK": 2}
    publish(reminders())
    active = [started(operator_client, {"region": "north"}) for _ in range(5)]
    south = started(operator_client, {"region": "south"})
    done = started(operator_client, {"region": "north"})
    operator_client.patch(f"{BASE}/{done}/transitions/approve?sync=true", {}, format="json")
    body = {
        "operation": "suspend",
        "filter": {"attributes": {"region": {"eq": "north"}}},
        "reason": "audit freeze",
    }

    dry = create(operator_client, {**body, "dryRun": True})
    assert (dry.status_code, dry.json()) == (200, {"total": 6, "dryRun": True})
    assert not Batch.objects.exists()

    created = create(operator_client, body)

    assert created.status_code == 202, created.json()
    batch_id = created.json()["id"]
    assert created.json()["total"] == 6
    late = started(operator_client, {"region": "north"})  # after the freeze: not in the batch
    run_until_done()
    progress = operator_client.get(f"{BATCHES}/{batch_id}").json()
    assert {k: progress[k] for k in ("status", "total", "done", "refused", "failed")} == {
        "status": "completed",
        "total": 6,
        "done": 5,
        "refused": 1,
        "failed": 0,
    }
    outcomes = {item["instanceId"]: item for item in progress["items"]}
    assert {outcomes[i]["outcome"] for i in active} == {"done"}
    assert outcomes[done]["outcome"] == "refused"
    assert outcomes[done]["reason"].startswith("Instance:NotSuspendable")
    assert south not in outcomes
    assert late not in outcomes
    statuses = dict(Instance.objects.values_list("id", "status"))
    assert {str(k): v for k, v in statuses.items() if str(k) in active} == dict.fromkeys(
        active, "P"
    )
    assert statuses[Instance.objects.get(pk=late).pk] == "A"
    trail = OperatorAction.objects.filter(instance_id__in=[*active, done])
    assert sorted((row.action, row.channel) for row in trail) == [("suspend", "batch")] * 6
    # Paging the items, and items of one outcome.
    first = operator_client.get(f"{BATCHES}/{batch_id}?pageSize=4").json()
    assert [item["position"] for item in first["items"]] == [1, 2, 3, 4]
    rest = operator_client.get(f"{BATCHES}/{batch_id}?pageSize=4&after={first['nextAfter']}")
    assert [item["position"] for item in rest.json()["items"]] == [5, 6]
    refused = operator_client.get(f"{BATCHES}/{batch_id}?outcome=refused").json()["items"]
    assert [item["instanceId"] for item in refused] == [done]


@pytest.mark.django_db
def test_a_retry_batch_merges_the_correction_and_re_runs_each_faulted_instance(
    operator_client,
):
    publish(fixable())
    faulted = [faulted_instance() for _ in range(3)]

    created = create(
        operator_client,
        {"operation": "retry", "filter": ["status=eq:Faulted"], "attributes": {"divisor": 4}},
        path="/api/v1/core/workflows/fixable/batches",
    )

    assert created.status_code == 202, created.json()
    run_until_done()
    jobs_run_due()  # the retries the batch accepted
    for instance in faulted:
        row = Instance.objects.get(pk=instance.pk)
        assert (row.status, row.current_state, row.data["quotient"]) == ("A", "working", 2.5)
    batch = Batch.objects.get()
    assert (batch.status, batch.done, batch.refused, batch.failed) == ("completed", 3, 0, 0)
    assert OperatorAction.objects.filter(action="retry", channel="batch").count() == 3


@pytest.mark.django_db
def test_a_cancelled_batch_leaves_its_pending_items_undone(operator_client, settings):
    settings.VNEXT = {**settings.VNEXT, "BATCH_CHUNK": 2}
    publish(reminders())
    for _ in range(5):
        started(operator_client)
    batch_id = create(operator_client, {"operation": "suspend", "filter": []}).json()["id"]
    assert batch_work(Batch.objects.get().pk) is True  # one chunk of two

    cancelled = operator_client.post(f"{BATCHES}/{batch_id}/cancel")

    assert cancelled.status_code == 200, cancelled.json()
    assert (cancelled.json()["status"], cancelled.json()["done"]) == ("cancelled", 2)
    run_until_done()
    outcomes = sorted(BatchItem.objects.values_list("outcome", flat=True))
    assert outcomes == ["cancelled", "cancelled", "cancelled", "done", "done"]
    assert Instance.objects.filter(status="P").count() == 2
    again = operator_client.post(f"{BATCHES}/{batch_id}/cancel")
    assert (again.status_code, again.json()["error"]["code"]) == (409, "Batch:Finished")


@pytest.mark.django_db
def test_a_migrate_batch_moves_every_matching_instance(operator_client):
    publish(reminders())
    ids = [started(operator_client) for _ in range(3)]
    publish(reminders("1.0.1"))

    create(operator_client, {"operation": "migrate", "filter": [], "targetVersion": "1.0.1"})
    run_until_done()

    assert set(Instance.objects.filter(pk__in=ids).values_list("workflow_version", flat=True)) == {
        "1.0.1"
    }
    assert OperatorAction.objects.filter(action="migrate", channel="batch").count() == 3


@pytest.mark.django_db
def test_bad_batch_requests_name_the_field(operator_client, settings):
    publish(reminders())

    def refused(body: Any) -> tuple[int, str, str]:
        response = create(operator_client, body)
        answer = response.json()
        return response.status_code, answer["error"]["code"], answer["errors"][0]["pointer"]

    assert refused({"operation": "explode"}) == (400, "App:900002", "/operation")
    assert refused({"operation": "migrate"}) == (400, "App:900002", "/targetVersion")
    assert refused({"operation": "retry", "attributes": [1]}) == (400, "App:900002", "/attributes")
    assert refused({"operation": "cancel", "filter": 5}) == (400, "App:900002", "/filter")
    settings.VNEXT = {**settings.VNEXT, "BATCH_MAX_ITEMS": 2}
    for _ in range(3):
        started(operator_client)
    assert refused({"operation": "suspend"}) == (400, "Batch:TooLarge", "/filter")
    assert not Batch.objects.exists()
    missing = operator_client.get(f"{BATCHES}/00000000-0000-0000-0000-000000000000")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "Batch:NotFound")
