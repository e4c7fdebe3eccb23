"""No event is dropped (issue 27): an event whose instance is Busy waits for it as an
`event-transition` job and is applied once the instance is free; its receipt commits only with
the work it caused, so an event that matched nothing stays redeliverable; two deliveries of one
id apply once. Real threads over HTTP on PostgreSQL for the races."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from instances.events import event_transition_admit
from instances.job_handlers import job_execute, job_run, jobs_run_due
from instances.job_table import Job
from instances.models import Instance, InstanceTransition
from instances.queue import job_claim, jobs_claim_due
from instances.replay import job_replay
from instances.status import JobKind, JobStatus
from tests.engine.builders import script, state, task_ref, transition, workflow
from tests.instances.workflows import publish

BASE = "/api/v1/core/workflows/event-counter/instances"
EVENTS = f"{BASE}/events?action=transition&transitionKey=bump"
LIVE = (JobStatus.PENDING, JobStatus.RUNNING)

# The event goes to the instance whose key is its `order` (or, with a `group`, to every live
# instance of that group); its body records the event's tag under `seen`.
BUMP_MAPPING = """
def handler(context):
    payload = context.event_payload or {}
    body = {"seen": {str(payload.get("tag")): True}}
    if payload.get("group"):
        return {"filter": "attributes.group eq '" + payload["group"] + "'", "body": body}
    return {"key": payload.get("order"), "body": body}
"""
# The transition's task counts its applications, reading what the previous one committed.
COUNT = "{'count': (context.instance.data.get('count') or 0) + 1}"


def counter_workflow() -> dict[str, Any]:
    """`open` takes the event transition `bump` (back to `open`) and the manual `touch` (also
    back to `open`) and `close`; `closed` does not take `bump`, `reopen` leads back."""
    bump = transition(
        "bump",
        "open",
        3,
        event={"mapping": script(BUMP_MAPPING)},
        onExecutionTasks=[task_ref(COUNT)],
    )
    return workflow(
        [
            state("open", 1, [bump, transition("touch", "open"), transition("close", "closed")]),
            state("closed", 2, [transition("reopen", "open")]),
        ],
        key="event-counter",
    )


def start(client: APIClient, key: str, **attributes: Any) -> str:
    body = {"key": key, "attributes": attributes}
    response = client.post(f"{BASE}/start?sync=true", body, format="json")
    assert response.status_code == 200, response.json()
    return str(response.json()["id"])


def fire(client: APIClient, instance_id: str, key: str, *, sync: bool) -> None:
    url = f"{BASE}/{instance_id}/transitions/{key}" + ("?sync=true" if sync else "")
    response = client.patch(url, {}, format="json")
    assert response.status_code == (200 if sync else 202), response.json()


def cloud_event(event_id: str, **data: Any) -> dict[str, Any]:
    return {"specversion": "1.0", "id": event_id, "type": "t", "source": "/test", "data": data}


def deliver(client: APIClient, event_id: str, **data: Any) -> dict[str, Any]:
    response = client.post(EVENTS, cloud_event(event_id, **data), format="json")
    assert response.status_code == 200, response.json()
    answer: dict[str, Any] = response.json()
    return answer


def live_jobs() -> Any:
    return Job.objects.filter(status__in=LIVE)


def run_jobs_until_settled(timeout: float = 60.0) -> None:
    """Run due jobs here until every job is terminal (waiting ones sleep to their time)."""
    deadline = time.monotonic() + timeout
    while True:
        jobs_run_due()
        if not live_jobs().exists():
            return
        assert time.monotonic() < deadline, list(live_jobs().values("kind", "status", "run_at"))
        due = live_jobs().order_by("run_at").values_list("run_at", flat=True).first()
        wait = (due - timezone.now()).total_seconds() if due else 0.05
        time.sleep(min(max(wait, 0.01), 0.5))


@contextmanager
def job_workers(count: int = 3) -> Iterator[Callable[[float], None]]:
    """`count` worker threads claiming and running due jobs, as the runner's pool does; yields
    a function that waits until every job is terminal."""
    stop = threading.Event()

    def work() -> None:
        try:
            while not stop.is_set():
                claimed = jobs_claim_due(limit=2)
                for job in claimed:
                    job_execute(job)
                if not claimed:
                    time.sleep(0.02)
        finally:
            connection.close()

    def settled(timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while live_jobs().exists():
            assert time.monotonic() < deadline, list(live_jobs().values("kind", "status"))
            time.sleep(0.05)

    threads = [threading.Thread(target=work) for _ in range(count)]
    for thread in threads:
        thread.start()
    try:
        yield settled
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        assert not any(thread.is_alive() for thread in threads)


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


def bumps(instance_id: str) -> Any:
    return InstanceTransition.objects.filter(instance_id=instance_id, transition_key="bump")


def receipts() -> Any:
    return Job.objects.filter(kind=JobKind.EVENT_RECEIPT)


# --- races over HTTP ------------------------------------------------------------------------------

# `idle`: the instance is Active when the events come, and workers run the jobs meanwhile (some
# events are admitted at once, the rest wait); `busy`: an accepted `touch` holds the instance
# until every event is in, and the workers start only then, so every event waits.
HOLDERS = pytest.mark.parametrize("holder", ["idle", "busy"])


def raced_then_settled(
    holder: str, instance_id: str, send: Callable[[APIClient, int], Any], operator: Any
) -> list[Any]:
    """Twenty concurrent `send`s, then every job run to its end."""
    if holder == "idle":
        with job_workers() as settled:
            answers = race(20, send, operator)
            settled(90.0)
        return answers
    answers = race(20, send, operator)
    assert Instance.objects.get(pk=instance_id).status == "B"  # nothing has run yet
    with job_workers() as settled:
        settled(90.0)
    return answers


@HOLDERS
@pytest.mark.postgres
@pytest.mark.concurrency
@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_distinct_events_for_one_instance_are_all_applied(
    operator, operator_client, holder
):
    publish(counter_workflow())
    instance_id = start(operator_client, "O-1")
    if holder == "busy":
        fire(operator_client, instance_id, "touch", sync=False)

    def send(client: APIClient, index: int) -> tuple[int, tuple[str, ...], bool]:
        answer = deliver(client, f"evt-{index}", order="O-1", tag=f"e{index}")
        return answer["matched"], tuple(answer["instances"]), answer["duplicate"]

    answers = raced_then_settled(holder, instance_id, send, operator)

    assert answers == [(1, (instance_id,), False)] * 20
    row = Instance.objects.get(pk=instance_id)
    assert (row.status, row.current_state, row.busy_owner) == ("A", "open", "")
    assert row.data["count"] == 20
    assert row.data["seen"] == {f"e{i}": True for i in range(20)}
    assert bumps(instance_id).count() == 20
    assert set(bumps(instance_id).values_list("status", "trigger_type")) == {("completed", 3)}
    assert receipts().count() == 20
    work = Job.objects.exclude(kind=JobKind.EVENT_RECEIPT)
    assert set(work.values_list("status", flat=True)) == {"succeeded"}  # none failed or skipped
    if holder == "busy":
        assert Job.objects.filter(kind=JobKind.EVENT_TRANSITION).count() == 20


@HOLDERS
@pytest.mark.postgres
@pytest.mark.concurrency
@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_deliveries_of_one_event_apply_it_once(operator, operator_client, holder):
    publish(counter_workflow())
    instance_id = start(operator_client, "O-1")
    if holder == "busy":
        fire(operator_client, instance_id, "touch", sync=False)

    def send(client: APIClient, _index: int) -> tuple[int, bool]:
        answer = deliver(client, "evt-same", order="O-1", tag="once")
        return answer["matched"], answer["duplicate"]

    answers = raced_then_settled(holder, instance_id, send, operator)

    assert Counter(answers) == {(1, False): 1, (0, True): 19}
    row = Instance.objects.get(pk=instance_id)
    assert (row.status, row.current_state, row.data) == (
        "A",
        "open",
        {"count": 1, "seen": {"once": True}},
    )
    assert bumps(instance_id).count() == 1
    assert receipts().count() == 1


# --- one delivery at a time ---------------------------------------------------------------------


@pytest.mark.django_db
def test_an_event_for_a_busy_instance_waits_and_is_applied_once_it_frees(operator_client):
    publish(counter_workflow())
    instance_id = start(operator_client, "O-1")
    fire(operator_client, instance_id, "touch", sync=False)  # Busy, reserved for its job

    answer = deliver(operator_client, "evt-1", order="O-1", tag="late")

    assert (answer["matched"], answer["instances"], answer["duplicate"]) == (
        1,
        [instance_id],
        False,
    )
    waiting = Job.objects.get(kind=JobKind.EVENT_TRANSITION)
    assert (waiting.status, str(waiting.instance_id)) == ("pending", instance_id)
    assert receipts().count() == 1
    assert deliver(operator_client, "evt-1", order="O-1", tag="late")["duplicate"] is True

    run_jobs_until_settled()

    row = Instance.objects.get(pk=instance_id)
    assert (row.status, row.current_state, row.data) == (
        "A",
        "open",
        {"count": 1, "seen": {"late": True}},
    )
    (applied,) = bumps(instance_id)
    assert (applied.status, applied.trigger_type) == ("completed", 3)
    waiting.refresh_from_db()
    assert (waiting.status, waiting.attempts) == ("succeeded", 1)  # waiting cost no attempt
    keys = InstanceTransition.objects.filter(instance_id=instance_id).values_list(
        "transition_key", flat=True
    )
    assert Counter(keys) == {"start": 1, "touch": 1, "bump": 1}


@pytest.mark.django_db
def test_an_event_that_matches_nothing_leaves_no_receipt_and_stays_redeliverable(
    operator_client,
):
    publish(counter_workflow())

    first = deliver(operator_client, "evt-early", order="O-9", tag="early")
    again = deliver(operator_client, "evt-early", order="O-9", tag="early")

    assert (first["matched"], first["duplicate"]) == (0, False)
    assert (again["matched"], again["duplicate"]) == (0, False)
    assert not receipts().exists()
    # Its instance exists now, in a state that does not take it: still nothing, still no receipt.
    instance_id = start(operator_client, "O-9")
    fire(operator_client, instance_id, "close", sync=True)
    closed = deliver(operator_client, "evt-early", order="O-9", tag="early")
    assert (closed["matched"], closed["duplicate"]) == (0, False)
    assert not receipts().exists()
    assert not Job.objects.filter(kind=JobKind.EVENT_TRANSITION).exists()

    fire(operator_client, instance_id, "reopen", sync=True)
    taken = deliver(operator_client, "evt-early", order="O-9", tag="early")
    run_jobs_until_settled()

    assert (taken["matched"], taken["instances"], taken["duplicate"]) == (1, [instance_id], False)
    assert Instance.objects.get(pk=instance_id).data == {"count": 1, "seen": {"early": True}}
    assert receipts().count() == 1
    assert deliver(operator_client, "evt-early", order="O-9", tag="early")["duplicate"] is True


@pytest.mark.django_db
def test_an_event_whose_busy_instance_leaves_for_a_state_without_it_ends_skipped(
    operator_client,
):
    publish(counter_workflow())
    instance_id = start(operator_client, "O-1")
    fire(operator_client, instance_id, "close", sync=False)  # Busy, and about to leave `open`

    answer = deliver(operator_client, "evt-1", order="O-1", tag="too-late")
    run_jobs_until_settled()

    assert answer["matched"] == 1
    row = Instance.objects.get(pk=instance_id)
    assert (row.status, row.current_state, row.data) == ("A", "closed", {})
    waiting = Job.objects.get(kind=JobKind.EVENT_TRANSITION)
    assert waiting.status == "skipped"
    assert "event 'evt-1' no longer applies" in waiting.last_error
    assert "state 'closed'" in waiting.last_error
    assert "Transition:100020" in waiting.last_error
    assert not bumps(instance_id).exists()

    # An operator who brings the instance back replays the job: the event is applied then.
    fire(operator_client, instance_id, "reopen", sync=True)
    assert job_replay(job=waiting, operator="ops").outcome == "replayed"
    run_jobs_until_settled()
    assert Instance.objects.get(pk=instance_id).data == {"count": 1, "seen": {"too-late": True}}


@pytest.mark.django_db
def test_a_filter_applies_the_same_rules_to_each_instance(operator_client):
    publish(counter_workflow())
    idle = start(operator_client, "G-idle", group="g")
    busy = start(operator_client, "G-busy", group="g")
    closed = start(operator_client, "G-closed", group="g")
    start(operator_client, "H-other", group="h")
    fire(operator_client, busy, "touch", sync=False)
    fire(operator_client, closed, "close", sync=True)

    answer = deliver(operator_client, "evt-g", group="g", tag="all")
    run_jobs_until_settled()

    assert (answer["matched"], sorted(answer["instances"])) == (2, sorted([idle, busy]))
    counts = {
        row.key: row.data.get("count")
        for row in Instance.objects.filter(workflow_key="event-counter")
    }
    assert counts == {"G-idle": 1, "G-busy": 1, "G-closed": None, "H-other": None}
    assert Job.objects.filter(kind=JobKind.EVENT_TRANSITION, instance_id=busy).count() == 1


@pytest.mark.django_db
def test_a_waiting_event_admitted_by_a_claim_whose_worker_died_is_not_admitted_again(
    operator_client,
):
    publish(counter_workflow())
    instance_id = start(operator_client, "O-1")
    fire(operator_client, instance_id, "touch", sync=False)
    deliver(operator_client, "evt-1", order="O-1", tag="once")
    touch = Job.objects.get(kind=JobKind.TRANSITION, instance_id=instance_id)
    assert job_run(touch.pk) == "succeeded"
    waiting = Job.objects.get(kind=JobKind.EVENT_TRANSITION)
    claim = job_claim(waiting.pk)
    assert claim is not None
    assert event_transition_admit(claim).outcome == "admitted"
    # The worker died before recording the job: its lease runs out, and it is claimed again.
    Job.objects.filter(pk=waiting.pk).update(lease_until=timezone.now())

    assert job_run(waiting.pk) == "succeeded"
    run_jobs_until_settled()

    assert Instance.objects.get(pk=instance_id).data == {"count": 1, "seen": {"once": True}}
    assert bumps(instance_id).count() == 1
    waiting.refresh_from_db()
    replayed = job_replay(job=waiting, force=True, operator="ops")
    assert (replayed.outcome, replayed.reason) == (
        "no effect",
        "its event was admitted as a transition already; replaying it would change nothing",
    )
