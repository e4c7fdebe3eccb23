"""A job that finds its instance held by another live job waits for it without spending its
attempts (the soak's finding: a timer gave up after 5 attempts while a crashed worker's job held
the instance for its 30 s lease); a transition job whose earlier claim applied it before the worker
died ends `succeeded`, not `skipped`; a database outage answers 503, not 500."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone

from instances.job_handlers import SWEEP_SECONDS, job_run
from instances.job_table import Job
from instances.models import Instance, InstanceTransition
from instances.queue import job_claim
from tests.instances.test_jobs__async import TIMERS, timers_workflow
from tests.instances.workflows import publish

pytestmark = pytest.mark.django_db


def started_with_a_crashed_holder(client) -> tuple[str, Job, Job]:
    """An instance in `waiting` whose async `approve` was claimed by a worker that died (Busy,
    the job running on a live lease), and its due timer."""
    publish(timers_workflow())
    instance_id = client.post(f"{TIMERS}/start?sync=true", {}, format="json").json()["id"]
    accepted = client.patch(f"{TIMERS}/{instance_id}/transitions/approve", {}, format="json")
    assert accepted.status_code == 202
    holder = job_claim(Job.objects.get(instance_id=instance_id, kind="transition").pk)
    assert holder is not None
    timer = Job.objects.get(instance_id=instance_id, kind="timer")
    return instance_id, holder, timer


def run_due(job: Job) -> str:
    Job.objects.filter(pk=job.pk).update(run_at=timezone.now())
    return job_run(job.pk)


def test_a_timer_waits_for_a_live_holder_without_spending_its_attempts(operator_client):
    instance_id, holder, timer = started_with_a_crashed_holder(operator_client)

    outcomes = [run_due(timer) for _ in range(8)]  # more than VNEXT_JOB_MAX_ATTEMPTS

    assert outcomes == ["retry"] * 8
    timer.refresh_from_db()
    assert (timer.status, timer.attempts) == ("pending", 0)
    assert "waiting for the job holding it" in timer.last_error
    assert holder.lease_until is not None
    assert timer.run_at >= holder.lease_until + timedelta(seconds=SWEEP_SECONDS - 1)
    assert Instance.objects.get(pk=instance_id).status == "B"


def test_once_the_holders_lease_has_expired_the_wait_counts_again(operator_client):
    _, holder, timer = started_with_a_crashed_holder(operator_client)
    Job.objects.filter(pk=holder.pk).update(lease_until=timezone.now() - timedelta(seconds=1))

    assert run_due(timer) == "retry"

    timer.refresh_from_db()
    assert (timer.status, timer.attempts) == ("pending", 1)


def test_the_holder_re_run_after_its_lease_settles_the_instance_and_the_timer(operator_client):
    instance_id, holder, timer = started_with_a_crashed_holder(operator_client)
    assert run_due(timer) == "retry"
    Job.objects.filter(pk=holder.pk).update(lease_until=timezone.now() - timedelta(seconds=1))

    assert job_run(holder.pk) == "succeeded"

    assert Instance.objects.get(pk=instance_id).current_state == "approved"
    timer.refresh_from_db()
    assert timer.status == "cancelled"  # leaving the state cancelled it: nothing failed


def test_a_transition_applied_by_a_claim_whose_worker_died_ends_succeeded(operator_client):
    instance_id, holder, _ = started_with_a_crashed_holder(operator_client)
    Job.objects.filter(pk=holder.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    assert job_run(holder.pk) == "succeeded"
    # The worker died after the run's commit, before recording the job: it is due again.
    Job.objects.filter(pk=holder.pk).update(status="running", lease_until=timezone.now())

    assert job_run(holder.pk) == "succeeded"

    holder.refresh_from_db()
    assert holder.status == "succeeded"
    applied = InstanceTransition.objects.filter(instance_id=instance_id, transition_key="approve")
    assert applied.count() == 1


def test_a_database_outage_answers_503_with_retry_after(operator_client, monkeypatch):
    publish(timers_workflow())
    instance_id = operator_client.post(f"{TIMERS}/start?sync=true", {}, format="json").json()["id"]

    def gone(*args, **kwargs):
        raise OperationalError("terminating connection due to administrator command")

    monkeypatch.setattr("instances.api.read_views.instance_snapshot", gone)
    response = operator_client.get(f"{TIMERS}/{instance_id}")

    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    body = response.json()
    assert body["errorCode"] == "App:900010"
    assert "may have been applied" in body["detail"]
