"""What a start, a middle hop and the hop into a final state cost on PostgreSQL, in statements:
a later change cannot add a round trip without changing these figures on purpose.

A start is one statement (the instance, its start history row and its first data version in one
CTE; the published version from the in-process registry), an async start too (with its job); a
hop is its read and one statement, the timers it arms included, and so is the final hop with
its pending timers, resource locks and data version. What that statement folds in still
happens: the timers are armed or cancelled, the locks released, the data versioned.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from instances.job_table import Job
from instances.models import Instance, InstanceDataVersion, InstanceTransition
from instances.queue import job_enqueue, jobs_pending_list
from instances.registry import COMPONENTS
from instances.services import RequestInfo, instance_start, instance_transition
from instances.status import InstanceStatus, JobKind
from locks.models import ResourceLock
from tests.engine.builders import script, state, transition, workflow
from workflows.services import component_publish

pytestmark = pytest.mark.django_db(transaction=True)

INFO = RequestInfo(actor="clerk")
ORDER = "shape-order"


def order_document(version: str = "1.0.0") -> dict[str, Any]:
    """draft -submit-> submitted -approve-> approved (Final), each step writing its attributes;
    `submitted` expires after a day (a timer armed by the hop entering it)."""
    a_day = script("def handler(context):\n    return 'P1D'\n")
    document = workflow(
        [
            state("draft", 1, [transition("submit", "submitted")]),
            state(
                "submitted",
                2,
                [
                    transition("approve", "approved"),
                    transition("expire", "expired", 2, timer=a_day),
                ],
            ),
            state("approved", 3, subType=1),
            state("expired", 3, subType=8),
        ],
        key=ORDER,
    )
    document["version"] = version
    return document


@pytest.fixture(autouse=True)
def published(db: None) -> None:
    component_publish(document=order_document())
    instance_start(domain="core", workflow=ORDER, body={"attributes": {}}, info=INFO)  # warm


def _statements(run: Any) -> tuple[Any, list[str]]:
    with CaptureQueriesContext(connection) as captured:
        result = run()
    return result, [query["sql"] for query in captured.captured_queries]


def _start(key: str | None = None, **attributes: Any) -> Any:
    body: dict[str, Any] = {"attributes": attributes} | ({"key": key} if key else {})
    return instance_start(domain="core", workflow=ORDER, body=body, info=INFO).instance


def _step(instance_id: Any, key: str, **attributes: Any) -> Any:
    return instance_transition(
        domain="core",
        workflow=ORDER,
        ref=str(instance_id),
        transition_key=key,
        body={"attributes": attributes},
        info=INFO,
    ).instance


def test_a_start_is_one_statement_with_its_history_row_and_data_version():
    instance, statements = _statements(lambda: _start(customer="ada"))

    assert len(statements) == 1, statements
    assert statements[0].startswith("WITH updated AS (INSERT INTO instances_instance")
    row = Instance.objects.get(pk=instance.id)
    assert (row.status, row.current_state, row.data) == ("A", "draft", {"customer": "ada"})
    assert (instance.created_at, instance.updated_at) == (row.created_at, row.updated_at)
    assert list(
        InstanceTransition.objects.filter(instance_id=row.pk).values_list(
            "transition_key", "status"
        )
    ) == [("start", "completed")]
    assert list(
        InstanceDataVersion.objects.filter(instance_id=row.pk).values_list("version", "data")
    ) == [("1.0.0", {"customer": "ada"})]


def test_an_async_start_is_one_statement_with_the_job_that_runs_it():
    outcome, statements = _statements(
        lambda: instance_start(
            domain="core", workflow=ORDER, body={"attributes": {}}, info=INFO, sync=False
        )
    )

    assert len(statements) == 1, statements
    assert statements[0].startswith("WITH reserved AS (INSERT INTO instances_instance")
    row = Instance.objects.get(pk=outcome.instance.id)
    assert (row.status, row.busy_owner) == (InstanceStatus.BUSY, outcome.instance.busy_owner)
    job = Job.objects.get(instance_id=row.pk)
    assert (job.kind, job.status) == (JobKind.TRANSITION, "pending")
    assert job.payload["reservation"] == row.busy_owner


def test_a_start_with_a_business_key_adds_only_the_check_for_the_live_one():
    first, statements = _statements(lambda: _start(key="order-7"))
    again, second = _statements(lambda: _start(key="order-7"))

    assert len(statements) == 2, statements  # the live-key check, then the start
    assert len(second) == 1, second  # the live instance is the answer: nothing runs
    assert again.id == first.id
    assert Instance.objects.filter(key="order-7").count() == 1


def test_a_middle_hop_arming_a_timer_is_its_read_and_one_statement():
    instance = _start()
    before = timezone.now()

    moved, statements = _statements(lambda: _step(instance.id, "submit", amount=120))

    assert len(statements) == 2, statements
    assert statements[0].startswith("SELECT")
    assert statements[1].startswith("WITH updated AS (UPDATE instances_instance")
    assert (moved.current_state, moved.data) == ("submitted", {"amount": 120})
    assert moved.updated_at == Instance.objects.get(pk=instance.id).updated_at > before
    timer = Job.objects.get(instance_id=instance.id, kind=JobKind.TIMER, status="pending")
    assert timer.state == "submitted"
    assert timer.payload["transition"] == "expire"
    assert before + timedelta(days=1) <= timer.run_at <= timezone.now() + timedelta(days=1)


def test_the_final_hop_is_one_statement_that_cancels_timers_and_releases_locks():
    instance = _start()
    _step(instance.id, "submit", amount=120)
    timer = Job.objects.get(instance_id=instance.id, kind=JobKind.TIMER, status="pending")
    timeout = job_enqueue(
        kind=JobKind.TIMEOUT,
        instance_id=instance.id,
        payload={"transition": "abandon"},
        run_at=timezone.now() + timedelta(days=30),
    )
    ResourceLock.objects.create(
        key="order:7", owner=instance.id, expires_at=timezone.now() + timedelta(minutes=5)
    )
    ResourceLock.objects.create(
        key="other", owner=_start().id, expires_at=timezone.now() + timedelta(minutes=5)
    )

    done, statements = _statements(lambda: _step(instance.id, "approve", decision="ok"))

    assert len(statements) == 2, statements
    assert (done.status, done.current_state) == (InstanceStatus.COMPLETED, "approved")
    assert Instance.objects.get(pk=instance.id).completed_at is not None
    assert jobs_pending_list(instance_id=instance.id) == []
    cancelled = Job.objects.filter(pk__in=[timer.pk, timeout.pk], status="cancelled")
    assert cancelled.count() == 2
    assert list(ResourceLock.objects.values_list("key", flat=True)) == ["other"]
    assert Instance.objects.get(pk=instance.id).data == {"amount": 120, "decision": "ok"}


def test_a_start_on_a_version_superseded_elsewhere_runs_again_on_the_newest():
    component_publish(document=order_document("1.1.0"))
    # What another process still holds: the version it looked up before the publish.
    COMPONENTS._newest[("core", ORDER)] = ("1.0.0", time.monotonic())

    instance, statements = _statements(lambda: _start(customer="ada"))

    assert instance.workflow_version == "1.1.0"
    assert Instance.objects.get(pk=instance.id).workflow_version == "1.1.0"
    assert Instance.objects.filter(workflow_version="1.0.0", data={"customer": "ada"}).count() == 0
    # The refused INSERT, why it was refused, the newest version and its document, the start.
    assert len(statements) == 5, statements


def test_a_start_naming_its_version_is_not_refused_by_a_newer_one():
    component_publish(document=order_document("1.1.0"))

    instance = instance_start(
        domain="core", workflow=ORDER, body={"attributes": {}}, info=INFO, version="1.0.0"
    ).instance

    assert Instance.objects.get(pk=instance.id).workflow_version == "1.0.0"
