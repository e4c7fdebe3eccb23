"""Admission under real concurrency (PostgreSQL, real threads): one winner, the rest 409
`Instance:100031`, one history row, nothing stranded Busy; parallel updateData loses nothing."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from instances.engine.task_types import EXECUTORS
from instances.models import Instance, InstanceTransition
from tests.engine.builders import transition
from tests.instances.http_server import http_server
from tests.instances.workflows import http_ref, http_task, ping_pong, publish

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.concurrency,
    pytest.mark.django_db(transaction=True),
]
BASE = "/api/v1/core/workflows/{}/instances"


def race(workers: int, action: Callable[[APIClient, int], Any], operator: Any) -> list[Any]:
    barrier = threading.Barrier(workers)
    results: list[Any] = [None] * workers

    def run(index: int) -> None:
        client = APIClient()
        client.force_authenticate(operator)
        try:
            barrier.wait(timeout=30)
            results[index] = action(client, index)
        except BaseException as exc:  # reported by the assertions below
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    return results


def start(operator_client: APIClient, workflow: str) -> str:
    response = operator_client.post(f"{BASE.format(workflow)}/start?sync=true", {}, format="json")
    assert response.status_code == 200, response.json()
    return response.json()["id"]


def test_fifty_threads_one_transition_exactly_one_wins(operator, operator_client):
    # The winner's pipeline calls a slow endpoint while it holds Busy, so every other request
    # overlaps it: that is the race admission exists for.
    with http_server() as base_url:
        slow = http_task("slow-call", f"{base_url}/slow?ms=2500")
        document = ping_pong()
        document["attributes"]["states"][0]["transitions"][0]["onExecutionTasks"] = [
            http_ref("slow-call")
        ]
        publish(slow, document)
        instance_id = start(operator_client, "ping-pong")
        url = f"{BASE.format('ping-pong')}/{instance_id}/transitions/to-pong?sync=true"

        def fire(client: APIClient, _index: int) -> tuple[int, str | None]:
            response = client.patch(url, {}, format="json")
            return response.status_code, response.json().get("errorCode")

        results = race(50, fire, operator)
    assert Counter(results) == {(200, None): 1, (409, "Instance:100031"): 49}
    assert InstanceTransition.objects.filter(transition_key="to-pong").count() == 1
    row = Instance.objects.get(pk=instance_id)
    assert (row.status, row.current_state, row.busy_owner, row.busy_since) == (
        "A",
        "pong",
        "",
        None,
    )


@pytest.mark.parametrize(
    "task",
    [None, "script", "http"],
    ids=["no-task", "script-task-one-commit", "http-task-busy-cas"],
)
def test_fast_transitions_race_one_winner_and_no_duplicate(operator, operator_client, task):
    # Without a slow step a request may arrive after the winner committed: it then finds the
    # instance in `pong`, where to-pong is not available (400), never a second success.
    with http_server() as base_url:
        document = ping_pong(with_task=task == "script")
        if task == "http":
            document["attributes"]["states"][0]["transitions"][0]["onExecutionTasks"] = [
                http_ref("ok-call")
            ]
            publish(http_task("ok-call", f"{base_url}/ok"), document)
        else:
            publish(document)
        instance_id = start(operator_client, "ping-pong")
        url = f"{BASE.format('ping-pong')}/{instance_id}/transitions/to-pong?sync=true"

        def fire(client: APIClient, _index: int) -> tuple[int, str | None]:
            response = client.patch(url, {}, format="json")
            return response.status_code, response.json().get("errorCode")

        results = Counter(race(50, fire, operator))
    assert results[(200, None)] == 1
    assert results[(409, "Instance:100031")] + results[(400, "Transition:100020")] == 49
    assert InstanceTransition.objects.filter(transition_key="to-pong").count() == 1
    row = Instance.objects.get(pk=instance_id)
    assert (row.status, row.current_state, row.busy_owner) == ("A", "pong", "")
    if task == "script":
        assert row.data == {"ponged": True}


def test_a_script_task_runs_without_busy_and_loses_to_a_change_committed_meanwhile(
    operator, operator_client, monkeypatch
):
    # Script tasks touch nothing outside the worker, so their hop commits once, guarded by the
    # state it loaded: while one runs, the instance stays Active and another transition may
    # win; the script's run then commits nothing and answers 409.
    document = ping_pong(with_task=True)
    document["attributes"]["states"][0]["transitions"].append(transition("skip-to-pong", "pong"))
    publish(document)
    instance_id = start(operator_client, "ping-pong")
    url = f"{BASE.format('ping-pong')}/{instance_id}/transitions"
    entered, release = threading.Event(), threading.Event()
    run_script = EXECUTORS["7"]

    def gated(call: Any) -> Any:
        entered.set()
        assert release.wait(30)
        return run_script(call)

    monkeypatch.setitem(EXECUTORS, "7", gated)
    answers: list[tuple[int, str | None]] = []

    def script_transition() -> None:
        client = APIClient()
        client.force_authenticate(operator)
        try:
            response = client.patch(f"{url}/to-pong?sync=true", {}, format="json")
            answers.append((response.status_code, response.json().get("errorCode")))
        finally:
            connection.close()

    runner = threading.Thread(target=script_transition)
    runner.start()
    try:
        assert entered.wait(30)
        seen = Instance.objects.get(pk=instance_id)
        assert (seen.status, seen.busy_owner, seen.current_state) == ("A", "", "ping")
        assert not InstanceTransition.objects.filter(transition_key="to-pong").exists()
        skipped = operator_client.patch(f"{url}/skip-to-pong?sync=true", {}, format="json")
        assert skipped.status_code == 200, skipped.json()
    finally:
        release.set()
        runner.join(timeout=60)
    assert answers == [(409, "Instance:100031")]
    row = Instance.objects.get(pk=instance_id)
    assert (row.status, row.current_state, row.busy_owner, row.data) == ("A", "pong", "", {})
    keys = list(
        InstanceTransition.objects.filter(instance_id=instance_id).values_list(
            "transition_key", flat=True
        )
    )
    assert "to-pong" not in keys
    assert keys.count("skip-to-pong") == 1


def test_twenty_parallel_update_data_calls_all_apply(operator, operator_client):
    publish(ping_pong())
    instance_id = start(operator_client, "ping-pong")
    url = f"{BASE.format('ping-pong')}/{instance_id}/transitions/update-data?sync=true"

    def update(client: APIClient, index: int) -> int:
        payload = {"attributes": {f"field{index}": index, "nested": {f"n{index}": index}}}
        return client.patch(url, payload, format="json").status_code

    assert race(20, update, operator) == [200] * 20
    row = Instance.objects.get(pk=instance_id)
    assert row.data == {
        **{f"field{i}": i for i in range(20)},
        "nested": {f"n{i}": i for i in range(20)},
    }
    assert (row.status, row.current_state) == ("A", "ping")
    assert row.data_version == "1.0.20"  # versionStrategy Patch, once per update
    assert InstanceTransition.objects.filter(transition_key="update-data").count() == 20


def test_update_data_is_accepted_while_a_transition_holds_busy(operator, operator_client):
    publish(ping_pong())
    instance_id = start(operator_client, "ping-pong")
    Instance.objects.filter(pk=instance_id).update(status="B", busy_owner="someone-else")
    url = f"{BASE.format('ping-pong')}/{instance_id}/transitions"
    blocked = operator_client.patch(f"{url}/to-pong?sync=true", {}, format="json")
    assert (blocked.status_code, blocked.json()["errorCode"]) == (409, "Instance:100031")
    accepted = operator_client.patch(f"{url}/update-data?sync=true", {"a": 1}, format="json")
    assert accepted.status_code == 200
    row = Instance.objects.get(pk=instance_id)
    assert (row.status, row.busy_owner, row.data) == ("B", "someone-else", {"a": 1})


def test_cancel_is_exempt_from_409_and_takes_busy_over(operator, operator_client):
    publish(ping_pong())
    instance_id = start(operator_client, "ping-pong")
    Instance.objects.filter(pk=instance_id).update(status="B", busy_owner="stuck-owner")
    response = operator_client.patch(
        f"{BASE.format('ping-pong')}/{instance_id}/transitions/cancel?sync=true", {}, format="json"
    )
    assert response.status_code == 200
    row = Instance.objects.get(pk=instance_id)
    assert (row.status, row.current_state, row.effective_state_subtype) == (
        "C",
        "cancelled",
        "cancelled",
    )
    assert row.busy_owner == ""
