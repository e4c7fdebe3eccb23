"""Publishing stores a component once, immutably; same content again is a no-op; other content
under a published version is a 409; concurrent publishers agree on one row."""

from __future__ import annotations

import copy
import threading
from pathlib import Path

import pytest
from django.db import connection

from instances.engine.errors import Codes, VNextError
from tests.conftest import EXAMPLES_DIR
from workflows.loader import load_file
from workflows.models import Component
from workflows.selectors import component_get, component_list
from workflows.services import component_publish, content_hash

pytestmark = pytest.mark.django_db


@pytest.fixture
def schema_doc(corpus_doc):
    return corpus_doc("Schemas/payload-modes/payload-modes-input.json")


@pytest.fixture
def payload_modes_doc(corpus_doc):
    return corpus_doc("Workflows/payload-modes/payload-modes.json")


def test_publish_stores_the_document_with_its_version_parts(schema_doc):
    result = component_publish(document=schema_doc, published_by="alice")
    assert result.status == "published"
    row = Component.objects.get()
    assert (row.kind, row.domain, row.key, row.version) == (
        "schema",
        "core",
        "payload-modes-input",
        "1.0.0",
    )
    assert (row.version_major, row.version_minor, row.version_patch) == (1, 0, 0)
    assert row.version_is_release is True
    assert row.document == schema_doc
    assert row.content_hash == content_hash(schema_doc)
    assert row.published_by == "alice"


def test_same_content_again_is_a_no_op_even_with_other_key_order(schema_doc):
    component_publish(document=schema_doc)
    reordered = dict(reversed(list(schema_doc.items())))
    result = component_publish(document=reordered)
    assert result.status == "unchanged"
    assert Component.objects.count() == 1


def test_other_content_under_a_published_version_is_a_conflict(schema_doc):
    component_publish(document=schema_doc)
    changed = copy.deepcopy(schema_doc)
    changed["tags"] = [*changed["tags"], "changed"]
    with pytest.raises(VNextError) as caught:
        component_publish(document=changed)
    assert caught.value.error == Codes.PUBLISH_CONFLICT
    assert caught.value.http_status == 409
    assert Component.objects.get().document == schema_doc


def test_published_rows_are_immutable(schema_doc):
    row = component_publish(document=schema_doc).component
    row.key = "renamed"
    with pytest.raises(ValueError, match="immutable"):
        row.save()


def test_a_workflow_needs_its_references_published_first(schema_doc, payload_modes_doc):
    with pytest.raises(VNextError) as caught:
        component_publish(document=payload_modes_doc)
    assert caught.value.error == Codes.APP_INVALID_DEFINITION
    assert {v.pointer for v in caught.value.violations} == {
        "/attributes/startTransition/schema",
        "/attributes/states/0/transitions/0/schema",
    }
    component_publish(document=schema_doc)
    assert component_publish(document=payload_modes_doc).status == "published"


def test_newest_version_is_the_default_and_prereleases_sort_first(schema_doc):
    for version in ["1.0.0", "1.10.0", "1.2.0", "2.0.0-beta.1"]:
        component_publish(document={**copy.deepcopy(schema_doc), "version": version})
    newest = component_get(kind="schema", domain="core", key="payload-modes-input")
    assert newest.version == "2.0.0-beta.1"
    component_publish(document={**copy.deepcopy(schema_doc), "version": "2.0.0"})
    assert component_get(kind="schema", domain="core", key="payload-modes-input").version == "2.0.0"
    versions = [c.version for c in component_list(kind="schema", domain="core")]
    assert versions == ["2.0.0", "2.0.0-beta.1", "1.10.0", "1.2.0", "1.0.0"]


def test_missing_component_is_a_404_error():
    with pytest.raises(VNextError) as caught:
        component_get(kind="workflow", domain="core", key="ghost")
    assert caught.value.http_status == 404


def test_examples_publish(db):
    # Tasks and schemas first (a fan-out task after the inner task it names), then functions (after
    # the tasks they run), then workflows by path (a subflow's child sorts before it).
    def order(path: Path) -> tuple[bool, bool, bool, str]:
        clones = '"type": "21"' in path.read_text()
        return "Workflows" in str(path), "/Functions/" in str(path), clones, str(path)

    paths = sorted(EXAMPLES_DIR.rglob("*.json"), key=order)
    for path in paths:
        assert component_publish(document=load_file(path).document).status == "published"
    workflows = [p for p in paths if "/Workflows/" in str(p)]
    assert Component.objects.filter(kind="workflow").count() == len(workflows) >= 6


@pytest.mark.postgres
@pytest.mark.concurrency
@pytest.mark.django_db(transaction=True)
def test_concurrent_publishers_of_one_version_agree_on_one_row(schema_doc):
    workers = 12
    barrier = threading.Barrier(workers)
    statuses: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def publish() -> None:
        try:
            barrier.wait(timeout=10)
            status = component_publish(document=copy.deepcopy(schema_doc)).status
            with lock:
                statuses.append(status)
        except BaseException as exc:  # collected and asserted below
            with lock:
                errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=publish) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert sorted(statuses) == ["published"] + ["unchanged"] * (workers - 1)
    assert Component.objects.count() == 1


@pytest.mark.postgres
@pytest.mark.concurrency
@pytest.mark.django_db(transaction=True)
def test_concurrent_publishers_of_different_content_one_wins_the_rest_conflict(schema_doc):
    workers = 8
    barrier = threading.Barrier(workers)
    outcomes: list[str] = []
    lock = threading.Lock()

    def publish(index: int) -> None:
        document = copy.deepcopy(schema_doc)
        document["tags"] = [*document["tags"], f"variant-{index}"]
        try:
            barrier.wait(timeout=10)
            outcome = component_publish(document=document).status
        except VNextError as exc:
            outcome = exc.code
        finally:
            connection.close()
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=publish, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes) == ["Instance:100002"] * (workers - 1) + ["published"]
    assert Component.objects.count() == 1
