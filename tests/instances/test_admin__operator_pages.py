"""The inspector's operator buttons and the list's suspend, resume and migrate actions: each a
POST that calls the API's service in the staff user's name through the `admin` channel (the
audit row says so), operators only (view-only staff see no button and get 403). The retry's
editor checks the correction against the faulted transition's schema; the Batches admin shows
a batch's progress and cancels it."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from instances.batches import batch_create, batch_request, batch_work
from instances.models import Batch, Instance, OperatorAction
from instances.repair import Actor
from instances.services import RequestInfo, instance_start
from tests.engine.builders import state, transition, workflow
from tests.instances.operator_fixtures import (
    DIVIDE,
    faulted_instance,
    fixable,
    publish_workflows,
    staff_operator,
    viewer,
)
from tests.instances.workflows import CANCEL, publish
from workflows.services import component_publish

pytestmark = pytest.mark.django_db

DIVISOR = {
    "key": "divisor-input",
    "domain": "core",
    "version": "1.0.0",
    "flow": "sys-schemas",
    "flowVersion": "1.0.0",
    "tags": ["test"],
    "attributes": {
        "type": "schema",
        "schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"divisor": {"type": "number", "exclusiveMinimum": 0}},
        },
    },
}
DIVISOR_REF = {"key": "divisor-input", "domain": "core", "version": "1.0.0", "flow": "sys-schemas"}


def checked() -> dict[str, Any]:
    """`fixable`, but `compute` validates its body against the divisor schema."""
    return workflow(
        [
            state(
                "ready",
                1,
                [transition("compute", "working", onExecutionTasks=[DIVIDE], schema=DIVISOR_REF)],
            ),
            state("working", 2, [transition("finish", "done")]),
            state("done", 3, subType=1),
            state("cancelled", 3, subType=3),
        ],
        key="checked",
        cancel=CANCEL,
    )


@pytest.fixture(autouse=True)
def _workflows() -> None:
    publish_workflows()


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def url(name: str, instance: Instance) -> str:
    return reverse(f"admin:instances_instance_{name}", args=[instance.pk])


def audit(instance: Instance) -> OperatorAction:
    return OperatorAction.objects.filter(instance=instance).latest("created_at")


def active_instance() -> Instance:
    started = instance_start(domain="core", workflow="fixable", body={}, info=RequestInfo())
    return Instance.objects.get(pk=started.instance.id)


def test_the_inspector_shows_an_operator_the_buttons_of_the_status():
    broken = faulted_instance()
    page = client_for(staff_operator()).get(url("change", broken)).content.decode()

    assert 'id="vnext-operator"' in page
    assert 'name="correction"' in page
    assert ">{}</textarea>" in page
    assert 'id="vnext-cancel"' in page
    assert 'id="vnext-suspend"' not in page  # a Faulted instance is not suspended


def test_view_only_staff_see_no_button_and_get_403_on_every_post():
    broken, running = faulted_instance(), active_instance()
    client = client_for(viewer())

    page = client.get(url("change", broken)).content.decode()

    assert 'id="vnext-operator"' not in page
    for name, instance, data in (
        ("retry", broken, {"correction": "{}"}),
        ("cancel", broken, {"reason": "x"}),
        ("suspend", running, {}),
        ("resume", running, {}),
        ("migrate", running, {"target_version": "1.0.1", "dry_run": "1"}),
    ):
        assert client.post(url(name, instance), data).status_code == 403, name
        assert client.get(url(name, instance)).status_code == 403, name
    assert not OperatorAction.objects.exists()
    assert Instance.objects.get(pk=broken.pk).status == "F"


def test_retry_with_corrected_data_is_audited_with_the_admin_channel():
    broken = faulted_instance()
    client = client_for(staff_operator())

    done = client.post(url("retry", broken), {"correction": '{"divisor": 4}'}, follow=True)

    assert done.status_code == 200
    row = Instance.objects.get(pk=broken.pk)
    assert (row.status, row.current_state, row.data["divisor"]) == ("A", "working", 4)
    action = audit(broken)
    assert (action.actor, action.channel, action.action) == ("ops", "admin", "retry")
    assert "corrected divisor" in action.target
    assert f"{broken.pk}: retried (status A)" in [str(m) for m in done.context["messages"]]
    # The audit list on the page has the channel column.
    assert "field-channel" in done.content.decode()


def test_retry_refuses_text_that_is_not_a_json_object_and_keeps_it():
    broken = faulted_instance()
    client = client_for(staff_operator())

    for text in ('{"divisor": 4', "[4]", "null"):
        page = client.post(url("retry", broken), {"correction": text})
        assert page.status_code == 400
        html = page.content.decode()
        assert 'id="vnext-operate-errors"' in html
        assert text.replace('"', "&quot;") in html
    assert Instance.objects.get(pk=broken.pk).status == "F"
    assert not OperatorAction.objects.exists()


def test_retry_checks_the_correction_against_the_faulted_transitions_schema():
    component_publish(document=DIVISOR)
    publish(checked())
    broken = faulted_instance("checked")
    client = client_for(staff_operator())

    page = client.post(url("retry", broken), {"correction": '{"divisor": "four"}'})

    assert page.status_code == 400
    html = page.content.decode()
    assert "<code>/divisor</code>" in html
    assert "is not of type" in html
    assert "{&quot;divisor&quot;: &quot;four&quot;}</textarea>" in html  # the text is kept
    assert Instance.objects.get(pk=broken.pk).status == "F"
    assert not OperatorAction.objects.exists()

    client.post(url("retry", broken), {"correction": '{"divisor": 5}'})

    assert Instance.objects.get(pk=broken.pk).current_state == "working"
    assert audit(broken).channel == "admin"


def test_cancel_needs_a_reason_then_runs_the_workflows_cancel():
    broken = faulted_instance()
    client = client_for(staff_operator())

    assert client.post(url("cancel", broken), {"reason": " "}).status_code == 400
    client.post(url("cancel", broken), {"reason": "customer left"})

    row = Instance.objects.get(pk=broken.pk)
    assert (row.status, row.current_state) == ("C", "cancelled")
    action = audit(broken)
    assert (action.action, action.channel, action.target) == (
        "cancel",
        "admin",
        "reason: customer left",
    )


def test_suspend_then_resume_from_the_inspector():
    running = active_instance()
    client = client_for(staff_operator())
    assert 'id="vnext-suspend"' in client.get(url("change", running)).content.decode()

    client.post(url("suspend", running))

    assert Instance.objects.get(pk=running.pk).status == "P"
    assert (audit(running).action, audit(running).channel, audit(running).actor) == (
        "suspend",
        "admin",
        "ops",
    )
    page = client.get(url("change", running)).content.decode()
    assert 'id="vnext-resume"' in page
    assert 'id="vnext-suspend"' not in page

    again = client.post(url("suspend", running), follow=True)  # refused: suspended already
    assert any("Instance:NotSuspendable" in str(m) for m in again.context["messages"])

    client.post(url("resume", running))

    assert Instance.objects.get(pk=running.pk).status == "A"
    assert audit(running).action == "resume"


def newer_fixable() -> None:
    document = fixable()
    document["version"] = "1.0.1"
    publish(document)


def test_migrate_lists_the_other_versions_dry_runs_then_applies():
    running = active_instance()
    newer_fixable()
    client = client_for(staff_operator())

    form = client.get(url("migrate", running)).content.decode()
    assert '<option value="1.0.1" selected>' in form
    assert '<option value="1.0.0"' not in form  # its own version

    dry = client.post(url("migrate", running), {"target_version": "1.0.1", "dry_run": "Dry run"})

    html = dry.content.decode()
    assert 'class="vnext-to-state">ready</strong>' in html
    assert 'name="apply"' in html
    assert Instance.objects.get(pk=running.pk).workflow_version == "1.0.0"
    assert not OperatorAction.objects.exists()

    client.post(url("migrate", running), {"target_version": "1.0.1", "apply": "Migrate"})

    assert Instance.objects.get(pk=running.pk).workflow_version == "1.0.1"
    assert (audit(running).action, audit(running).channel) == ("migrate", "admin")


def test_a_migration_dry_run_shows_the_refusal_and_a_bad_mapping_line():
    running = active_instance()
    newer_fixable()
    client = client_for(staff_operator())

    refused = client.post(
        url("migrate", running),
        {"target_version": "1.0.1", "state_mapping": "ready=nowhere", "dry_run": "1"},
    )
    html = refused.content.decode()
    assert "Migration:" in html
    assert 'name="apply"' not in html
    bad = client.post(
        url("migrate", running),
        {"target_version": "1.0.1", "state_mapping": "ready", "dry_run": "1"},
    )
    assert bad.status_code == 400
    assert "not old=new: ready" in bad.content.decode()


CHANGELIST = reverse("admin:instances_instance_changelist")


def act(client: Client, action: str, *instances: Instance, **extra: str) -> Any:
    data = {"action": action, "_selected_action": [str(i.pk) for i in instances], **extra}
    return client.post(CHANGELIST, data, follow="confirm" in extra)


def test_list_suspend_and_resume_confirm_then_report_each_row():
    running, broken = active_instance(), faulted_instance()
    client = client_for(staff_operator())

    page = act(client, "suspend", running, broken)
    assert page.status_code == 200
    assert "Suspend: are you sure?" in page.content.decode()

    done = act(client, "suspend", running, broken, confirm="yes")

    reported = [str(m) for m in done.context["messages"]]
    assert f"{running.pk}: suspended (status P)" in reported
    assert any(m.startswith(f"{broken.pk}: refused (Instance:NotSuspendable") for m in reported)
    assert audit(running).channel == "admin"

    act(client, "resume", running, confirm="yes")
    assert Instance.objects.get(pk=running.pk).status == "A"


def test_list_migrate_shows_each_dry_run_then_applies():
    first, second = active_instance(), active_instance()
    newer_fixable()
    client = client_for(staff_operator())

    chooser = act(client, "migrate", first, second).content.decode()
    assert '<option value="1.0.1"' in chooser

    dry = act(client, "migrate", first, second, target_version="1.0.1").content.decode()
    assert dry.count('class="vnext-to-state">ready</strong>') == 2
    assert 'name="confirm" value="yes"' in dry
    assert Instance.objects.filter(workflow_version="1.0.1").count() == 0

    done = act(client, "migrate", first, second, target_version="1.0.1", confirm="yes")

    assert Instance.objects.filter(workflow_version="1.0.1").count() == 2
    assert any(
        str(m).endswith("1.0.0 -> 1.0.1, state ready -> ready)") for m in done.context["messages"]
    )


def test_list_actions_are_403_for_view_only_staff():
    running = active_instance()
    client = client_for(viewer())
    for action in ("suspend", "resume", "migrate"):
        assert act(client, action, running).status_code == 403


def test_the_diagram_marks_the_state_of_an_open_incident():
    broken = faulted_instance()
    page = client_for(staff_operator()).get(url("change", broken)).content.decode()
    assert 'class="vnext-incident ' in page
    assert "(open incident Task:400008)" in page
    assert 'class="vnext-incident-badge"' in page


def a_batch(size: int = 5) -> Batch:
    for _ in range(size):
        active_instance()
    return batch_create(
        domain="core",
        workflow="fixable",
        request=batch_request({"operation": "suspend", "filter": []}),
        actor=Actor("ops"),
        visible=None,
        roles=frozenset(),
    )


def test_the_batches_admin_shows_progress_items_and_cancels():
    batch = a_batch()
    batch_work(batch.pk, chunk=2)
    client = client_for(staff_operator())

    listing = client.get(reverse("admin:instances_batch_changelist")).content.decode()
    assert '<progress class="vnext-batch-progress" value="2" max="5"' in listing
    page = client.get(reverse("admin:instances_batch_change", args=[batch.pk])).content.decode()
    assert 'value="2" max="5"' in page
    assert "pending <strong>3</strong>" in page
    assert page.count('class="outcome-done"') == 2
    assert page.count('class="outcome-pending"') == 3
    done_only = client.get(
        reverse("admin:instances_batch_change", args=[batch.pk]) + "?outcome=done"
    ).content.decode()
    assert done_only.count('class="outcome-pending"') == 0
    assert 'id="vnext-batch-cancel"' in page

    client.post(reverse("admin:instances_batch_cancel", args=[batch.pk]))

    batch.refresh_from_db()
    assert batch.status == "cancelled"
    cancelled = OperatorAction.objects.filter(action="batch").latest("created_at")
    assert (cancelled.channel, cancelled.actor) == ("admin", "ops")


def test_view_only_staff_see_batches_but_cannot_cancel_one():
    batch = a_batch(2)
    client = client_for(viewer())

    page = client.get(reverse("admin:instances_batch_change", args=[batch.pk]))
    assert page.status_code == 200
    assert 'id="vnext-batch-cancel"' not in page.content.decode()
    assert client.post(reverse("admin:instances_batch_cancel", args=[batch.pk])).status_code == 403
    batch.refresh_from_db()
    assert batch.status == "running"


def test_run_a_batch_over_the_lists_filter():
    running = [active_instance() for _ in range(3)]
    faulted_instance()
    client = client_for(staff_operator())
    filtered = CHANGELIST + "?workflow=core/fixable&status__exact=A"
    data = {"action": "run_batch", "_selected_action": [str(running[0].pk)]}

    chooser = client.post(filtered, data).content.decode()
    assert "status=eq:A" in chooser
    counted = client.post(filtered, {**data, "operation": "suspend", "reason": "maintenance"})
    assert '<strong id="vnext-batch-total">3</strong>' in counted.content.decode()
    assert not Batch.objects.exists()

    created = client.post(
        filtered, {**data, "operation": "suspend", "reason": "maintenance", "confirm": "yes"}
    )

    batch = Batch.objects.get()
    assert created["Location"] == reverse("admin:instances_batch_change", args=[batch.pk])
    assert (batch.total, batch.operation, batch.channel, batch.created_by) == (
        3,
        "suspend",
        "admin",
        "ops",
    )
    assert batch.filter == ["status=eq:A"]


def test_a_batch_needs_one_workflow_and_translatable_filters():
    running = active_instance()
    client = client_for(staff_operator())
    data = {"action": "run_batch", "_selected_action": [str(running.pk)], "operation": "suspend"}

    page = client.post(CHANGELIST, data).content.decode()
    assert "filter the list by one workflow first" in page
    other = client.post(CHANGELIST + "?workflow=core/fixable&open_incident=yes", data)
    assert "remove open_incident" in other.content.decode()
    assert not Batch.objects.exists()
    assert client_for(viewer()).post(CHANGELIST, data).status_code == 403
