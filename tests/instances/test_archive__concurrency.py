"""The archive beside live work (PostgreSQL, real threads): a candidate another transaction
holds is skipped, never waited for; archiving while clients drive transitions on other instances
of the same workflow gives no client an error and touches none of their rows."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone
from rest_framework.test import APIClient

from instances.archive import FolderArchive, archive_verify, instances_archive
from instances.models import ArchivedInstance, Instance, InstanceDataVersion, InstanceTransition
from tests.instances.archiving import BASE, FLOW, publish_retained, rows_of

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.concurrency,
    pytest.mark.django_db(transaction=True),
]


def old_completed(count: int) -> list[Any]:
    """`count` instances completed 60 days ago, each with two history rows and a data version."""
    done = timezone.now() - timedelta(days=60)
    instances = Instance.objects.bulk_create(
        Instance(
            domain="core",
            workflow_key=FLOW,
            workflow_version="1.0.0",
            key=f"old-{i}",
            status="C",
            current_state="done",
            effective_state="done",
            etag="e",
            entity_etag="e",
            completed_at=done - timedelta(minutes=i),
        )
        for i in range(count)
    )
    for instance in instances:
        for key, target in (("start", "ping"), ("finish", "done")):
            InstanceTransition.objects.create(
                instance=instance,
                transition_key=key,
                to_state=target,
                trigger_type=0,
                status="completed",
            )
        InstanceDataVersion.objects.create(instance=instance, version="1.0.0", data={"i": 1})
    return [instance.pk for instance in instances]


def test_a_candidate_held_by_another_transaction_is_skipped_not_waited_for(db, tmp_path):
    publish_retained()
    held, *free = old_completed(3)
    locked, release, finished = threading.Event(), threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                Instance.objects.select_for_update().filter(pk=held).get()
                locked.set()
                release.wait(timeout=30)
        finally:
            connection.close()
            finished.set()

    holder = threading.Thread(target=hold)
    holder.start()
    assert locked.wait(timeout=10)
    try:
        report = instances_archive(archive=FolderArchive(tmp_path))
    finally:
        release.set()
        holder.join(timeout=30)
    assert finished.is_set()
    assert report.archived == 2
    assert not report.errors
    assert set(ArchivedInstance.objects.values_list("pk", flat=True)) == set(free)
    assert list(Instance.objects.values_list("pk", flat=True)) == [held]
    # Released, it is archived by the next run.
    assert instances_archive(archive=FolderArchive(tmp_path)).archived == 1


def test_archiving_while_clients_drive_other_instances(operator, tmp_path):
    publish_retained()
    archived = old_completed(30)
    clients, rounds = 4, 6
    live = []
    for _ in range(clients):
        client = APIClient()
        client.force_authenticate(operator)
        answer = client.post(f"{BASE}/start?sync=true", {"attributes": {"n": 1}}, format="json")
        live.append(answer.json()["id"])
    barrier = threading.Barrier(clients + 1)
    errors: list[str] = []

    def drive(instance_id: str) -> None:
        client = APIClient()
        client.force_authenticate(operator)
        try:
            barrier.wait(timeout=30)
            for _ in range(rounds):
                for key in ("to-pong", "to-ping"):
                    url = f"{BASE}/{instance_id}/transitions/{key}?sync=true"
                    answer = client.patch(url, {}, format="json")
                    if answer.status_code != 200:
                        errors.append(f"{answer.status_code} {answer.content[:200]!r}")
        except BaseException as exc:  # reported below
            errors.append(repr(exc))
        finally:
            connection.close()

    threads = [threading.Thread(target=drive, args=(pk,)) for pk in live]
    for thread in threads:
        thread.start()
    barrier.wait(timeout=30)
    report = instances_archive(archive=FolderArchive(tmp_path), batch_size=4)
    for thread in threads:
        thread.join(timeout=120)

    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    assert report.errors == []
    assert report.archived == len(archived)
    assert set(ArchivedInstance.objects.values_list("pk", flat=True)) == set(archived)
    for instance_id in live:
        rows = rows_of(instance_id)
        assert len(rows["instance"]) == 1
        assert rows["instance"][0]["status"] == "A"
        # start, then every driven transition: the archive took none of their rows.
        assert len(rows["transition"]) == 1 + 2 * rounds
        assert len(rows["task"]) == rounds  # to-pong's script task, each round
    assert archive_verify(archive=FolderArchive(tmp_path)).ok
