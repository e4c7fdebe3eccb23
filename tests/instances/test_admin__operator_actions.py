"""The instance admin's operator actions: retry, cancel, resolve without retry. Each confirms
first (what re-runs, which incident it resolves), then calls the same service as the API and
`instances_retry`, reports per instance and writes an audit row shown on the instance page.
Only the `instances.change_instance` permission (the `operators` group) unlocks them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from instances.job_table import Job
from instances.models import Incident, Instance, OperatorAction
from locks.models import ResourceLock
from tests.instances.operator_fixtures import (
    faulted_instance,
    publish_workflows,
    repair_outside,
    staff_operator,
    viewer,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _workflows() -> None:
    publish_workflows()


CHANGELIST = reverse("admin:instances_instance_changelist")


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def act(client: Client, action: str, *instances: Instance, **extra: str):
    data = {"action": action, "_selected_action": [str(i.pk) for i in instances], **extra}
    return client.post(CHANGELIST, data, follow="confirm" in extra)


def messages_of(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def test_retry_confirms_what_reruns_then_retries():
    broken, fixed = faulted_instance(), faulted_instance()
    repair_outside(fixed)
    client = client_for(staff_operator())

    page = act(client, "retry", broken, fixed)

    assert page.status_code == 200
    html = page.content.decode()
    assert html.count("compute from state ready at step ON_EXECUTE") == 2
    assert "Task:400008" in html
    assert "Faulted" in html

    done = act(client, "retry", broken, fixed, confirm="yes")

    assert done.status_code == 200
    reported = messages_of(done)
    assert f"{fixed.pk}: retried (status A)" in reported
    assert f"{broken.pk}: faulted again (Task:400008)" in reported
    row = Instance.objects.get(pk=fixed.pk)
    assert (row.status, row.current_state, row.data["quotient"]) == ("A", "working", 2.5)
    first = Incident.objects.filter(instance=fixed).get()
    assert (first.resolved, first.resolution, first.resolved_by) == (True, "retried", "ops")
    assert Instance.objects.get(pk=broken.pk).status == "F"
    audit = OperatorAction.objects.get(instance=fixed)
    assert (audit.actor, audit.action, audit.target, audit.outcome) == (
        "ops",
        "retry",
        "compute from state ready at step ON_EXECUTE",
        "retried (status A)",
    )
    assert OperatorAction.objects.get(instance=broken).outcome == "faulted again (Task:400008)"
    # The audit trail is on the instance page, and the page stays read-only.
    detail = client.get(reverse("admin:instances_instance_change", args=[fixed.pk]))
    assert "retried (status A)" in detail.content.decode()
    assert 'name="_save"' not in detail.content.decode()


def test_retry_lists_and_skips_what_is_not_faulted():
    faulted = faulted_instance()
    Instance.objects.filter(pk=faulted.pk).update(status="A")
    client = client_for(staff_operator())

    assert "not faulted, skipped" in act(client, "retry", faulted).content.decode()
    done = act(client, "retry", faulted, confirm="yes")

    assert messages_of(done) == [f"{faulted.pk}: skipped (not faulted)"]
    assert not OperatorAction.objects.exists()


def test_cancel_with_a_reason():
    faulted = faulted_instance()
    client = client_for(staff_operator())

    page = act(client, "cancel", faulted)
    assert 'name="reason"' in page.content.decode()
    done = act(client, "cancel", faulted, confirm="yes", reason="duplicate order")

    row = Instance.objects.get(pk=faulted.pk)
    assert (row.status, row.current_state) == ("C", "cancelled")
    assert Incident.objects.get(instance=faulted).resolution == "cancelled"
    audit = OperatorAction.objects.get(instance=faulted)
    assert (audit.action, audit.target) == ("cancel", "reason: duplicate order")
    assert audit.outcome.startswith("cancelled")
    assert messages_of(done)[0].startswith(f"{faulted.pk}: cancelled")


def test_cancel_is_refused_without_a_cancel_transition():
    faulted = faulted_instance("uncancellable")

    done = act(client_for(staff_operator()), "cancel", faulted, confirm="yes", reason="x")

    assert "refused (Transition:100004" in messages_of(done)[0]
    assert Instance.objects.get(pk=faulted.pk).status == "F"
    assert OperatorAction.objects.get(instance=faulted).outcome.startswith("refused")


def test_resolve_without_retry_leaves_the_instance_faulted():
    faulted = faulted_instance()
    client = client_for(staff_operator())

    assert (
        "does <strong>not</strong> change"
        in act(client, "resolve_incidents", faulted).content.decode()
    )
    done = act(client, "resolve_incidents", faulted, confirm="yes")

    incident = Incident.objects.get(instance=faulted)
    assert (incident.resolved, incident.resolution, incident.resolved_by) == (
        True,
        "resolved by operator",
        "ops",
    )
    assert incident.resolved_at is not None
    assert Instance.objects.get(pk=faulted.pk).status == "F"
    audit = OperatorAction.objects.get(instance=faulted)
    assert (audit.action, audit.target) == ("resolve", "Task:400008")
    assert messages_of(done) == [f"{faulted.pk}: resolved (1 incident(s); status unchanged)"]


def test_a_viewer_sees_no_actions_and_gets_403():
    faulted = faulted_instance()
    client = client_for(viewer())

    listing = client.get(CHANGELIST)

    assert listing.status_code == 200
    assert str(faulted.pk) in listing.content.decode()
    assert 'name="action"' not in listing.content.decode()
    for action in ("retry", "cancel", "resolve_incidents"):
        assert act(client, action, faulted, confirm="yes", reason="x").status_code == 403
    detail = client.get(reverse("admin:instances_instance_change", args=[faulted.pk]))
    assert detail.status_code == 200
    assert Instance.objects.get(pk=faulted.pk).status == "F"
    assert not Incident.objects.get(instance=faulted).resolved
    assert not OperatorAction.objects.exists()


def test_job_replay_and_lock_force_release_need_the_change_permission():
    faulted = faulted_instance()
    job = Job.objects.create(kind="timer", instance=faulted, status="failed", state="ready")
    lock = ResourceLock.objects.create(
        key="account:1", owner=faulted.pk, expires_at=timezone.now() + timedelta(hours=1)
    )
    looker = viewer()
    looker.user_permissions.add(
        Permission.objects.get(content_type__app_label="instances", codename="view_job"),
        Permission.objects.get(content_type__app_label="locks", codename="view_resourcelock"),
    )
    as_viewer, as_operator = client_for(looker), client_for(staff_operator())
    jobs = reverse("admin:instances_job_changelist")
    locks = reverse("admin:locks_resourcelock_changelist")

    assert 'name="action"' not in as_viewer.get(jobs).content.decode()
    assert 'name="action"' not in as_viewer.get(locks).content.decode()
    replay = {"action": "replay", "_selected_action": [str(job.pk)]}
    release = {"action": "force_release", "_selected_action": [str(lock.pk)]}
    assert as_viewer.post(jobs, replay).status_code == 403
    assert as_viewer.post(locks, release).status_code == 403
    assert Job.objects.get(pk=job.pk).status == "failed"
    assert ResourceLock.objects.filter(pk=lock.pk).exists()

    assert 'name="action"' in as_operator.get(jobs).content.decode()
    as_operator.post(locks, release)
    assert not ResourceLock.objects.filter(pk=lock.pk).exists()
