"""A batch cancel of 10,000 instances against single cancels through the API, in the same run.

The batch: created over a filter (the ids frozen in one statement), worked off in chunks by
`batch_work` (what the batch job runs), each item's cancel accepted with its job; then the cancel
jobs run (`jobs_run_due`, one worker thread). Two figures: instances per second accepted (the
batch's own work: each cancel admitted, Busy, with its job) and end to end, from the batch's
creation to the last instance Completed, which one job thread bounds (more workers run the
cancel jobs in parallel). The baseline: `PATCH .../transitions/cancel?sync=true`
one instance after another through the API (in process, DRF test client), as a script looping
over ids would do."""

from __future__ import annotations

import time
import uuid

from django.contrib.auth import get_user_model
from django.db import connection
from rest_framework.test import APIClient

from bench.bench_transitions import prepare_database
from bench.summary import record
from instances.batches import BatchRequest, batch_create, batch_work
from instances.job_handlers import jobs_run_due
from instances.models import Instance
from instances.repair import Actor
from tests.engine.builders import state, transition, workflow
from tests.instances.workflows import CANCEL, publish

BATCH_INSTANCES = 10_000
SINGLE_INSTANCES = 300
WORKFLOW = "bench-cancel"


def _definition() -> dict:
    return workflow(
        [
            state("open", 1, [transition("close", "closed")]),
            state("closed", 3, subType=1),
            state("cancelled", 3, subType=3),
        ],
        key=WORKFLOW,
        cancel=CANCEL,
    )


def _instances(count: int, tag: str) -> list[uuid.UUID]:
    """`count` Active instances in `open`, rows written directly (the point is the cancel)."""
    ids = [uuid.uuid4() for _ in range(count)]
    Instance.objects.bulk_create(
        (
            Instance(
                id=instance_id,
                domain="core",
                workflow_key=WORKFLOW,
                workflow_version="1.0.0",
                current_state="open",
                effective_state="open",
                status="A",
                stage=tag,
            )
            for instance_id in ids
        ),
        batch_size=2000,
    )
    return ids


def main() -> None:
    """Measure both; record the batch's instances/s against the single cancels'."""
    prepare_database()
    publish(_definition())
    user, _ = get_user_model().objects.get_or_create(
        username="bench-operator", defaults={"is_superuser": True, "is_staff": True}
    )
    client = APIClient(HTTP_HOST="localhost")
    client.force_authenticate(user)
    singles = _instances(SINGLE_INSTANCES, "single")
    _instances(BATCH_INSTANCES, "batch")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE instances_instance")

    base = f"/api/v1/core/workflows/{WORKFLOW}/instances"
    started = time.perf_counter()
    for instance_id in singles:
        response = client.patch(f"{base}/{instance_id}/transitions/cancel?sync=true", {}, "json")
        assert response.status_code == 200, response.content
    single_rate = SINGLE_INSTANCES / (time.perf_counter() - started)

    started = time.perf_counter()
    batch = batch_create(
        domain="core",
        workflow=WORKFLOW,
        request=BatchRequest("cancel", ["status=eq:Active"], {"reason": "bench"}),
        actor=Actor("bench-operator"),
        visible=None,
        roles=frozenset(),
    )
    created = time.perf_counter()
    while batch_work(batch.pk):
        pass
    accepted = time.perf_counter()
    while jobs_run_due(limit=500):
        pass
    finished = time.perf_counter()
    batch.refresh_from_db()
    cancelled = Instance.objects.filter(stage="batch", status="C").count()
    assert (batch.total, batch.done) == (BATCH_INSTANCES, BATCH_INSTANCES), batch
    assert cancelled == BATCH_INSTANCES, cancelled
    batch_rate = BATCH_INSTANCES / (finished - started)
    print(
        f"batch cancel of {BATCH_INSTANCES}: freeze {1000 * (created - started):.0f} ms, "
        f"accepted {BATCH_INSTANCES / (accepted - created):.0f}/s, end to end "
        f"{batch_rate:.0f} instances/s; single API cancels {single_rate:.0f}/s"
    )
    record(
        "batch cancel, 10,000 instances, accepted",
        BATCH_INSTANCES / (accepted - started),
        "/s",
        baseline="single cancels through the API",
        baseline_value=single_rate,
        target="report",
    )
    record(
        "batch cancel, 10,000, end to end, 1 job thread",
        batch_rate,
        "/s",
        baseline="single cancels through the API",
        baseline_value=single_rate,
        target="report",
    )
