"""`timer.reset` of the workflow timeout on PostgreSQL, through the HTTP API: with `transition`
a transition moves the one pending timeout job to a new deadline in the transaction that commits
it (the state function shows it), so the timeout fires later, and once; `None` keeps the deadline
from the start; an unknown strategy is refused at publish. A SubFlow state's
`overrides.timeout` with `reset: "OnEntry"` (the vNext sample's spelling) publishes, replaces the
child's own re-arming timeout, and times the child out a full duration after the parent entered
the SubFlow state, whatever the child did meanwhile; the parent then resumes. Then the race the
re-arming must survive: a worker claiming the due timeout job while a transition commits, with
exactly one of the two taking effect."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from instances.job_handlers import jobs_run_due
from instances.job_table import Job
from instances.models import Instance
from instances.queue import job_claim
from instances.status import JobStatus
from tests.engine.builders import script, state, transition, workflow
from tests.instances.scenario_api import at, make_due
from tests.instances.workflows import publish

BASE = "/api/v1/core/workflows/idle-timeout/instances"
HOUR = timedelta(hours=1)


def idle_timeout(reset: str) -> dict[str, Any]:
    """a -> b -> c, each step a manual transition; one hour without one times it out."""
    return workflow(
        [
            state("a", 1, [transition("to-b", "b")]),
            state("b", 2, [transition("to-c", "c")]),
            state("c", 2),
            state("late", 3, subType=2),
        ],
        key="idle-timeout",
        timeout={
            "key": "expire",
            "target": "late",
            "versionStrategy": "None",
            "timer": {"reset": reset, "duration": "PT1H"},
        },
    )


def start(client: Any) -> str:
    response = client.post(f"{BASE}/start?sync=true", {}, format="json")
    assert response.status_code == 200, response.json()
    return str(response.json()["id"])


def fire(client: Any, instance_id: str, key: str) -> Any:
    return client.patch(f"{BASE}/{instance_id}/transitions/{key}?sync=true", {}, format="json")


def the_timeout_job(instance_id: str) -> Job:
    (job,) = Job.objects.filter(instance_id=instance_id, kind="timeout")
    return job


def time_passes(job: Job, left: timedelta) -> None:
    """As if the deadline were `left` away: most of the hour has gone by."""
    Job.objects.filter(pk=job.pk).update(run_at=timezone.now() + left)


@pytest.mark.django_db
def test_a_transition_moves_the_deadline_and_the_timeout_fires_later_once(operator_client):
    publish(idle_timeout("transition"))
    instance_id = start(operator_client)
    armed = the_timeout_job(instance_id)
    time_passes(armed, timedelta(minutes=5))

    before = timezone.now()
    assert fire(operator_client, instance_id, "to-b").status_code == 200
    after = timezone.now()

    job = the_timeout_job(instance_id)
    assert (job.pk, job.status) == (armed.pk, JobStatus.PENDING)
    assert before + HOUR <= job.run_at <= after + HOUR
    state = operator_client.get(f"{BASE}/{instance_id}/functions/state").json()
    assert at(state["timeout"]["executeAtUtc"]) == job.run_at
    # Not due: nothing fires where the old deadline was.
    time_passes(job, timedelta(minutes=55))
    jobs_run_due()
    assert Instance.objects.get(pk=instance_id).current_state == "b"

    make_due(the_timeout_job(instance_id))
    jobs_run_due()
    jobs_run_due()

    instance = Instance.objects.get(pk=instance_id)
    assert (instance.status, instance.current_state, instance.effective_state_subtype) == (
        "C",
        "late",
        "timeout",
    )
    assert the_timeout_job(instance_id).status == JobStatus.SUCCEEDED
    assert instance.transitions.filter(transition_key="expire").count() == 1


@pytest.mark.django_db
def test_none_keeps_the_deadline_from_the_start(operator_client):
    publish(idle_timeout("None"))
    instance_id = start(operator_client)
    armed = the_timeout_job(instance_id)

    assert fire(operator_client, instance_id, "to-b").status_code == 200
    assert fire(operator_client, instance_id, "to-c").status_code == 200

    job = the_timeout_job(instance_id)
    assert (job.status, job.run_at) == (JobStatus.PENDING, armed.run_at)


@pytest.mark.django_db
def test_an_unknown_reset_strategy_is_refused_at_publish(operator_client):
    response = operator_client.post(
        "/api/v1/definitions/publish", idle_timeout("always"), format="json"
    )

    assert response.status_code == 400
    ((error),) = response.json()["errors"]
    assert error["pointer"] == "/attributes/timeout/timer/reset"
    assert error["message"].startswith("unknown timer reset 'always': use None")
    assert error["message"].endswith(
        "(vNext reads no timer.reset and would keep an absolute deadline from the start)"
    )


# --- a SubFlow state's timeout override, reset OnEntry -------------------------------------------

SEGMENT_CHILD = "/api/v1/core/workflows/segment-child/instances"


def segment_child() -> dict[str, Any]:
    """The idle-timeout steps as a SubFlow, with a timeout of its own re-armed by every
    transition (which the parent's override replaces)."""
    document = idle_timeout("transition")
    document["key"] = "segment-child"
    document["attributes"]["type"] = "S"
    states = document["attributes"]["states"]
    states[1]["transitions"].append(transition("stay", "$self"))
    states[2]["transitions"] = [transition("finish", "done")]
    states.append(state("done", 3, subType=1))
    return document


def segment_parent() -> dict[str, Any]:
    """intake -auto-> delegate (starts segment-child, its timeout overridden: an hour from entry,
    reset OnEntry) -auto-> closed."""
    return workflow(
        [
            state("intake", 1, [transition("delegate-now", "delegate", 1, triggerKind=10)]),
            state(
                "delegate",
                4,
                [transition("wrap-up", "closed", 1, triggerKind=10)],
                subFlow={
                    "type": "S",
                    "process": {
                        "key": "segment-child",
                        "domain": "core",
                        "version": "1.0.0",
                        "flow": "sys-flows",
                    },
                    "mapping": script("def input_handler(context):\n    return {}\n"),
                    "overrides": {
                        "timeout": {
                            "key": "segment-expired",
                            "target": "late",
                            "versionStrategy": "None",
                            "timer": {"reset": "OnEntry", "duration": "PT1H"},
                        }
                    },
                },
            ),
            state("closed", 3, subType=1),
        ],
        key="segment-parent",
    )


@pytest.mark.django_db
def test_an_on_entry_timeout_override_times_the_child_out_an_hour_after_the_parent_entered(
    operator_client,
):
    publish(segment_child())
    published = operator_client.post("/api/v1/definitions/publish", segment_parent(), format="json")
    assert published.status_code == 200, published.json()
    assert published.json()["status"] == "published"

    entered = timezone.now()
    response = operator_client.post(
        "/api/v1/core/workflows/segment-parent/instances/start?sync=true", {}, format="json"
    )
    assert response.status_code == 200, response.json()
    parent_id = str(response.json()["id"])
    started = timezone.now()
    child = Instance.objects.get(parent_correlation__parent__pk=parent_id)
    child_id = str(child.pk)
    assert (child.current_state, Instance.objects.get(pk=parent_id).current_state) == (
        "a",
        "delegate",
    )
    armed = the_timeout_job(child_id)
    assert armed.payload["transition"] == "segment-expired"
    assert entered + HOUR <= armed.run_at <= started + HOUR

    # Transitions, a `$self` one included, move nothing: the child's own `transition` reset is
    # replaced with the override's OnEntry.
    for key in ("to-b", "stay", "to-c"):
        moved = operator_client.patch(
            f"{SEGMENT_CHILD}/{child_id}/transitions/{key}?sync=true", {}, format="json"
        )
        assert moved.status_code == 200, moved.json()
    job = the_timeout_job(child_id)
    assert (job.pk, job.status, job.run_at) == (armed.pk, JobStatus.PENDING, armed.run_at)

    make_due(job)
    for _ in range(3):  # the timeout, then the parent's resume it queues
        jobs_run_due()

    child = Instance.objects.get(pk=child_id)
    assert (child.status, child.current_state, child.effective_state_subtype) == (
        "C",
        "late",
        "timeout",
    )
    assert child.transitions.filter(transition_key="segment-expired").count() == 1
    assert the_timeout_job(child_id).status == JobStatus.SUCCEEDED
    parent = Instance.objects.get(pk=parent_id)
    assert (parent.status, parent.current_state) == ("C", "closed")


# --- the race ---------------------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.concurrency
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("round_", range(3))
def test_a_claim_of_the_due_timeout_and_a_re_arming_transition_never_both_win(
    operator, operator_client, round_
):
    publish(idle_timeout("transition"))
    instance_id = start(operator_client)
    due = the_timeout_job(instance_id)
    make_due(due)
    old_deadline = Job.objects.get(pk=due.pk).run_at
    barrier = threading.Barrier(2)
    results: dict[str, Any] = {}

    def claim() -> None:
        try:
            barrier.wait(timeout=30)
            results["claim"] = job_claim(due.pk)
        except BaseException as exc:  # reported by the assertions below
            results["claim"] = exc
        finally:
            connection.close()

    def transition_to_b() -> None:
        client = APIClient()
        client.force_authenticate(operator)
        try:
            barrier.wait(timeout=30)
            results["transition"] = fire(client, instance_id, "to-b").status_code
        except BaseException as exc:
            results["transition"] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=claim), threading.Thread(target=transition_to_b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)

    assert results["transition"] == 200
    job = the_timeout_job(instance_id)  # still one timeout job, whoever won
    if results["claim"] is not None:
        # The worker won: the job runs at the deadline it was claimed for; nothing moved it.
        assert job.pk == results["claim"].pk
        assert (job.status, job.run_at) == (JobStatus.RUNNING, old_deadline)
    else:
        # The transition won: the job waits for its new deadline, unclaimed.
        assert job.status == JobStatus.PENDING
        assert job.run_at >= old_deadline + HOUR - timedelta(minutes=1)
    assert Instance.objects.get(pk=instance_id).current_state == "b"
