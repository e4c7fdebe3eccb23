"""Claim races on real PostgreSQL: 25 open human tasks, each claimed at the same moment by two
users (50 threads, each with its own database connection, closed at the end): every task ends
with exactly one winner, the other user gets 409 `HumanTask:AlreadyClaimed`, and one
`human-task:claim` history row is written per task."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from rest_framework.test import APIClient

from instances.human_task_table import HumanTask
from instances.models import InstanceTransition
from tests.conftest import OperatorFactory, UserFactory
from tests.instances.scenario_api import WorkflowApi
from tests.instances.test_human_tasks__api import INBOX, in_review, publish
from workflows.models import WorkflowGrant

pytestmark = pytest.mark.django_db(transaction=True)
TASKS = 25


def test_two_users_racing_for_each_task_leave_one_winner_each():
    if connection.vendor != "postgresql":
        pytest.skip("the race needs PostgreSQL's concurrent writers")
    publish()
    operator = APIClient()
    admin: Any = OperatorFactory()
    operator.force_authenticate(admin)
    loan = WorkflowApi(operator, "loan")
    refs = [in_review(loan) for _ in range(TASKS)]
    tasks = {str(t.pk): str(t.instance_id) for t in HumanTask.objects.filter(instance_id__in=refs)}
    assert len(tasks) == TASKS
    group = Group.objects.create(name="approvers")
    # Claiming needs the drive grant that completing needs.
    WorkflowGrant.objects.create(group=group, domain="core", workflow="", drive_instances=True)
    users: list[Any] = [UserFactory(username=name) for name in ("alice", "bob")]
    for user in users:
        user.groups.add(group)

    barrier = threading.Barrier(2 * TASKS)
    results: list[tuple[str, str, int, str | None]] = []
    lock = threading.Lock()

    def claim(task_id: str, user: Any) -> None:
        try:
            client = APIClient()
            client.force_authenticate(user)
            barrier.wait(timeout=30)
            response = client.post(f"{INBOX}/{task_id}/claim")
            code = response.json().get("errorCode") if response.status_code != 200 else None
            with lock:
                results.append((task_id, user.username, response.status_code, code))
        finally:
            connection.close()

    threads = [
        threading.Thread(target=claim, args=(task_id, user)) for task_id in tasks for user in users
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert len(results) == 2 * TASKS
    for task_id in tasks:
        answers = sorted((status, code) for t, _, status, code in results if t == task_id)
        assert answers == [(200, None), (409, "HumanTask:AlreadyClaimed")], task_id
        winner = next(name for t, name, status, _ in results if t == task_id and status == 200)
        row = HumanTask.objects.get(pk=task_id)
        assert (row.status, row.claimed_by) == ("claimed", winner)
        claims = InstanceTransition.objects.filter(
            instance_id=tasks[task_id], transition_key="human-task:claim"
        )
        assert list(claims.values_list("actor", flat=True)) == [winner]
