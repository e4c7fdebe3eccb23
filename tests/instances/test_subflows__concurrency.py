"""Subflows under real concurrency (PostgreSQL, real threads): async transitions to a root with
an open 3-level chain reserve the leaf before their 202, exactly one reaches it; an async start
builds the whole chain in its job; nothing is left Busy but the ancestors' correlations."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from instances.job_handlers import jobs_run_due
from instances.job_table import Job
from instances.models import Correlation, Instance
from tests.instances.scenario_api import WorkflowApi, import_examples

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.concurrency,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def root(operator_client: APIClient) -> WorkflowApi:
    import_examples()
    return WorkflowApi(operator_client, "chain-busy-root")


def chain_of(root_id: str) -> list[Instance]:
    rows = [Instance.objects.get(pk=root_id)]
    while True:
        child = Instance.objects.filter(parent_correlation__parent=rows[-1]).first()
        if child is None:
            return rows
        rows.append(child)


def test_an_async_start_builds_the_chain_in_its_job(root):
    response = root.start(sync=False)
    assert response.status_code == 202
    root_id = response.json()["id"]
    assert Instance.objects.get(pk=root_id).status == "B"
    jobs_run_due()
    top, middle, leaf = chain_of(root_id)
    assert [(r.current_state, r.status) for r in (top, middle, leaf)] == [
        ("root-waiting", "B"),
        ("middle-waiting", "B"),
        ("leaf-waiting", "A"),
    ]
    assert top.busy_owner == f"subflow:{middle.pk}"
    assert middle.busy_owner == f"subflow:{leaf.pk}"


def test_twenty_async_transitions_to_the_root_one_reaches_the_leaf(root, operator):
    root_id = root.started()
    top, middle, leaf = chain_of(root_id)
    url = root.url(root_id, "transitions", "leaf-only-mark")
    barrier = threading.Barrier(20)
    results: list[Any] = [None] * 20

    def fire(index: int) -> None:
        client = APIClient()
        client.force_authenticate(operator)
        try:
            barrier.wait(timeout=30)
            response = client.patch(url, {}, format="json")
            results[index] = (response.status_code, response.json().get("errorCode"))
        except BaseException as exc:  # reported by the assertions below
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=fire, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert Counter(results) == {(202, None): 1, (409, "Instance:100031"): 19}
    # Before the job ran, the leaf was reserved for it: Busy, owned by the accept's claim.
    reserved = Instance.objects.get(pk=leaf.pk)
    assert reserved.status == "B"
    assert reserved.busy_owner.startswith("res:")
    (job,) = Job.objects.filter(instance_id=leaf.pk, kind="transition", status="pending")
    assert job.payload["chainReserved"] == root_id
    assert job.payload["reservation"] == reserved.busy_owner

    jobs_run_due()

    top, middle, leaf = [Instance.objects.get(pk=row.pk) for row in (top, middle, leaf)]
    assert leaf.data["leafOnlyMarks"] == 1
    assert (leaf.status, leaf.busy_owner) == ("A", "")
    assert (top.busy_owner, middle.busy_owner) == (f"subflow:{middle.pk}", f"subflow:{leaf.pk}")
    assert Correlation.objects.filter(status="active").count() == 2
    assert not Job.objects.filter(status__in=["pending", "running"], kind="transition").exists()


def test_a_sync_forward_to_a_leaf_busy_for_its_own_reasons_is_409(root):
    root_id = root.started()
    _, _, leaf = chain_of(root_id)
    Instance.objects.filter(pk=leaf.pk).update(status="B", busy_owner="someone-else")
    response = root.fire(root_id, "leaf-only-mark")
    assert (response.status_code, response.json()["errorCode"]) == (409, "Instance:100031")
    response = root.fire(root_id, "leaf-only-mark", sync=False)
    assert (response.status_code, response.json()["errorCode"]) == (409, "Instance:100031")
    assert Instance.objects.get(pk=leaf.pk).busy_owner == "someone-else"
    assert not Job.objects.filter(instance_id=leaf.pk, kind="transition", status="pending").exists()
