"""Human tasks (task type 5) end to end over HTTP on the configured database: a state whose
onEntries open a human task rests there with an inbox entry; the inbox shows it to the callers
its assignment names; claim, release and complete with form data run the state's manual
transition and write history rows; a refused completion leaves the task claimed; a task that
resolves to nobody fails with `Task:Human:Unassigned`, which an error boundary diverts; leaving
the state another way, or cancelling the instance, cancels the open entries."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from instances.engine.errors import VNextError
from instances.human_task_table import HumanTask, HumanTaskAssignee
from instances.models import Instance, InstanceTask
from tests.conftest import UserFactory
from tests.engine.builders import script, state, task_component, transition, workflow
from tests.instances.scenario_api import WorkflowApi
from workflows.models import WorkflowGrant
from workflows.services import component_publish

pytestmark = pytest.mark.django_db
INBOX = "/api/v1/core/functions/human-task"
FORM = {
    "type": "object",
    "required": ["approved"],
    "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
    "additionalProperties": False,
}
# The input handler may name the assignee from the data (`team`), else the config's stays.
ASSIGN_FROM_DATA = (
    "def input_handler(task, context):\n"
    "    team = context.instance.data.get('team')\n"
    "    return {'assignedTo': team} if team is not None else None\n"
)


def human_ref(mapping: str | None = None, boundary: dict[str, Any] | None = None) -> dict[str, Any]:
    reference: dict[str, Any] = {
        "order": 1,
        "task": {"key": "approve-loan", "domain": "core", "version": "1.0.0", "flow": "sys-tasks"},
    }
    if mapping:
        reference["mapping"] = script(mapping)
    if boundary:
        reference["errorBoundary"] = boundary
    return reference


def publish(assigned_to: str = "approvers, user:carol", workflow_key: str = "loan") -> None:
    component_publish(
        document=task_component(
            "approve-loan",
            "5",
            {
                "title": "Approve the loan",
                "instructions": "Check the amount",
                "assignedTo": assigned_to,
                "dueDate": "2030-01-01T09:00:00+00:00",
                "form": FORM,
            },
        )
    )
    boundary = {
        "onError": [
            {"action": 2, "errorCodes": ["Task:Human:Unassigned"], "transition": "unassigned"}
        ]
    }
    component_publish(
        document=workflow(
            [
                state("draft", 1, [transition("submit", "review")]),
                state(
                    "review",
                    2,
                    [
                        transition("decide", "decided"),
                        transition("withdraw", "withdrawn"),
                        transition("unassigned", "triage", trigger=0),
                    ],
                    subType=6,
                    onEntries=[human_ref(ASSIGN_FROM_DATA, boundary)],
                ),
                state("triage", 2),
                state("decided", 3, subType=1),
                state("withdrawn", 3, subType=3),
                state("cancelled", 3, subType=3),
            ],
            key=workflow_key,
            cancel={
                "key": "cancel",
                "target": "cancelled",
                "triggerType": 0,
                "versionStrategy": "Minor",
                "labels": [{"label": "x", "language": "en"}],
            },
        )
    )


def user_client(name: str, *groups: str, drive: bool = True) -> APIClient:
    user: Any = UserFactory(username=name)
    for group_name in groups:
        group, _ = Group.objects.get_or_create(name=group_name)
        user.groups.add(group)
    if drive:
        group, _ = Group.objects.get_or_create(name=f"drivers-{name}")
        WorkflowGrant.objects.create(
            group=group, domain="core", workflow="", read_instances=True, drive_instances=True
        )
        user.groups.add(group)
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def loan(operator_client: APIClient) -> WorkflowApi:
    publish()
    return WorkflowApi(operator_client, "loan")


def in_review(api: WorkflowApi, **data: Any) -> str:
    ref = api.started({"attributes": {"amount": 500, **data}})
    answer = api.fired(ref, "submit")
    assert answer["status"] == "A"
    return ref


def inbox(client: APIClient, **params: str) -> dict[str, Any]:
    response = client.get(INBOX, params)
    assert response.status_code == 200, response.json()
    body: dict[str, Any] = response.json()
    return body


def test_a_human_task_is_claimed_and_completed_with_form_data(loan: WorkflowApi):
    ref = in_review(loan)
    alice = user_client("alice", "approvers")
    bob = user_client("bob", "approvers")

    # The instance rests in its state; the inbox holds the task with its assignment.
    assert Instance.objects.get(pk=ref).current_state == "review"
    items = inbox(alice)["items"]
    assert len(items) == 1
    item = items[0]
    assert (item["instanceId"], item["state"], item["taskKey"], item["status"]) == (
        ref,
        "review",
        "approve-loan",
        "open",
    )
    assert item["assignedTo"] == {"roles": ["approvers"], "users": ["carol"]}
    assert (item["title"], item["dueDate"]) == ("Approve the loan", "2030-01-01T09:00:00+00:00")
    journal = InstanceTask.objects.get(instance_id=ref, task_key="approve-loan")
    response: Any = journal.response
    assert (journal.status, journal.phase, response["status_code"]) == (
        "succeeded",
        "onEntry",
        202,
    )
    assert response["data"]["humanTaskId"] == item["id"]

    url = f"{INBOX}/{item['id']}"
    claimed = alice.post(f"{url}/claim")
    assert claimed.status_code == 200, claimed.json()
    assert (claimed.json()["status"], claimed.json()["claimedBy"]) == ("claimed", "alice")
    lost = bob.post(f"{url}/claim")
    assert (lost.status_code, lost.json()["errorCode"]) == (409, "HumanTask:AlreadyClaimed")
    # Only the claimer completes (or releases) it.
    refused = bob.post(f"{url}/complete", {"data": {"approved": True}}, format="json")
    assert (refused.status_code, refused.json()["errorCode"]) == (409, "HumanTask:NotClaimer")
    assert bob.post(f"{url}/release").json()["errorCode"] == "HumanTask:NotClaimer"

    # Invalid form data: 400 with the pointers, the task stays claimed, the instance in place.
    invalid = alice.post(
        f"{url}/complete", {"transition": "decide", "data": {"note": 5}}, format="json"
    )
    assert (invalid.status_code, invalid.json()["errorCode"]) == (400, "HumanTask:InvalidForm")
    pointers = {e["pointer"] for e in invalid.json()["errors"]}
    assert pointers == {"/data/approved", "/data/note"}
    # Three manual transitions: the completion must name one.
    unnamed = alice.post(f"{url}/complete", {"data": {"approved": True}}, format="json")
    assert (unnamed.status_code, unnamed.json()["errorCode"]) == (400, "HumanTask:NoTransition")
    assert HumanTask.objects.get(pk=item["id"]).status == "claimed"

    done = alice.post(
        f"{url}/complete",
        {"transition": "decide", "data": {"approved": True, "note": "fine"}},
        format="json",
    )
    assert done.status_code == 200, done.json()
    assert done.json()["task"]["status"] == "completed"
    assert done.json()["task"]["completedBy"] == "alice"
    instance = Instance.objects.get(pk=ref)
    assert (instance.current_state, instance.status) == ("decided", "C")
    assert instance.data == {"amount": 500, "approved": True, "note": "fine"}
    row = HumanTask.objects.get(pk=item["id"])
    assert row.result == {"transition": "decide", "data": {"approved": True, "note": "fine"}}
    assert not HumanTaskAssignee.objects.filter(task=row).exists()
    assert inbox(alice)["items"] == []
    history = [(r["transitionKey"], r["fromState"], r["toState"]) for r in loan.transitions(ref)]
    assert ("human-task:claim", "review", "review") in history
    assert ("human-task:complete", "review", "review") in history
    assert history.index(("human-task:complete", "review", "review")) < history.index(
        ("decide", "review", "decided")
    )


def test_release_puts_a_task_back_and_the_next_claimer_completes_it(loan: WorkflowApi):
    ref = in_review(loan)
    alice = user_client("alice", "approvers")
    carol = user_client("carol")  # named by user, no role
    task_id = inbox(alice)["items"][0]["id"]
    url = f"{INBOX}/{task_id}"
    assert alice.post(f"{url}/claim").status_code == 200
    assert inbox(carol, claimed="true")["items"][0]["claimedBy"] == "alice"
    assert inbox(carol, claimed="false")["items"] == []
    assert inbox(alice, mine="true")["items"][0]["id"] == task_id

    released = alice.post(f"{url}/release")
    assert (released.status_code, released.json()["status"]) == (200, "open")
    assert carol.post(f"{url}/claim").json()["claimedBy"] == "carol"
    done = carol.post(
        f"{url}/complete", {"transition": "decide", "data": {"approved": False}}, format="json"
    )
    assert done.status_code == 200, done.json()
    assert Instance.objects.get(pk=ref).data["approved"] is False
    keys = [r["transitionKey"] for r in loan.transitions(ref)]
    assert keys.count("human-task:claim") == 2
    assert keys.count("human-task:release") == 1
    assert (
        loan.transitions(ref)[keys.index("human-task:release")]["transitionKey"]
        == "human-task:release"
    )


def test_a_caller_without_the_drive_grant_neither_claims_nor_completes(loan: WorkflowApi):
    ref = in_review(loan)
    # Assigned, but no grant to drive the workflow: neither claim nor complete, nothing changes.
    dave = user_client("dave", "approvers", drive=False)
    task_id = inbox(dave)["items"][0]["id"]
    refused = dave.post(f"{INBOX}/{task_id}/claim")
    assert (refused.status_code, refused.json()["errorCode"]) == (403, "Authorization:110001")
    assert HumanTask.objects.get(pk=task_id).status == "open"
    refused = dave.post(
        f"{INBOX}/{task_id}/complete",
        {"transition": "decide", "data": {"approved": True}},
        format="json",
    )
    assert (refused.status_code, refused.json()["errorCode"]) == (403, "Authorization:110001")
    assert HumanTask.objects.get(pk=task_id).status == "open"
    assert Instance.objects.get(pk=ref).current_state == "review"


def test_an_inbox_page_past_the_tenth_is_refused(loan: WorkflowApi):
    carol = user_client("carol")
    assert carol.get(INBOX, {"page": "10", "pageSize": "100"}).status_code == 200
    refused = carol.get(INBOX, {"page": "11", "pageSize": "100"})
    assert refused.status_code == 400
    assert refused.json()["errorCode"] == "App:900002"
    assert refused.json()["errors"][0]["pointer"] == "/page"


def test_a_task_assigned_to_nobody_fails_into_its_error_boundary(loan: WorkflowApi):
    ref = loan.started({"attributes": {"amount": 9, "team": ""}})
    answer = loan.fired(ref, "submit")

    # Task:Human:Unassigned, diverted by the boundary to its transition: no inbox entry.
    assert answer["status"] == "A"
    assert Instance.objects.get(pk=ref).current_state == "triage"
    journal = InstanceTask.objects.get(instance_id=ref, task_key="approve-loan")
    assert (journal.status, journal.error_code) == ("failed", "Task:Human:Unassigned")
    assert not HumanTask.objects.filter(instance_id=ref).exists()


def test_leaving_the_state_or_cancelling_cancels_the_open_task(loan: WorkflowApi):
    withdrawn = in_review(loan)
    cancelled = in_review(loan)
    alice = user_client("alice", "approvers")
    assert len(inbox(alice)["items"]) == 2
    claimed = HumanTask.objects.get(instance_id=cancelled)
    assert alice.post(f"{INBOX}/{claimed.pk}/claim").status_code == 200

    loan.fired(withdrawn, "withdraw")
    loan.fired(cancelled, "cancel")

    assert set(HumanTask.objects.values_list("status", flat=True)) == {"cancelled"}
    assert not HumanTaskAssignee.objects.exists()
    assert inbox(alice)["items"] == []
    late = alice.post(
        f"{INBOX}/{claimed.pk}/complete", {"transition": "decide", "data": {}}, format="json"
    )
    assert (late.status_code, late.json()["errorCode"]) == (409, "HumanTask:NotOpen")


def test_three_users_with_different_roles_see_exactly_their_tasks(operator_client: APIClient):
    publish()
    loan = WorkflowApi(operator_client, "loan")
    mine: dict[str, set[str]] = {"approvers": set(), "auditors": set(), "user:erin": set()}
    for team, count in (("approvers", 3), ("auditors", 2), ("user:erin", 2)):
        for _ in range(count):
            ref = in_review(loan, team=team)
            mine[team].add(str(HumanTask.objects.get(instance_id=ref).pk))
    both = in_review(loan, team="approvers, auditors")
    both_task = str(HumanTask.objects.get(instance_id=both).pk)
    alice = user_client("alice", "approvers")
    frank = user_client("frank", "auditors")
    erin = user_client("erin", "clerks")

    def ids(client: APIClient, **params: str) -> list[str]:
        return [item["id"] for item in inbox(client, **params)["items"]]

    assert set(ids(alice)) == mine["approvers"] | {both_task}
    assert set(ids(frank)) == mine["auditors"] | {both_task}
    assert set(ids(erin)) == mine["user:erin"]
    # Someone else's task is not found for them, let alone claimable.
    other = next(iter(mine["auditors"]))
    assert alice.get(f"{INBOX}/{other}").status_code == 404
    assert alice.post(f"{INBOX}/{other}/claim").json()["errorCode"] == "HumanTask:NotFound"
    # Paging: oldest first, stable, no duplicates across pages.
    first = inbox(alice, pageSize="2")
    second = inbox(alice, pageSize="2", page="2")
    assert first["hasNext"] is True
    assert second["hasNext"] is False
    paged = [i["id"] for i in first["items"] + second["items"]]
    ordered = list(
        HumanTask.objects.filter(pk__in=paged)
        .order_by("created_at", "id")
        .values_list("id", flat=True)
    )
    assert paged == [str(i) for i in ordered]
    assert len(set(paged)) == 4
    assert ids(alice, workflow="other") == []
    assert set(ids(alice, state="review")) == set(ids(alice))
    bad = alice.get(INBOX, {"claimed": "maybe"})
    assert bad.status_code == 400


def test_the_admin_lists_open_human_tasks_with_filters(loan: WorkflowApi, operator: Any):
    open_ref = in_review(loan)
    gone_ref = in_review(loan, team="auditors")
    loan.fired(gone_ref, "withdraw")
    url = reverse("admin:instances_humantask_changelist")
    admin_client = Client()
    admin_client.force_login(operator)

    default = admin_client.get(url)
    assert default.status_code == 200
    listed = {str(task.instance_id) for task in default.context["cl"].result_list}
    assert listed == {open_ref}
    everything = admin_client.get(url, {"state_of_task": "all"})
    assert {str(t.instance_id) for t in everything.context["cl"].result_list} == {
        open_ref,
        gone_ref,
    }
    cancelled = admin_client.get(url, {"state_of_task": "cancelled"})
    assert [str(t.instance_id) for t in cancelled.context["cl"].result_list] == [gone_ref]
    other = admin_client.get(url, {"workflow": "core/other"})
    assert list(other.context["cl"].result_list) == []
    found = admin_client.get(url, {"q": open_ref})
    assert [str(t.instance_id) for t in found.context["cl"].result_list] == [open_ref]
    task = HumanTask.objects.get(instance_id=open_ref)
    assert (
        admin_client.get(reverse("admin:instances_humantask_change", args=[task.pk])).status_code
        == 200
    )


def test_publish_refuses_the_human_task_fields_nothing_runs():
    document = task_component(
        "escalating",
        "5",
        {
            "title": "t",
            "instructions": "i",
            "assignedTo": "approvers",
            "reminderIntervalMinutes": 5,
            "escalationTimeoutMinutes": 60,
            "escalationAssignee": "managers",
            "dueDate": "next tuesday",
        },
    )
    with pytest.raises(VNextError) as refused:
        component_publish(document=document)
    pointers = {v.pointer for v in refused.value.violations}
    assert {
        "/attributes/config/reminderIntervalMinutes",
        "/attributes/config/escalationTimeoutMinutes",
        "/attributes/config/escalationAssignee",
        "/attributes/config/dueDate",
    } <= pointers


def test_publish_refuses_a_human_task_anywhere_but_a_states_on_entries():
    publish()
    on_transition = transition("decide", "decided")
    on_transition["onExecutionTasks"] = [human_ref(ASSIGN_FROM_DATA)]
    misplaced = workflow(
        [
            state("draft", 1, [transition("submit", "review")]),
            state("review", 2, [on_transition], onExits=[human_ref(ASSIGN_FROM_DATA)]),
            state("decided", 3, subType=1),
        ],
        key="loan-misplaced",
    )
    with pytest.raises(VNextError) as refused:
        component_publish(document=misplaced)
    reasons = {v.pointer: v.message for v in refused.value.violations}
    assert set(reasons) == {
        "/attributes/states/1/transitions/0/onExecutionTasks/0/task",
        "/attributes/states/1/onExits/0/task",
    }, reasons
    assert all("onEntries" in message for message in reasons.values())
