"""An answer follows its commit (PostgreSQL, real threads): a request whose pipeline committed
never answers 409; a transition a cancel takes over while it runs ends `cancelled` in history,
naming who took over, its late results dropped and its caller told; a sync start answers once
its hand-offs rest, even when a worker claimed them first."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from instances.job_table import Job
from instances.models import Instance, InstanceTransition
from tests.engine.builders import script, state, task_ref, transition, workflow
from tests.instances.http_server import http_server
from tests.instances.workflows import CANCEL, http_ref, http_task, publish

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.concurrency,
    pytest.mark.django_db(transaction=True),
]
BASE = "/api/v1/core/workflows/{}/instances"
UPDATE_DATA = {
    "key": "update-data",
    "target": "$self",
    "triggerType": 0,
    "versionStrategy": "Patch",
    "labels": [{"label": "Update data", "language": "en"}],
}


def client_of(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def wait_until(condition: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


@pytest.fixture
def worker():
    """A thread that runs due jobs as a worker would: it races the requests for hand-offs."""
    stop = threading.Event()

    def work() -> None:
        from instances.job_handlers import jobs_run_due

        try:
            while not stop.is_set():
                if not jobs_run_due():
                    time.sleep(0.01)
        finally:
            connection.close()

    thread = threading.Thread(target=work)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=30)


def test_a_cancel_that_takes_a_running_transition_over_closes_its_row(operator, operator_client):
    with http_server() as base_url:
        late = http_ref(
            "slow-call",
            mapping=(
                "def input_handler(task, context):\n    return None\n\n"
                "def output_handler(context):\n    return {'late': True}\n"
            ),
        )
        publish(
            http_task("slow-call", f"{base_url}/slow?ms=400"),
            workflow(
                [
                    state("open", 1, [transition("slowfin", "done", onExecutionTasks=[late])]),
                    state("done", 3, subType=1),
                    state("cancelled", 3, subType=3),
                ],
                key="slowfin",
                cancel=CANCEL,
            ),
        )
        for _ in range(5):
            started = operator_client.post(
                f"{BASE.format('slowfin')}/start?sync=true", {}, format="json"
            )
            instance_id = started.json()["id"]
            base = f"{BASE.format('slowfin')}/{instance_id}/transitions"
            answers: list[Any] = []

            def slow(base: str = base, answers: list[Any] = answers) -> None:
                try:
                    answer = client_of(operator).patch(f"{base}/slowfin?sync=true", {}, "json")
                    answers.append(answer)
                finally:
                    connection.close()

            runner = threading.Thread(target=slow)
            runner.start()
            wait_until(
                lambda instance_id=instance_id: InstanceTransition.objects.filter(
                    instance_id=instance_id, transition_key="slowfin", status="running"
                ).exists()
            )
            time.sleep(0.1)
            cancelled = operator_client.patch(f"{base}/cancel?sync=true", {}, format="json")
            assert cancelled.status_code == 200, cancelled.json()
            runner.join(timeout=30)
            (answer,) = answers
            body = answer.json()
            # The caller learns what became of its transition, and sees the instance as it is.
            assert answer.status_code == 200, body
            assert body["error"]["errorCode"] == "Transition:Superseded"
            assert "cancel" in body["error"]["detail"]
            assert body["status"] == "C"
            row = InstanceTransition.objects.get(instance_id=instance_id, transition_key="slowfin")
            assert row.status == "cancelled"
            assert row.finished_at is not None
            assert row.error_code == "Transition:Superseded"
            assert row.error_message == "superseded by cancel (by operator)"
            stored = Instance.objects.get(pk=instance_id)
            assert (stored.status, stored.current_state) == ("C", "cancelled")
            assert "late" not in stored.data  # the late output was dropped without a write


def test_an_update_whose_automatic_chain_is_not_admitted_answers_its_commit(
    operator, operator_client
):
    # `advance` (rule: go) leads to a state whose onEntry call holds the instance Busy; an update
    # that reads `go` true while that runs commits, and its own automatic chain is refused:
    # the update answers 200 and the state's automatics are evaluated again by a job.
    with http_server() as base_url:
        publish(
            http_task("slow-call", f"{base_url}/slow?ms=300"),
            workflow(
                [
                    state(
                        "working",
                        1,
                        [
                            transition(
                                "advance",
                                "advanced",
                                1,
                                rule=script(
                                    "def handler(context):\n"
                                    "    return bool(context.instance.data.get('go'))\n"
                                ),
                            )
                        ],
                    ),
                    state(
                        "advanced",
                        2,
                        [transition("finish", "done")],
                        onEntries=[http_ref("slow-call")],
                    ),
                    state("done", 3, subType=1),
                ],
                key="advancing",
                updateData=UPDATE_DATA,
            ),
        )
        statuses: Counter[int] = Counter()
        for round_number in range(10):
            started = operator_client.post(
                f"{BASE.format('advancing')}/start?sync=true", {}, format="json"
            )
            instance_id = started.json()["id"]
            url = f"{BASE.format('advancing')}/{instance_id}/transitions/update-data?sync=true"
            barrier = threading.Barrier(2)
            answers: list[Any] = [None, None]

            def update(
                index: int,
                url: str = url,
                barrier: threading.Barrier = barrier,
                answers: list[Any] = answers,
            ) -> None:
                try:
                    barrier.wait(timeout=10)
                    body = {"attributes": {"go": True, f"n{index}": index}}
                    answers[index] = client_of(operator).patch(url, body, format="json")
                finally:
                    connection.close()

            threads = [threading.Thread(target=update, args=(i,)) for i in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=30)
            for answer in answers:
                statuses[answer.status_code] += 1
                assert answer.status_code == 200, (round_number, answer.json())
            rows = InstanceTransition.objects.filter(instance_id=instance_id)
            assert rows.filter(transition_key="update-data", status="completed").count() == 2
            wait_until(lambda instance_id=instance_id: _settled(instance_id))
            assert rows.filter(transition_key="advance", status="completed").count() == 1
            stored = Instance.objects.get(pk=instance_id)
            assert (stored.current_state, stored.status) == ("advanced", "A")
            assert stored.data == {"go": True, "n0": 0, "n1": 1}
        assert statuses == {200: 20}


def _settled(instance_id: str) -> bool:
    from instances.job_handlers import jobs_run_due

    jobs_run_due()
    stored = Instance.objects.get(pk=instance_id)
    live = Job.objects.filter(instance_id=instance_id, status__in=["pending", "running"])
    return stored.status == "A" and not live.exists()


@pytest.mark.parametrize(
    ("through_subflow", "rounds"), [(False, 200), (True, 40)], ids=["direct", "subflow"]
)
def test_a_transition_right_after_a_sync_start_never_answers_409_after_committing(
    operator, operator_client, worker, through_subflow, rounds
):
    # An immediate timer moves the instance (Busy for its call) while the client's update,
    # sent right after the sync start, commits and finds its automatic chain refused. With a
    # SubFlow on the way, the start's hand-offs are raced by the worker: the start still
    # answers only once the chain rests.
    with http_server() as base_url:
        child = workflow(
            [
                state("c-begin", 1, [transition("c-go", "c-done", 1, triggerKind=10)]),
                state("c-done", 3, subType=1),
            ],
            key="quick-child",
        )
        child["attributes"]["type"] = "S"
        subflow = {
            "type": "S",
            "process": {
                "key": "quick-child",
                "domain": "core",
                "version": "1.0.0",
                "flow": "sys-flows",
            },
            "mapping": script("def input_handler(context):\n    return {}\n"),
        }
        ready = state(
            "ready",
            1 if not through_subflow else 2,
            [
                transition(
                    "tick",
                    "ticked",
                    2,
                    timer=script("def handler(context):\n    return None\n"),
                    onExecutionTasks=[http_ref("quick-call")],
                ),
                transition(
                    "auto-go",
                    "went",
                    1,
                    rule=script(
                        "def handler(context):\n    return bool(context.instance.data.get('go'))\n"
                    ),
                ),
            ],
        )
        ahead = [
            state("p-begin", 1, [transition("p-go", "p-wait", 1, triggerKind=10)]),
            state(
                "p-wait", 4, [transition("p-ready", "ready", 1, triggerKind=10)], subFlow=subflow
            ),
        ]
        parent = workflow(
            [
                *(ahead if through_subflow else []),
                ready,
                state("ticked", 2, [transition("finish", "done")]),
                state("went", 2, [transition("finish", "done")]),
                state("done", 3, subType=1),
            ],
            key="quick-parent",
            updateData=UPDATE_DATA,
        )
        publish(http_task("quick-call", f"{base_url}/slow?ms=10"), child, parent)
        base = BASE.format("quick-parent")
        refused = 0
        for _ in range(rounds):
            started = operator_client.post(f"{base}/start?sync=true", {}, format="json")
            assert started.status_code == 200, started.json()
            instance_id = started.json()["id"]
            # The sync start answers once its chain rests: a child has ended and resumed it
            # (the immediate timer may have moved it on since).
            assert Instance.objects.get(pk=instance_id).current_state in ("ready", "ticked")
            answer = operator_client.patch(
                f"{base}/{instance_id}/transitions/update-data?sync=true",
                {"attributes": {"go": True}},
                format="json",
            )
            rows = InstanceTransition.objects.filter(
                instance_id=instance_id, transition_key="update-data"
            )
            if answer.status_code == 409:
                refused += 1
                assert not rows.filter(status="completed").exists(), answer.json()
            else:
                assert answer.status_code == 200, answer.json()
                assert rows.filter(status="completed").count() == 1
        assert refused == 0


def test_update_data_on_a_parent_waiting_for_its_subflow_persists_data_only(operator_client):
    # Seed 000 step 21: the payload lands on the parent as sent; the transition's own mapping
    # and tasks, the state lifecycle and the epilogue do not run; the child is untouched.
    child = workflow(
        [state("c-wait", 1, [transition("c-end", "c-done")]), state("c-done", 3, subType=1)],
        key="patient-child",
    )
    child["attributes"]["type"] = "S"
    subflow = {
        "type": "S",
        "process": {
            "key": "patient-child",
            "domain": "core",
            "version": "1.0.0",
            "flow": "sys-flows",
        },
        "mapping": script("def input_handler(context):\n    return {}\n"),
    }
    counted_update = {
        **UPDATE_DATA,
        "mapping": script(
            "def handler(context):\n"
            "    mapped = (context.instance.data.get('mapped') or 0) + 1\n"
            "    return {**context.body, 'mapped': mapped}\n"
        ),
        "onExecutionTasks": [task_ref({"taskRan": True})],
    }
    parent = workflow(
        [
            state("p-begin", 1, [transition("p-go", "p-wait", 1, triggerKind=10)]),
            state(
                "p-wait",
                4,
                [transition("p-end", "p-done", 1, triggerKind=10)],
                subFlow=subflow,
                onEntries=[task_ref({"entered": True})],
            ),
            state("p-done", 3, subType=1),
        ],
        key="patient-parent",
        updateData=counted_update,
    )
    publish(child, parent)
    base = BASE.format("patient-parent")
    started = operator_client.post(f"{base}/start?sync=true", {}, format="json")
    parent_id = started.json()["id"]
    kid = Instance.objects.get(workflow_key="patient-child")
    assert (kid.status, kid.current_state) == ("A", "c-wait")
    for n in range(3):
        answer = operator_client.patch(
            f"{base}/{parent_id}/transitions/update-data?sync=true",
            {"attributes": {f"step{n}": n}},
            format="json",
        )
        assert answer.status_code == 200, answer.json()
    stored = Instance.objects.get(pk=parent_id)
    assert stored.data == {"entered": True, "step0": 0, "step1": 1, "step2": 2}
    assert (stored.status, stored.current_state) == ("B", "p-wait")
    assert Instance.objects.get(pk=kid.pk).data == {}
    rows = InstanceTransition.objects.filter(instance_id=parent_id, transition_key="update-data")
    assert list(rows.values_list("status", flat=True)) == ["completed"] * 3
