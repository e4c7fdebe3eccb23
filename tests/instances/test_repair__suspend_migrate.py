"""Operators repair running instances through the API: suspend and resume (a timer that comes due
while suspended waits, then fires on resume), and migrate to another published version (state
kept or mapped, data and its version kept, timers kept, cancelled or armed as the target says,
refusals with their codes, a dry run that changes nothing). Every action is audited with its
actor and channel."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone
from rest_framework.test import APIClient

from instances.job_handlers import jobs_run_due
from instances.job_table import Job
from instances.models import Instance, InstanceTransition, OperatorAction
from tests.conftest import UserFactory
from tests.engine.builders import script, state, transition, workflow
from tests.instances.workflows import CANCEL, publish
from workflows.models import WorkflowGrant

BASE = "/api/v1/core/workflows/reminders/instances"
HOUR = script("def handler(context):\n    return 'PT1H'\n")
DAY = script("def handler(context):\n    return 'P1D'\n")


def reminders(version: str = "1.0.0", **changes: Any) -> dict[str, Any]:
    """`waiting --remind (timer, 1 h)--> reminded`, `waiting --approve--> approved`."""
    document = workflow(
        [
            state(
                "waiting",
                1,
                [
                    transition("approve", "approved"),
                    transition("remind", "reminded", 2, timer=HOUR),
                ],
            ),
            state("reminded", 2, [transition("approve", "approved")]),
            state("approved", 3, subType=1),
            state("cancelled", 3, subType=3),
        ],
        key="reminders",
        cancel=CANCEL,
    )
    document["version"] = version
    for name, value in changes.items():
        document["attributes"][name] = value
    return document


def started(client: APIClient, data: dict[str, Any] | None = None) -> str:
    response = client.post(f"{BASE}/start?sync=true", {"attributes": data or {}}, format="json")
    assert response.status_code == 200, response.json()
    return str(response.json()["id"])


def timers(instance_id: str) -> list[Job]:
    return list(Job.objects.filter(instance_id=instance_id, kind="timer").order_by("pk"))


def come_due(instance_id: str) -> None:
    """The clock moves past the instance's timers."""
    Job.objects.filter(instance_id=instance_id, kind="timer").update(
        run_at=timezone.now() - timedelta(seconds=1)
    )


def audit(instance_id: str) -> list[tuple[str, str, str]]:
    rows = OperatorAction.objects.filter(instance_id=instance_id).order_by("created_at", "pk")
    return [(row.action, row.channel, row.actor) for row in rows]


# --- suspend / resume ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_suspended_instance_refuses_transitions_and_its_due_timer_fires_on_resume(
    operator_client,
):
    publish(reminders())
    instance_id = started(operator_client)
    assert [job.status for job in timers(instance_id)] == ["pending"]
    Instance.objects.filter(pk=instance_id).update(modified_by="clerk")  # the last business actor

    suspended = operator_client.post(
        f"{BASE}/{instance_id}/suspend", {"reason": "customer on hold"}, format="json"
    )

    assert suspended.status_code == 200, suspended.json()
    assert suspended.json()["status"] == "P"
    assert [job.status for job in timers(instance_id)] == ["held"]
    refused = operator_client.patch(
        f"{BASE}/{instance_id}/transitions/approve?sync=true", {}, format="json"
    )
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "Instance:100029")
    state_function = operator_client.get(f"{BASE}/{instance_id}/functions/state").json()
    assert state_function["status"] == "P"

    come_due(instance_id)
    jobs_run_due()  # the timer came due while suspended: nothing moves
    row = Instance.objects.get(pk=instance_id)
    assert (row.status, row.current_state) == ("P", "waiting")
    assert [job.status for job in timers(instance_id)] == ["held"]

    resumed = operator_client.post(f"{BASE}/{instance_id}/resume", {}, format="json")

    assert resumed.status_code == 200, resumed.json()
    assert resumed.json()["status"] == "A"
    # $PreviousUser is still the last business actor, not the operator.
    assert Instance.objects.get(pk=instance_id).modified_by == "clerk"
    jobs_run_due()
    row = Instance.objects.get(pk=instance_id)
    assert (row.status, row.current_state) == ("A", "reminded")
    keys = list(
        InstanceTransition.objects.filter(instance_id=instance_id)
        .order_by("started_at")
        .values_list("transition_key", flat=True)
    )
    assert keys == ["start", "operator:suspend", "operator:resume", "remind"]
    assert audit(instance_id) == [
        ("suspend", "api", "operator"),
        ("resume", "api", "operator"),
    ]


@pytest.mark.django_db
def test_a_timer_not_due_while_suspended_keeps_its_time_after_resume(operator_client):
    publish(reminders())
    instance_id = started(operator_client)
    due = timers(instance_id)[0].run_at
    operator_client.post(f"{BASE}/{instance_id}/suspend", {}, format="json")
    operator_client.post(f"{BASE}/{instance_id}/resume", {}, format="json")

    jobs_run_due()

    (timer,) = timers(instance_id)
    assert (timer.status, timer.run_at) == ("pending", due)
    assert Instance.objects.get(pk=instance_id).current_state == "waiting"


@pytest.mark.django_db
def test_suspend_and_resume_refuse_what_they_cannot_do_with_their_codes(operator_client):
    publish(reminders())
    instance_id = started(operator_client)

    not_suspended = operator_client.post(f"{BASE}/{instance_id}/resume", {}, format="json")
    assert (not_suspended.status_code, not_suspended.json()["error"]["code"]) == (
        409,
        "Instance:NotSuspended",
    )
    operator_client.post(f"{BASE}/{instance_id}/suspend", {}, format="json")
    twice = operator_client.post(f"{BASE}/{instance_id}/suspend", {}, format="json")
    assert (twice.status_code, twice.json()["error"]["code"]) == (409, "Instance:NotSuspendable")
    retry = operator_client.post(f"{BASE}/{instance_id}/retry?sync=true", {}, format="json")
    assert (retry.status_code, retry.json()["error"]["code"]) == (400, "Instance:100027")
    bad_reason = operator_client.post(f"{BASE}/{instance_id}/resume", {"reason": 5}, format="json")
    assert bad_reason.status_code == 400
    assert bad_reason.json()["errors"][0]["pointer"] == "/reason"
    assert Instance.objects.get(pk=instance_id).status == "P"


@pytest.mark.django_db
def test_a_suspended_instance_can_still_be_cancelled(operator_client):
    publish(reminders())
    instance_id = started(operator_client)
    operator_client.post(f"{BASE}/{instance_id}/suspend", {}, format="json")

    cancelled = operator_client.patch(
        f"{BASE}/{instance_id}/transitions/cancel?sync=true", {}, format="json"
    )

    assert cancelled.status_code == 200, cancelled.json()
    row = Instance.objects.get(pk=instance_id)
    assert (row.status, row.current_state) == ("C", "cancelled")
    assert [job.status for job in timers(instance_id)] == ["cancelled"]


# --- migrate -------------------------------------------------------------------------------------


def fixed_version() -> dict[str, Any]:
    """1.1.0: `waiting` is renamed `pending`; its reminder is gone, an escalation (1 day) is new."""
    document = reminders("1.1.0")
    states = document["attributes"]["states"]
    states[0] = state(
        "pending",
        1,
        [
            transition("approve", "approved"),
            transition("escalate", "reminded", 2, timer=DAY),
        ],
    )
    document["attributes"]["startTransition"]["target"] = "pending"
    return document


@pytest.mark.django_db
def test_migrate_maps_the_state_keeps_the_data_and_follows_the_target_timers(operator_client):
    publish(reminders())
    instance_id = started(operator_client, {"amount": 250})
    before = Instance.objects.get(pk=instance_id)
    publish(fixed_version())
    body = {"targetVersion": "1.1.0", "stateMapping": {"waiting": "pending"}}

    dry = operator_client.post(f"{BASE}/{instance_id}/migrate?dryRun=true", body, format="json")

    assert dry.status_code == 200, dry.json()
    report = dry.json()
    assert (report["dryRun"], report["toState"], report["refused"]) == (True, "pending", None)
    assert {(t["transition"], t["action"]) for t in report["timers"]} == {
        ("remind", "cancelled"),
        ("escalate", "armed"),
    }
    unchanged = Instance.objects.get(pk=instance_id)
    assert (unchanged.workflow_version, unchanged.current_state) == ("1.0.0", "waiting")
    assert [job.status for job in timers(instance_id)] == ["pending"]

    migrated = operator_client.post(f"{BASE}/{instance_id}/migrate", body, format="json")

    assert migrated.status_code == 200, migrated.json()
    row = Instance.objects.get(pk=instance_id)
    assert (row.workflow_version, row.current_state, row.status) == ("1.1.0", "pending", "A")
    assert row.data == {"amount": 250}
    assert (row.data_version_major, row.data_version_minor, row.data_version_patch) == (
        before.data_version_major,
        before.data_version_minor,
        before.data_version_patch,
    )
    remind, escalate = timers(instance_id)
    assert (remind.status, remind.payload["transition"]) == ("cancelled", "remind")
    assert (escalate.status, escalate.state, escalate.payload["transition"]) == (
        "pending",
        "pending",
        "escalate",
    )
    assert escalate.run_at - timezone.now() > timedelta(hours=23)
    history = InstanceTransition.objects.get(
        instance_id=instance_id, transition_key="operator:migrate"
    )
    assert (history.from_state, history.to_state, history.actor) == (
        "waiting",
        "pending",
        "operator",
    )
    assert history.body["fromVersion"] == "1.0.0"
    assert audit(instance_id) == [("migrate", "api", "operator")]
    # It runs on the new version now.
    approved = operator_client.patch(
        f"{BASE}/{instance_id}/transitions/approve?sync=true", {}, format="json"
    )
    assert approved.status_code == 200, approved.json()
    assert Instance.objects.get(pk=instance_id).current_state == "approved"


@pytest.mark.django_db
def test_a_timer_whose_transition_stays_keeps_its_due_time(operator_client):
    publish(reminders())
    instance_id = started(operator_client)
    due = timers(instance_id)[0].run_at
    publish(reminders("1.0.1"))

    response = operator_client.post(
        f"{BASE}/{instance_id}/migrate", {"targetVersion": "1.0.1"}, format="json"
    )

    assert response.status_code == 200, response.json()
    assert [(t["transition"], t["action"]) for t in response.json()["timers"]] == [
        ("remind", "kept")
    ]
    (timer,) = timers(instance_id)
    assert (timer.status, timer.run_at) == ("pending", due)
    come_due(instance_id)
    jobs_run_due()
    assert Instance.objects.get(pk=instance_id).current_state == "reminded"


@pytest.mark.django_db
def test_migrate_refuses_unsafe_moves_with_their_codes_and_changes_nothing(operator_client):
    publish(reminders())
    instance_id = started(operator_client)
    publish(fixed_version())

    def migrate(body: dict[str, Any]) -> tuple[int, str]:
        response = operator_client.post(f"{BASE}/{instance_id}/migrate", body, format="json")
        return response.status_code, response.json()["error"]["code"]

    assert migrate({"targetVersion": "1.1.0"}) == (409, "Migration:StateUnmapped")
    assert migrate({"targetVersion": "1.1.0", "stateMapping": {"waiting": "nowhere"}}) == (
        400,
        "Migration:InvalidMapping",
    )
    assert migrate({"targetVersion": "9.9.9"}) == (404, "Migration:TargetNotFound")
    assert migrate({"targetVersion": "1.0.0"}) == (400, "Migration:SameVersion")
    assert migrate({}) == (400, "App:900002")
    final = {"targetVersion": "1.1.0", "stateMapping": {"waiting": "approved"}}
    assert migrate(final) == (409, "Migration:StateUnmapped")
    Instance.objects.filter(pk=instance_id).update(status="B", busy_owner="someone")
    assert migrate({"targetVersion": "1.1.0", "stateMapping": {"waiting": "pending"}}) == (
        409,
        "Migration:InstanceNotMigratable",
    )
    row = Instance.objects.get(pk=instance_id)
    assert (row.workflow_version, row.current_state) == ("1.0.0", "waiting")
    assert [job.status for job in timers(instance_id)] == ["pending"]
    assert not OperatorAction.objects.filter(instance_id=instance_id).exists()


@pytest.mark.django_db
def test_a_dry_run_reports_a_refusal_instead_of_raising_it(operator_client):
    publish(reminders())
    instance_id = started(operator_client)
    publish(fixed_version())

    response = operator_client.post(
        f"{BASE}/{instance_id}/migrate?dryRun=true", {"targetVersion": "1.1.0"}, format="json"
    )

    assert response.status_code == 200
    assert response.json()["refused"]["code"] == "Migration:StateUnmapped"


@pytest.mark.django_db
def test_migrating_a_suspended_instance_holds_the_timers_it_arms(operator_client):
    publish(reminders())
    instance_id = started(operator_client)
    publish(fixed_version())
    operator_client.post(f"{BASE}/{instance_id}/suspend", {}, format="json")

    response = operator_client.post(
        f"{BASE}/{instance_id}/migrate",
        {"targetVersion": "1.1.0", "stateMapping": {"waiting": "pending"}},
        format="json",
    )

    assert response.status_code == 200, response.json()
    assert [job.status for job in timers(instance_id)] == ["cancelled", "held"]
    assert Instance.objects.get(pk=instance_id).status == "P"


# --- grants --------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_migrate_and_batches_need_the_operator_grant_suspend_needs_drive(operator_client):
    publish(reminders())
    instance_id = started(operator_client)
    publish(reminders("1.0.1"))
    group = Group.objects.create(name="backoffice")
    grant = WorkflowGrant.objects.create(
        group=group, domain="core", workflow="reminders", read_instances=True, drive_instances=True
    )
    user: Any = UserFactory()
    user.groups.add(group)
    client = APIClient()
    client.force_authenticate(user)

    migrate = client.post(
        f"{BASE}/{instance_id}/migrate", {"targetVersion": "1.0.1"}, format="json"
    )
    batch = client.post(
        "/api/v1/core/workflows/reminders/batches",
        {"operation": "suspend", "filter": []},
        format="json",
    )
    suspend = client.post(f"{BASE}/{instance_id}/suspend", {}, format="json")

    assert (migrate.status_code, batch.status_code, suspend.status_code) == (403, 403, 200)
    grant.operate_instances = True
    grant.save()
    user = type(user).objects.get(pk=user.pk)
    client.force_authenticate(user)
    migrated = client.post(
        f"{BASE}/{instance_id}/migrate", {"targetVersion": "1.0.1"}, format="json"
    )
    assert migrated.status_code == 200, migrated.json()
    assert audit(instance_id)[-1] == ("migrate", "api", user.username)
