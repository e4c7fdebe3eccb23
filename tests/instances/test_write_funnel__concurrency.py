"""The instance-data write funnel under real concurrency (PostgreSQL, real threads): every write
that reads the instance data and writes it back — updateData mappings, transition mappings,
task outputs, timers, children's updates of their parent — reads what the previous write
committed; updateData calls apply one after another in acceptance (ticket) order, sync and async
alike; nothing the API accepted is lost."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from typing import Any

import psycopg
import pytest
from django.db import connection
from rest_framework.test import APIClient

from instances.job_handlers import job_run, jobs_run_due
from instances.job_table import Job
from instances.lane_lock import lane_lock_key
from instances.models import Instance, InstanceDataVersion, InstanceTransition
from tests.engine.builders import script, state, task_ref, transition, workflow
from tests.instances.http_server import http_server
from tests.instances.test_admission__concurrency import race
from tests.instances.workflows import http_ref, http_task, publish

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.concurrency,
    pytest.mark.django_db(transaction=True),
]
BASE = "/api/v1/core/workflows/{}/instances"

# Read-modify-write at its plainest: the count from the data plus one, and the request's `seq`
# appended to the order the writes were applied in.
BUMP = (
    "def handler(context):\n"
    "    data = context.instance.data\n"
    "    seen = list(data.get('seen') or [])\n"
    "    seen.append(context.body.get('seq'))\n"
    "    return {'count': (data.get('count') or 0) + 1, 'seen': seen}\n"
)
BUMP_OUTPUT = "{'count': (context.instance.data.get('count') or 0) + 1}"
UPDATE_DATA = {
    "key": "update-data",
    "target": "$self",
    "triggerType": 0,
    "versionStrategy": "Patch",
    "labels": [{"label": "Update data", "language": "en"}],
    "mapping": script(BUMP),
}


def tally(base_url: str = "http://127.0.0.1:9") -> dict[str, Any]:
    """`open` takes bumps three ways (a pure mapping, a slow HTTP task then a bumping script
    task, a bumping output handler of a slow HTTP task); updateData bumps too."""
    publish(
        http_task("slow-call", f"{base_url}/slow?ms=400"),
    )
    slow_bump = http_ref(
        "slow-call",
        mapping=(
            "def input_handler(task, context):\n    return None\n\n"
            f"def output_handler(context):\n    return {BUMP_OUTPUT}\n"
        ),
    )
    return workflow(
        [
            state(
                "open",
                1,
                [
                    transition("bump", "open", mapping=script(BUMP)),
                    transition(
                        "bump-after-call",
                        "open",
                        onExecutionTasks=[http_ref("slow-call"), task_ref(BUMP_OUTPUT, order=2)],
                    ),
                    transition("bump-call", "open", onExecutionTasks=[slow_bump]),
                    transition("close", "closed"),
                ],
            ),
            state("closed", 3, subType=1),
        ],
        key="tally",
        updateData=UPDATE_DATA,
    )


def started(client: APIClient, workflow_key: str) -> str:
    response = client.post(f"{BASE.format(workflow_key)}/start?sync=true", {}, format="json")
    assert response.status_code == 200, response.json()
    return str(response.json()["id"])


def drain(instance_id: str, timeout: float = 60.0) -> None:
    """Run due jobs until none of the instance's is pending or running."""
    deadline = time.monotonic() + timeout
    live = Job.objects.filter(instance_id=instance_id, status__in=["pending", "running"])
    while live.exists():
        assert time.monotonic() < deadline, list(live.values("pk", "kind", "status"))
        if not jobs_run_due():
            time.sleep(0.05)


def counted(instance_id: str) -> dict[str, Any]:
    return dict(Instance.objects.get(pk=instance_id).data)


def test_fifty_concurrent_update_data_sync_and_async_apply_one_after_another_in_order(
    operator, operator_client
):
    publish(tally())
    instance_id = started(operator_client, "tally")
    url = f"{BASE.format('tally')}/{instance_id}/transitions/update-data"

    def update(client: APIClient, index: int) -> tuple[int, Any]:
        sync = index % 2 == 0
        response = client.patch(
            url + ("?sync=true" if sync else ""), {"attributes": {"seq": index}}, format="json"
        )
        return response.status_code, response.json()

    answers = race(50, update, operator)
    drain(instance_id)

    statuses = Counter(status for status, _ in answers)
    assert statuses == {200: 25, 202: 25}, answers
    data = counted(instance_id)
    assert data["count"] == 50
    assert sorted(data["seen"]) == list(range(50))
    for index, (status, body) in enumerate(answers):
        if status == 200:
            # A sync update answers with its own write, which read every write before it.
            seen = body["attributes"]["seen"]
            assert seen[-1] == index
            assert body["attributes"]["count"] == len(seen)
            assert data["seen"][: len(seen)] == seen
    # The async ones apply in ticket (acceptance) order.
    tickets = Job.objects.filter(instance_id=instance_id, kind="update-data").order_by("pk")
    assert set(tickets.values_list("status", flat=True)) == {"succeeded"}
    ticket_order = [job.payload["attributes"]["seq"] for job in tickets]
    assert sorted(ticket_order) == list(range(1, 50, 2))
    assert [seq for seq in data["seen"] if seq % 2] == ticket_order
    versions = list(
        InstanceDataVersion.objects.filter(instance_id=instance_id)
        .order_by("created_at", "id")
        .values_list("version", "data")
    )
    # The start wrote no data (no 1.0.0 row); each update one version, none skipped or twice,
    # each the data the writes before it left.
    assert [version for version, _ in versions] == [f"1.0.{n}" for n in range(1, 51)]
    assert [stored["count"] for _, stored in versions] == list(range(1, 51))
    assert [stored["seen"] for _, stored in versions] == [data["seen"][:n] for n in range(1, 51)]
    rows = InstanceTransition.objects.filter(instance_id=instance_id, transition_key="update-data")
    assert rows.count() == 50
    assert set(rows.values_list("status", flat=True)) == {"completed"}
    instance = Instance.objects.get(pk=instance_id)
    assert (instance.status, instance.current_state, instance.data_version) == (
        "A",
        "open",
        "1.0.50",
    )


def test_a_sync_update_behind_async_ones_no_worker_took_runs_them_first(operator_client):
    publish(tally())
    instance_id = started(operator_client, "tally")
    url = f"{BASE.format('tally')}/{instance_id}/transitions/update-data"
    for seq in range(3):
        accepted = operator_client.patch(url, {"attributes": {"seq": seq}}, format="json")
        assert accepted.status_code == 202
    answer = operator_client.patch(f"{url}?sync=true", {"attributes": {"seq": 3}}, format="json")
    assert answer.status_code == 200, answer.json()
    assert answer.json()["attributes"] == {"count": 4, "seen": [0, 1, 2, 3]}
    assert not Job.objects.filter(instance_id=instance_id, status="pending").exists()


def test_a_sync_update_that_waits_past_its_bound_is_left_to_the_workers(operator_client, settings):
    # Another holder keeps the instance's write lane (as a long update would): the sync update
    # waits its turn at most DATA_WRITE_WAIT_SECONDS, then answers 202 as an accepted ticket.
    settings.VNEXT = {**settings.VNEXT, "DATA_WRITE_WAIT_SECONDS": 0.3}
    publish(tally())
    instance_id = started(operator_client, "tally")
    url = f"{BASE.format('tally')}/{instance_id}/transitions/update-data"
    holder = psycopg.connect(libpq_test_url())
    try:
        holder.execute(
            "SELECT pg_advisory_xact_lock(7302, %s)", [lane_lock_key(uuid.UUID(instance_id))]
        )
        answer = operator_client.patch(
            f"{url}?sync=true", {"attributes": {"seq": 1}}, format="json"
        )
        assert answer.status_code == 202, answer.json()
        assert answer.json()["id"] == instance_id
        assert counted(instance_id) == {}
        queued = Job.objects.filter(instance_id=instance_id, kind="update-data")
        assert list(queued.values_list("status", flat=True)) == ["pending"]
    finally:
        holder.rollback()  # the lane is free again
        holder.close()
    drain(instance_id)
    assert counted(instance_id) == {"count": 1, "seen": [1]}


def libpq_test_url() -> str:
    settings = connection.settings_dict
    return (
        f"postgresql://{settings['USER']}@{settings['HOST']}:{settings['PORT']}/{settings['NAME']}"
    )


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
@pytest.mark.parametrize("transition_key", ["bump-after-call", "bump-call"])
def test_a_slow_bumping_transition_keeps_the_updates_committed_while_it_ran(
    operator, operator_client, sync, transition_key
):
    # The transition's task bumps the count after a 0.4 s call; four updates bump it meanwhile.
    # Its output is merged against the data as committed when it writes: 5 a round, none lost.
    with http_server() as base_url:
        publish(tally(base_url))
        instance_id = started(operator_client, "tally")
        base = f"{BASE.format('tally')}/{instance_id}/transitions"
        for round_number in range(1, 4):
            answers: list[Any] = []

            def transition_call(answers: list[Any] = answers) -> None:
                client = APIClient()
                client.force_authenticate(operator)
                try:
                    suffix = "?sync=true" if sync else ""
                    url = f"{base}/{transition_key}{suffix}"
                    answers.append(client.patch(url, {}, format="json"))
                finally:
                    connection.close()

            runner = threading.Thread(target=transition_call)
            runner.start()
            if not sync:
                # The accepted job runs in its own thread, like a worker's.
                wait_until(lambda answers=answers: bool(answers))
                job = Job.objects.filter(instance_id=instance_id, kind="transition").latest("pk")
                runner = threading.Thread(target=run_job_thread, args=(job.pk,))
                runner.start()
            wait_until(lambda: Instance.objects.get(pk=instance_id).status == "B")
            for _ in range(4):
                bumped = operator_client.patch(
                    f"{base}/update-data?sync=true", {"attributes": {}}, format="json"
                )
                assert bumped.status_code == 200, bumped.json()
            runner.join(timeout=30)
            assert not runner.is_alive()
            assert answers[0].status_code == (200 if sync else 202), answers[0].json()
            if sync:
                # Its answer is the data its commit saw: its own bump and every update that
                # committed before it (on a loaded machine an update may land just after).
                answered = answers[0].json()["attributes"]["count"]
                assert 5 * (round_number - 1) < answered <= 5 * round_number
            wait_until(lambda: Instance.objects.get(pk=instance_id).status == "A")
            assert counted(instance_id)["count"] == 5 * round_number


def test_pure_bumping_transitions_racing_updates_lose_nothing(operator, operator_client):
    # No I/O: the transition commits once, guarded by the state and the data it read; an
    # update committed in between makes its mapping run again on the new data.
    publish(tally())
    instance_id = started(operator_client, "tally")
    base = f"{BASE.format('tally')}/{instance_id}/transitions"

    def bump(client: APIClient, index: int) -> int:
        key = "bump" if index % 2 == 0 else "update-data"
        body = {"attributes": {"seq": index}}
        return client.patch(f"{base}/{key}?sync=true", body, format="json").status_code

    applied = 0
    for _ in range(10):
        results = race(4, bump, operator)
        # Transitions may lose to each other (409: nothing written); updates always apply.
        assert all(status in (200, 409) for status in results), results
        assert all(status == 200 for index, status in enumerate(results) if index % 2), results
        applied += results.count(200)
    data = counted(instance_id)
    assert data["count"] == applied
    rows = InstanceTransition.objects.filter(instance_id=instance_id, status="completed")
    assert rows.filter(transition_key__in=["bump", "update-data"]).count() == applied


def test_a_timer_bumping_every_tenth_of_a_second_keeps_every_update(operator_client):
    ticker = workflow(
        [
            state(
                "ticking",
                1,
                [
                    transition(
                        "tick",
                        "ticking",
                        2,
                        onExecutionTasks=[task_ref(BUMP_OUTPUT)],
                        timer=script(
                            "from datetime import timedelta\n\ndef handler(context):\n"
                            "    return timedelta(milliseconds=100)\n"
                        ),
                    ),
                    transition("stop", "stopped"),
                ],
            ),
            state("stopped", 3, subType=1),
        ],
        key="ticker",
        updateData=UPDATE_DATA,
    )
    publish(ticker)
    instance_id = started(operator_client, "ticker")
    stop = threading.Event()

    def timers() -> None:
        try:
            while not stop.is_set():
                jobs_run_due()
                time.sleep(0.01)
        finally:
            connection.close()

    runner = threading.Thread(target=timers)
    runner.start()
    url = f"{BASE.format('ticker')}/{instance_id}/transitions/update-data?sync=true"
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            bumped = operator_client.patch(url, {"attributes": {}}, format="json")
            assert bumped.status_code == 200, bumped.json()
    finally:
        stop.set()
        runner.join(timeout=30)
    stopped = operator_client.patch(
        f"{BASE.format('ticker')}/{instance_id}/transitions/stop?sync=true", {}, format="json"
    )
    assert stopped.status_code == 200
    rows = InstanceTransition.objects.filter(instance_id=instance_id, status="completed")
    ticks = rows.filter(transition_key="tick").count()
    updates = rows.filter(transition_key="update-data").count()
    assert ticks > 5
    assert updates > 5
    assert counted(instance_id)["count"] == ticks + updates


def test_ten_children_updating_their_parent_at_once_all_count(operator, operator_client):
    # Ten SubProcess children each run a direct-trigger task (type 12) sending the parent's
    # updateData from their start; their start jobs run side by side, as workers would.
    child = workflow(
        [
            state(
                "reporting",
                1,
                [transition("done", "finished", 1, triggerKind=10)],
                onEntries=[
                    {
                        "order": 1,
                        "task": {
                            "key": "tell-parent",
                            "domain": "core",
                            "version": "1.0.0",
                            "flow": "sys-tasks",
                        },
                        "mapping": script(
                            "def input_handler(task, context):\n"
                            "    task.instance_id = context.instance.data['parent']\n"
                            "    return ScriptResponse(data={'seq': context.instance.data['n']})\n"
                        ),
                    }
                ],
            ),
            state("finished", 3, subType=1),
        ],
        key="reporter",
    )
    trigger = {
        "key": "tell-parent",
        "domain": "core",
        "version": "1.0.0",
        "flow": "sys-tasks",
        "flowVersion": "1.0.0",
        "tags": ["test"],
        "attributes": {
            "type": "12",
            "config": {"domain": "core", "flow": "tally", "transitionName": "update-data"},
        },
    }
    spawn = {
        **trigger,
        "key": "spawn",
        "attributes": {"type": "14", "config": {"domain": "core", "flow": "reporter"}},
    }
    parent = tally()
    parent["attributes"]["states"][0]["transitions"].append(
        transition(
            "spawn-ten",
            "open",
            onExecutionTasks=[
                {
                    "order": 1,
                    "task": {
                        "key": "spawn",
                        "domain": "core",
                        "version": "1.0.0",
                        "flow": "sys-tasks",
                    },
                    "mapping": script(
                        "def input_handler(task, context):\n"
                        f"    return ScriptResponse(data={{'parent': context.instance.id, "
                        f"'n': {n}}})\n"
                    ),
                }
                for n in range(10)
            ],
        )
    )
    publish(trigger, spawn, child, parent)
    parent_id = started(operator_client, "tally")
    spawned = operator_client.patch(
        f"{BASE.format('tally')}/{parent_id}/transitions/spawn-ten?sync=true", {}, format="json"
    )
    assert spawned.status_code == 200, spawned.json()
    starts = list(
        Job.objects.filter(instance__workflow_key="reporter", status="pending").values_list(
            "pk", flat=True
        )
    )
    assert len(starts) == 10

    def run_start(_client: APIClient, index: int) -> str:
        return job_run(starts[index])

    assert race(10, run_start, operator) == ["succeeded"] * 10
    drain(parent_id)
    data = counted(parent_id)
    assert data["count"] == 10
    assert sorted(data["seen"]) == list(range(10))
    assert set(
        Instance.objects.filter(workflow_key="reporter").values_list("status", flat=True)
    ) == {"C"}


def wait_until(condition: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def run_job_thread(job_id: int) -> None:
    try:
        job_run(job_id)
    finally:
        connection.close()
