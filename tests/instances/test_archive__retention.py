"""Retention and archive: only completed instances past their retention leave; each batch is
written to verified gzip JSON Lines files with manifests, then deleted with a tombstone; the API
answers 410 for an archived instance; `instances_restore` puts back exactly the rows it had."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from instances.archive import (
    FolderArchive,
    archive_verify,
    instance_restore,
    instances_archive,
    manifest_of,
)
from instances.job_table import Job
from instances.models import ArchivedInstance, Correlation, Instance
from tests.conftest import DictResolver
from tests.instances.archiving import BASE, FLOW, completed, publish_retained, rows_of
from workflows.validation import validate_component

pytestmark = pytest.mark.postgres


@pytest.fixture
def store(tmp_path):
    return FolderArchive(tmp_path / "archive")


@pytest.fixture
def flow(db):
    publish_retained()


def test_only_completed_instances_past_their_retention_are_archived(
    operator_client, flow, store, settings
):
    old = completed(operator_client, days_ago=45)
    recent = completed(operator_client, days_ago=29)
    waiting_job = completed(operator_client, days_ago=45)
    Job.objects.create(kind="timer", instance=waiting_job, status="pending")
    live = []
    for status in ("A", "B", "F", "P"):
        instance = completed(operator_client, days_ago=400)
        Instance.objects.filter(pk=instance.pk).update(status=status)
        live.append(instance.pk)
    publish_retained("kept-forever", days=None)
    forever = completed(operator_client, days_ago=4000, flow="kept-forever")

    report = instances_archive(archive=store)

    assert (report.archived, dict(report.by_workflow)) == (1, {f"core/{FLOW}": 1})
    assert not Instance.objects.filter(pk=old.pk).exists()
    assert set(Instance.objects.values_list("pk", flat=True)) == {
        recent.pk,
        waiting_job.pk,
        forever.pk,
        *live,
    }
    # VNEXT_RETENTION_DAYS is the default of a workflow that sets none.
    settings.VNEXT = {**getattr(settings, "VNEXT", {}), "RETENTION_DAYS": 3650}
    assert instances_archive(archive=store).by_workflow == {"core/kept-forever": 1}


def test_archive_writes_files_that_verify_then_deletes_every_row(operator_client, flow, store):
    first = completed(operator_client, days_ago=40)
    second = completed(operator_client, days_ago=50)
    before = {instance.pk: rows_of(instance.pk) for instance in (first, second)}

    report = instances_archive(archive=store, batch_size=10)

    assert report.archived == 2
    assert not report.errors
    assert len(report.files) == 2  # one per completion day
    for instance in (first, second):
        tombstone = ArchivedInstance.objects.get(pk=instance.pk)
        manifest = json.loads(store.read(manifest_of(tombstone.location)))
        expected = {table: len(rows) for table, rows in before[instance.pk].items() if rows}
        assert manifest["rows"] == expected
        assert expected["transition"] == 3
        assert expected["data_version"] >= 1
        assert expected["task"] == 1
        assert expected["incident"] == 1
        assert tombstone.completed_at is not None
        assert manifest["day"] == tombstone.completed_at.astimezone(UTC).date().isoformat()
        assert all(not rows for rows in rows_of(instance.pk).values())
    assert archive_verify(archive=store).ok
    call_command("instances_archive", "--verify", "--archive-dir", str(store.root))

    # One flipped byte: the digest no longer matches.
    broken = store.root / report.files[0]
    content = bytearray(broken.read_bytes())
    content[-1] ^= 0xFF
    broken.write_bytes(bytes(content))
    problems = archive_verify(archive=store).problems
    assert list(problems) == [report.files[0]]
    assert "sha256" in problems[report.files[0]][0]
    with pytest.raises(CommandError):
        call_command("instances_archive", "--verify", "--archive-dir", str(store.root))


def test_restore_puts_back_exactly_the_rows_the_instance_had(operator_client, flow, store):
    instance = completed(operator_client, days_ago=40, key="order-9")
    before = rows_of(instance.pk)
    instances_archive(archive=store)
    lines = list(gzip.decompress(store.read(report_file(instance.pk))).splitlines())
    assert len(lines) == sum(len(rows) for rows in before.values())

    call_command(
        "instances_restore", str(instance.pk), "--archive-dir", str(store.root), "--operator", "ops"
    )

    after = rows_of(instance.pk)
    audit = after["operator_action"].pop()
    assert (audit["actor"], audit["action"], audit["outcome"]) == ("ops", "restore", "restored")
    assert after == before
    assert not ArchivedInstance.objects.filter(pk=instance.pk).exists()
    assert operator_client.get(f"{BASE}/order-9").json()["id"] == str(instance.pk)
    with pytest.raises(CommandError):  # not archived any more
        call_command("instances_restore", str(instance.pk), "--archive-dir", str(store.root))


def report_file(instance_id):
    return ArchivedInstance.objects.get(pk=instance_id).location


def test_an_archived_instance_answers_410_saying_where_it_went(operator_client, flow, store):
    instance = completed(operator_client, days_ago=40, key="order-1")
    instances_archive(archive=store)
    tombstone = ArchivedInstance.objects.get(pk=instance.pk)

    for ref in (str(instance.pk), "order-1"):
        for path in ("", "/transitions", "/functions/state"):
            response = operator_client.get(f"{BASE}/{ref}{path}")
            assert response.status_code == 410, (ref, path)
            body = response.json()
            assert body["errorCode"] == "Instance:Archived"
            assert body["instanceId"] == str(instance.pk)
            assert body["error"]["archive"]["location"] == tombstone.location
            assert "instances_restore" in body["detail"]
    response = operator_client.patch(f"{BASE}/{instance.pk}/transitions/to-ping", {}, "json")
    assert response.status_code == 410
    unknown = operator_client.get(f"{BASE}/00000000-0000-0000-0000-000000000000")
    assert unknown.status_code == 404


def test_dry_run_limit_and_workflow_choose_without_changing_anything(
    operator_client, flow, store, capsys
):
    for days in (40, 41, 42):
        completed(operator_client, days_ago=days)

    call_command("instances_archive", "--dry-run", "--archive-dir", str(store.root))
    assert "3 instance(s) selected; nothing changed (--dry-run)" in capsys.readouterr().out
    assert Instance.objects.count() == 3
    assert not list(store.data_files())

    call_command(
        "instances_archive", "--limit", "2", "--workflow", FLOW, "--archive-dir", str(store.root)
    )
    assert "2 instance(s) archived" in capsys.readouterr().out
    call_command("instances_archive", "--workflow", "other", "--archive-dir", str(store.root))
    assert Instance.objects.count() == 1
    # --older-than-days overrides every retention: the newest one (40 days) stays at 41.
    call_command("instances_archive", "--older-than-days", "41", "--archive-dir", str(store.root))
    assert Instance.objects.count() == 1


def test_retention_days_is_validated_at_its_pointer():
    from tests.instances.workflows import ping_pong

    document = ping_pong("v")
    document["attributes"]["retentionDays"] = 30
    assert not validate_component(document, DictResolver([]))
    for bad in (0, -1, "30", 1.5, True, 100_000):
        document["attributes"]["retentionDays"] = bad
        violations = validate_component(document, DictResolver([]))
        assert [v.pointer for v in violations] == ["/attributes/retentionDays"], bad


def test_a_recently_completed_instance_is_never_archived_even_with_the_shortest_retention(
    operator_client, db, store
):
    publish_retained(days=1)
    instance = completed(operator_client, days_ago=0.9)
    assert instances_archive(archive=store).archived == 0
    Instance.objects.filter(pk=instance.pk).update(
        completed_at=timezone.now() - timedelta(days=1, minutes=1)
    )
    assert instances_archive(archive=store).archived == 1


def test_a_parent_is_archived_only_once_its_children_completed_and_restored_relinked(
    operator_client, flow, store
):
    parent = completed(operator_client, days_ago=40)
    child = completed(operator_client, days_ago=1)
    correlation = Correlation.objects.create(
        parent=parent, parent_state="pong", child=child, type="P", status="completed"
    )
    Instance.objects.filter(pk=child.pk).update(parent_correlation=correlation, status="A")

    assert instances_archive(archive=store).archived == 0  # its child is still live

    Instance.objects.filter(pk=child.pk).update(status="C")
    assert instances_archive(archive=store).archived == 1
    assert Instance.objects.get(pk=child.pk).parent_correlation_id is None

    instance_restore(instance_id=parent.pk, archive=store)
    assert Correlation.objects.get(pk=correlation.pk).child_id == child.pk
    assert Instance.objects.get(pk=child.pk).parent_correlation_id == correlation.pk
