"""Jobs without a broker: async accept (202) commits the instance change and its job together;
the job runner claims by CAS, runs once, completes fenced by its lease; timers fire, cancelled
ones don't; the stranded-Busy reaper; replay."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from instances.job_handlers import job_run, jobs_run_due
from instances.job_table import Job
from instances.models import Incident, Instance, InstanceTransition
from instances.queue import job_claim, job_complete, jobs_prune_finished
from instances.reaper import instances_reap_stranded_busy
from tests.engine.builders import script, state, transition, workflow
from tests.instances.answers import fault_code
from tests.instances.workflows import ping_pong, publish

pytestmark = pytest.mark.django_db
BASE = "/api/v1/core/workflows/ping-pong/instances"


@pytest.fixture
def flow(db):
    publish(ping_pong())


def accept_start(client, body=None):
    response = client.post(f"{BASE}/start", body or {}, format="json")
    assert response.status_code == 202, response.json()
    return response.json()


def test_async_start_answers_202_busy_and_the_job_finishes_it(
    operator_client, flow, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        accepted = accept_start(operator_client, {"attributes": {"a": 1}})
    assert accepted["status"] == "B"
    assert len(callbacks) == 1  # dispatched only after commit
    row = Instance.objects.get(pk=accepted["id"])
    assert (row.status, row.busy_owner.startswith("res:")) == ("B", True)
    [job] = Job.objects.filter(instance_id=accepted["id"])
    assert (job.kind, job.status) == ("transition", "pending")
    assert "authorization" not in job.payload["headers"]

    assert jobs_run_due() == {"succeeded": 1}
    row.refresh_from_db()
    assert (row.status, row.current_state, row.data, row.busy_owner) == ("A", "ping", {"a": 1}, "")
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("succeeded", 1)


def test_async_transition_reserves_now_and_refuses_a_second_with_409(operator_client, flow):
    created = operator_client.post(f"{BASE}/start?sync=true", {}, format="json").json()
    url = f"{BASE}/{created['id']}/transitions"
    first = operator_client.patch(f"{url}/to-pong", {"x": 1}, format="json")
    assert (first.status_code, first.json()) == (202, {"id": created["id"], "status": "B"})
    second = operator_client.patch(f"{url}/to-pong", {}, format="json")
    assert (second.status_code, second.json()["errorCode"]) == (409, "Instance:100031")
    assert Job.objects.filter(kind="transition").count() == 1

    jobs_run_due()
    row = Instance.objects.get(pk=created["id"])
    assert (row.status, row.current_state, row.data) == ("A", "pong", {"x": 1})
    assert InstanceTransition.objects.filter(transition_key="to-pong").count() == 1


def test_a_job_delivered_twice_runs_once(operator_client, flow):
    accepted = accept_start(operator_client)
    job = Job.objects.get(instance_id=accepted["id"])
    assert job_run(job.pk) == "succeeded"
    assert job_run(job.pk) == "skipped"
    assert InstanceTransition.objects.filter(instance_id=accepted["id"]).count() == 1


def test_a_worker_that_lost_its_lease_cannot_complete_or_write(operator_client, flow):
    accepted = accept_start(operator_client)
    job_id = Job.objects.get(instance_id=accepted["id"]).pk
    stale = job_claim(job_id)
    assert stale is not None
    Job.objects.filter(pk=job_id).update(lease_until=timezone.now() - timedelta(seconds=1))
    assert job_run(job_id) == "succeeded"  # the next claim takes over and finishes
    assert job_complete(stale, "failed", error="late") is False
    job = Job.objects.get(pk=job_id)
    assert (job.status, job.attempts, job.lease_owner) == ("succeeded", 2, f"job:{job_id}:2")
    assert Instance.objects.get(pk=accepted["id"]).status == "A"


def test_async_update_data_takes_no_lock(operator_client, flow):
    created = operator_client.post(f"{BASE}/start?sync=true", {}, format="json").json()
    url = f"{BASE}/{created['id']}/transitions/update-data"
    for n in range(3):
        assert operator_client.patch(url, {f"k{n}": n}, format="json").status_code == 202
    assert Instance.objects.get(pk=created["id"]).status == "A"
    assert jobs_run_due() == {"succeeded": 3}
    assert Instance.objects.get(pk=created["id"]).data == {"k0": 0, "k1": 1, "k2": 2}


def timers_workflow() -> dict:
    return workflow(
        [
            state(
                "waiting",
                1,
                [
                    transition("approve", "approved"),
                    transition(
                        "expire",
                        "expired",
                        2,
                        timer=script("def handler(context):\n    return 'PT0S'\n"),
                    ),
                ],
            ),
            state("approved", 2, [transition("close", "closed")]),
            state("expired", 3, subType=8),
            state("closed", 3, subType=1),
        ],
        key="timers",
        timeout={
            "key": "abandoned",
            "target": "expired",
            "versionStrategy": "None",
            "timer": {"reset": "never", "duration": "PT1H"},
        },
    )


TIMERS = "/api/v1/core/workflows/timers/instances"


def test_a_due_timer_fires_the_scheduled_transition(operator_client):
    publish(timers_workflow())
    created = operator_client.post(f"{TIMERS}/start?sync=true", {}, format="json").json()
    timer = Job.objects.get(instance_id=created["id"], kind="timer")
    assert (timer.state, timer.payload["transition"]) == ("waiting", "expire")
    assert Job.objects.filter(instance_id=created["id"], kind="timeout").count() == 1
    assert jobs_run_due() == {"succeeded": 1}
    row = Instance.objects.get(pk=created["id"])
    assert (row.status, row.current_state) == ("C", "expired")
    history = InstanceTransition.objects.filter(instance_id=created["id"]).order_by("started_at")
    assert [(h.transition_key, h.trigger_type, h.actor) for h in history] == [
        ("start", 0, "operator"),
        ("expire", 2, "scheduler"),
    ]
    # Completing cancels the workflow timeout.
    assert Job.objects.get(instance_id=created["id"], kind="timeout").status == "cancelled"


def test_leaving_the_state_cancels_its_timer_and_a_cancelled_timer_never_fires(operator_client):
    publish(timers_workflow())
    created = operator_client.post(f"{TIMERS}/start?sync=true", {}, format="json").json()
    Job.objects.filter(kind="timer").update(run_at=timezone.now() + timedelta(hours=1))
    operator_client.patch(
        f"{TIMERS}/{created['id']}/transitions/approve?sync=true", {}, format="json"
    )
    assert Job.objects.get(kind="timer").status == "cancelled"
    Job.objects.filter(kind="timer").update(run_at=timezone.now() - timedelta(seconds=1))
    assert jobs_run_due() == {}
    assert Instance.objects.get(pk=created["id"]).current_state == "approved"


def test_the_workflow_timeout_takes_a_busy_instance_over(operator_client):
    publish(timers_workflow())
    created = operator_client.post(f"{TIMERS}/start?sync=true", {}, format="json").json()
    Job.objects.filter(kind="timer").update(status="cancelled")
    Instance.objects.filter(pk=created["id"]).update(status="B", busy_owner="someone")
    Job.objects.filter(kind="timeout").update(run_at=timezone.now())
    assert jobs_run_due() == {"succeeded": 1}
    row = Instance.objects.get(pk=created["id"])
    assert (row.status, row.current_state, row.effective_state_subtype) == (
        "C",
        "expired",
        "timeout",
    )


def test_a_timer_on_a_busy_instance_waits_and_fires_later(operator_client):
    publish(timers_workflow())
    created = operator_client.post(f"{TIMERS}/start?sync=true", {}, format="json").json()
    Instance.objects.filter(pk=created["id"]).update(status="B", busy_owner="someone")
    assert jobs_run_due() == {"retry": 1}
    timer = Job.objects.get(kind="timer")
    assert (timer.status, timer.run_at > timezone.now()) == ("pending", True)
    Instance.objects.filter(pk=created["id"]).update(status="A", busy_owner="")
    Job.objects.filter(kind="timer").update(run_at=timezone.now())
    assert jobs_run_due() == {"succeeded": 1}
    assert Instance.objects.get(pk=created["id"]).current_state == "expired"


def test_a_timer_script_that_throws_faults_with_an_incident(operator_client):
    document = timers_workflow()
    timer_node = document["attributes"]["states"][0]["transitions"][1]["timer"]
    timer_node["code"] = "def handler(context):\n    raise RuntimeError('calendar down')\n"
    publish(document)
    response = operator_client.post(f"{TIMERS}/start?sync=true", {"n": 1}, format="json")
    assert fault_code(response) == "Script:100001"
    instance_id = response.json()["id"]
    row = Instance.objects.get(pk=instance_id)
    assert (row.status, row.current_state, row.data) == ("F", "waiting", {"n": 1})
    assert "calendar down" in Incident.objects.get(instance_id=instance_id).message


def test_the_reaper_faults_an_instance_stranded_busy(operator_client, flow, settings):
    settings.VNEXT = {**settings.VNEXT, "BUSY_LEASE_SECONDS": 1}
    created = operator_client.post(f"{BASE}/start?sync=true", {}, format="json").json()
    Instance.objects.filter(pk=created["id"]).update(
        status="B", busy_owner="dead-process", busy_since=timezone.now() - timedelta(seconds=5)
    )
    assert instances_reap_stranded_busy() == 1
    row = Instance.objects.get(pk=created["id"])
    assert (row.status, row.busy_owner) == ("F", "")
    assert Incident.objects.get(instance_id=created["id"]).error_code == "Instance:StrandedBusy"
    assert instances_reap_stranded_busy() == 0


def test_the_reaper_leaves_a_reservation_with_a_live_job_alone(operator_client, flow, settings):
    settings.VNEXT = {**settings.VNEXT, "BUSY_LEASE_SECONDS": 1}
    accepted = accept_start(operator_client)
    Instance.objects.filter(pk=accepted["id"]).update(
        busy_since=timezone.now() - timedelta(seconds=5)
    )
    assert instances_reap_stranded_busy() == 0
    assert jobs_run_due() == {"succeeded": 1}


def test_replay_and_list_commands(operator_client, flow, capsys):
    accepted = accept_start(operator_client)
    job = Job.objects.get(instance_id=accepted["id"])
    jobs_run_due()
    with pytest.raises(CommandError, match="no job with id 999999"):
        call_command("jobs_replay", "--id", "999999", "--no-progress")
    with pytest.raises(CommandError) as refused:
        call_command("jobs_replay", "--id", str(job.pk), "--no-progress")
    assert refused.value.returncode == 1
    call_command("jobs_replay", "--id", str(job.pk), "--dry-run")
    assert "would replay job" in capsys.readouterr().out
    assert Job.objects.get(pk=job.pk).status == "succeeded"
    # Running the applied start again would change nothing: it is not reported as replayed.
    with pytest.raises(CommandError):
        call_command("jobs_replay", "--id", str(job.pk), "--force", "--no-progress")
    captured = capsys.readouterr()
    assert f"job {job.pk}: no effect (its transition was applied" in captured.err
    assert "0 replayed, 0 refused, 1 with no effect" in captured.out
    assert Job.objects.get(pk=job.pk).status == "succeeded"
    assert InstanceTransition.objects.filter(instance_id=accepted["id"]).count() == 1
    call_command("jobs_list", "--kind", "transition")
    assert f"{job.pk}" in capsys.readouterr().out


def test_prune_keeps_failed_jobs(operator_client, flow):
    accept_start(operator_client)
    jobs_run_due()
    Job.objects.create(kind="timer", status="failed", last_error="x")
    old = timezone.now() - timedelta(days=30)
    Job.objects.update(updated_at=old)
    assert jobs_prune_finished() == 1
    assert list(Job.objects.values_list("status", flat=True)) == ["failed"]


def test_update_data_does_not_rearm_timers_but_a_self_transition_does(operator_client):
    document = timers_workflow()
    document["attributes"]["states"][0]["transitions"][1]["timer"]["code"] = (
        "def handler(context):\n    return 'PT1H'\n"
    )
    document["attributes"]["states"][0]["transitions"].append(transition("touch", "$self"))
    document["attributes"]["updateData"] = {
        "key": "update-data",
        "target": "$self",
        "triggerType": 0,
        "versionStrategy": "Patch",
        "labels": [{"label": "u", "language": "en"}],
    }
    publish(document)
    created = operator_client.post(f"{TIMERS}/start?sync=true", {}, format="json").json()
    url = f"{TIMERS}/{created['id']}/transitions"
    [armed] = Job.objects.filter(kind="timer")
    operator_client.patch(f"{url}/update-data?sync=true", {"x": 1}, format="json")
    assert list(Job.objects.filter(kind="timer").values_list("pk", "status")) == [
        (armed.pk, "pending")
    ]
    operator_client.patch(f"{url}/touch?sync=true", {}, format="json")
    timers = dict(Job.objects.filter(kind="timer").values_list("pk", "status"))
    assert timers.pop(armed.pk) == "cancelled"
    assert list(timers.values()) == ["pending"]


@pytest.mark.parametrize(
    ("mapping", "expected_minutes"),
    [
        (
            "from datetime import timedelta\n\n"
            "def handler(context):\n    return timedelta(minutes=5)\n",
            5,
        ),
        ("def handler(context):\n    raise ValueError('no calendar')\n", 60),
    ],
    ids=["mapping", "fallback-to-static"],
)
def test_workflow_timeout_mapping_and_its_static_fallback(
    operator_client, mapping, expected_minutes
):
    document = timers_workflow()
    document["attributes"]["timeout"]["mapping"] = {
        "location": "./src/Timeout.py",
        "code": mapping,
        "encoding": "NAT",
    }
    publish(document)
    created = operator_client.post(f"{TIMERS}/start?sync=true", {}, format="json")
    assert created.status_code == 200
    timeout = Job.objects.get(kind="timeout")
    delay = timeout.run_at - Instance.objects.get(pk=created.json()["id"]).created_at
    assert abs(delay.total_seconds() - expected_minutes * 60) < 5
