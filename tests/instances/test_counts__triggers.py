"""The instance counters follow every write the database sees (inserts, bulk inserts, status
changes by `save` or `update`, deletes), per workflow and status, before and after a fold;
and stay exact under concurrent status changes with folds running beside them."""

from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connection
from django.db.models import Count

from instances.counts import instance_counts, instance_counts_fold, workflow_counts
from instances.models import Instance, InstanceCountDelta

pytestmark = pytest.mark.django_db


# Workflows of their own: figures elsewhere in the database (other tests' rows committed by
# threads) do not change these.
PAY, OTHER = "counted-pay", "counted-other"


def _instance(workflow: str = PAY, status: str = "A", domain: str = "counted") -> Instance:
    return Instance(
        domain=domain,
        workflow_key=workflow,
        workflow_version="1.0.0",
        status=status,
        current_state="open",
        effective_state="open",
        etag="e",
        entity_etag="e",
    )


def _counted(**scope: str) -> dict[str, int]:
    """What a full count says (the figure the counters must agree with)."""
    rows = Instance.objects.filter(**scope).values_list("status").annotate(n=Count("id"))
    return dict(rows)


def test_the_counters_follow_inserts_status_changes_and_deletes():
    Instance.objects.bulk_create([_instance() for _ in range(5)])
    Instance.objects.bulk_create([_instance(OTHER), _instance(OTHER, "C")])
    one, two, three, *_ = Instance.objects.filter(workflow_key=PAY)
    Instance.objects.filter(pk__in=[one.pk, two.pk]).update(status="C")
    three.status = "F"
    three.save()
    three.data = {"changed": True}
    three.save()  # no status change: no delta
    Instance.objects.filter(pk=one.pk).delete()

    expected = {"A": 2, "C": 1, "F": 1}
    assert instance_counts(domain="counted", workflow=PAY) == expected
    assert _counted(workflow_key=PAY) == expected
    assert instance_counts(domain="counted", workflow=OTHER) == {"A": 1, "C": 1}
    assert instance_counts(domain="counted") == {"A": 3, "C": 2, "F": 1}
    assert instance_counts(domain="elsewhere") == {}
    assert workflow_counts().items() >= {("counted", PAY): 4, ("counted", OTHER): 2}.items()

    assert instance_counts_fold() > 0
    assert not InstanceCountDelta.objects.exists()
    assert instance_counts(domain="counted", workflow=PAY) == expected
    assert instance_counts(domain="counted") == {"A": 3, "C": 2, "F": 1}


@pytest.mark.postgres
def test_a_statement_inserting_many_rows_writes_one_delta_per_workflow_and_status():
    before = InstanceCountDelta.objects.count()
    Instance.objects.bulk_create([_instance() for _ in range(50)] + [_instance(status="C")])
    assert InstanceCountDelta.objects.count() == before + 2
    assert instance_counts(workflow=PAY) == {"A": 50, "C": 1}


def test_a_fold_in_small_batches_adds_every_delta_once():
    Instance.objects.bulk_create([_instance() for _ in range(3)])
    for row in Instance.objects.all():
        for status in ("B", "A", "B", "C"):
            row.status = status
            row.save(update_fields=["status"])
    folded = instance_counts_fold(batch=2)
    assert folded >= 3 * 4 * 2  # -1 and +1 a change
    assert not InstanceCountDelta.objects.exists()
    assert instance_counts(workflow=PAY) == {"C": 3}


@pytest.mark.postgres
@pytest.mark.concurrency
@pytest.mark.django_db(transaction=True)
def test_the_counters_stay_exact_under_concurrent_status_changes_and_folds():
    """Eight writers drive their own instances through A -> B -> A -> ... -> C or F while two
    folds run: no writer waits on a shared counter row or deadlocks, and the figures equal a
    full count at the end."""
    Instance.objects.bulk_create([_instance() for _ in range(8 * 6)])
    ids = list(Instance.objects.filter(workflow_key=PAY).values_list("pk", flat=True))
    barrier = threading.Barrier(10)
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(mine: list[uuid.UUID], last: str) -> None:
        try:
            barrier.wait(timeout=10)
            for _ in range(5):
                for pk in mine:
                    for status in ("B", "A"):
                        Instance.objects.filter(pk=pk).update(status=status)
            Instance.objects.filter(pk__in=mine).update(status=last)
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    def folder() -> None:
        try:
            barrier.wait(timeout=10)
            while not stop.is_set():
                instance_counts_fold(batch=50)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    writers = [
        threading.Thread(target=writer, args=(ids[n * 6 : n * 6 + 6], "C" if n % 2 else "F"))
        for n in range(8)
    ]
    folders = [threading.Thread(target=folder) for _ in range(2)]
    for thread in writers + folders:
        thread.start()
    for thread in writers:
        thread.join(timeout=60)
    stop.set()
    for thread in folders:
        thread.join(timeout=60)

    assert not errors
    assert not any(thread.is_alive() for thread in writers + folders)
    assert instance_counts(workflow=PAY) == {"C": 24, "F": 24}
    assert _counted(workflow_key=PAY) == {"C": 24, "F": 24}
    instance_counts_fold()
    assert instance_counts(workflow=PAY) == {"C": 24, "F": 24}
