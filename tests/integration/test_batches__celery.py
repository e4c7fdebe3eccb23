"""A 5,000-instance batch retry on a real Celery worker (Redis, PostgreSQL) SIGKILLed in the middle
of the batch: a second worker picks it up, and every instance is handled exactly once — one
retry accepted and run per instance, one audit row each, the progress exact."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from django.db.models import Count

from instances.batches import BatchRequest, batch_create
from instances.job_table import Job
from instances.models import Batch, BatchItem, Instance, InstanceTransition, OperatorAction
from instances.queue import jobs_dispatch_due
from instances.repair import Actor
from instances.status import Channel
from tests.engine.builders import state, transition, workflow
from tests.instances.workflows import publish
from tests.integration.test_celery_worker import Worker, broker, wait_for

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.concurrency,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]
__all__ = ["broker"]  # the fixture, used by name
INSTANCES = 5000
CHUNK = 250
# As the beat's dispatch sweep would (every due job's message again: not in a tight loop).
SWEEP_SECONDS = 5.0


def faulted_in_bulk(count: int) -> list[uuid.UUID]:
    """`count` instances of `bulk-fix` faulted in `compute` (rows written directly: the point is
    the batch, not how they faulted)."""
    ids = [uuid.uuid4() for _ in range(count)]
    Instance.objects.bulk_create(
        Instance(
            id=instance_id,
            domain="core",
            workflow_key="bulk-fix",
            workflow_version="1.0.0",
            current_state="ready",
            effective_state="ready",
            status="F",
            created_by="client",
        )
        for instance_id in ids
    )
    InstanceTransition.objects.bulk_create(
        InstanceTransition(
            instance_id=instance_id,
            transition_key="compute",
            from_state="ready",
            trigger_type=0,
            status="faulted",
            error_code="Task:Http:503",
        )
        for instance_id in ids
    )
    return ids


def test_a_retry_batch_survives_a_worker_killed_mid_batch(broker, settings, tmp_path: Path):
    settings.VNEXT = {
        **settings.VNEXT,
        "JOB_LEASE_SECONDS": 3,
        "BATCH_CHUNK": CHUNK,
        "JOB_REDISPATCH_SECONDS": 10,
    }
    publish(
        workflow(
            [
                state("ready", 1, [transition("compute", "working")]),
                state("working", 2, [transition("finish", "done")]),
                state("done", 3, subType=1),
            ],
            key="bulk-fix",
        )
    )
    ids = faulted_in_bulk(INSTANCES)
    env = {"VNEXT_BATCH_CHUNK": str(CHUNK)}
    # Threads: the retry jobs a batch accepts wait on the database most of their time.
    pool = ("--pool=threads", "--concurrency=3")
    first = Worker(tmp_path / "first.log", env, pool)
    first.start()
    batch = batch_create(
        domain="core",
        workflow="bulk-fix",
        request=BatchRequest("retry", ["status=eq:Faulted"], {}),
        actor=Actor("night-operator", Channel.API),
        visible=None,
        roles=frozenset(),
    )
    assert batch.total == INSTANCES

    def progress() -> int:
        return Batch.objects.get(pk=batch.pk).handled

    wait_for(lambda: progress() >= 1000, 120, "a thousand items handled")
    first.kill()
    handled_at_kill = progress()
    assert handled_at_kill < INSTANCES  # killed mid-batch
    second = Worker(tmp_path / "second.log", env, pool)
    second.start()
    try:
        swept = [0.0]

        def finished() -> bool:
            if time.monotonic() - swept[0] > SWEEP_SECONDS:
                # The periodic sweep: the messages the killed worker took are lost.
                jobs_dispatch_due()
                swept[0] = time.monotonic()
            done = Batch.objects.get(pk=batch.pk).status == "completed"
            live = Job.objects.filter(status__in=("pending", "running")).exists()
            return done and not live

        wait_for(finished, 300, "the batch and its retries to finish")
    finally:
        second.stop()
    batch.refresh_from_db()
    assert (batch.status, batch.total, batch.done, batch.refused, batch.failed) == (
        "completed",
        INSTANCES,
        INSTANCES,
        0,
        0,
    )
    items = BatchItem.objects.filter(batch=batch)
    assert set(items.values_list("outcome", flat=True)) == {"done"}
    assert items.values("instance_id").distinct().count() == INSTANCES
    assert sorted(items.values_list("position", flat=True)) == list(range(1, INSTANCES + 1))
    # Exactly once: one retry job, one audit row, one completed re-run per instance.
    retry_jobs = Job.objects.filter(kind="transition", instance_id__in=ids)
    per_instance = retry_jobs.values("instance_id").annotate(n=Count("id"))
    assert {row["n"] for row in per_instance} == {1}
    assert per_instance.count() == INSTANCES
    assert set(retry_jobs.values_list("status", flat=True)) == {"succeeded"}
    trail = OperatorAction.objects.filter(action="retry", channel="batch", instance_id__in=ids)
    assert trail.count() == INSTANCES
    assert trail.values("instance_id").distinct().count() == INSTANCES
    reruns = InstanceTransition.objects.filter(
        instance_id__in=ids, transition_key="compute", status="completed"
    )
    assert reruns.count() == INSTANCES
    assert set(Instance.objects.filter(pk__in=ids).values_list("status", "current_state")) == {
        ("A", "working")
    }
