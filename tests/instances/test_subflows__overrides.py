"""SubFlow overrides (seed 001 SubFlow state, vnext-schema `subFlowOverrides`): the child a
SubFlow state starts runs under its parent's `viewOverrides` / `overrides.views` (the view
function and the state function's view block answer the replacement view), `overrides.transitions`
(the roles firing a transition needs: 403 `Transition:100010`, the offered transitions,
`authorize`) and `overrides.states` (the query roles reading it: 403 `Authorization:110001`,
listings). The overrides are pinned in the child at its start: a later publish of the parent
changes no running child, and a child started on its own has none."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from instances.models import Instance
from tests.engine.builders import script, state, transition, workflow
from tests.instances.workflows import publish
from workflows.models import WorkflowGrant
from workflows.services import component_publish

pytestmark = pytest.mark.django_db

PARENT = "/api/v1/core/workflows/ov-parent/instances"
CHILD = "/api/v1/core/workflows/ov-child/instances"
READERS = [{"role": "parent.agent", "grant": "allow"}]
AGENTS = [*READERS, {"role": "parent.intern", "grant": "deny"}]


def view(key: str) -> dict[str, Any]:
    return {
        "key": key,
        "domain": "core",
        "version": "1.0.0",
        "flow": "sys-views",
        "flowVersion": "1.0.0",
        "tags": ["test"],
        "attributes": {
            "type": 1,
            "content": {"screen": key},
            "labels": [{"label": key, "language": "en-US"}],
        },
    }


def ref(key: str) -> dict[str, str]:
    return {"key": key, "domain": "core", "version": "1.0.0", "flow": "sys-views"}


VIEWS = [
    view(key)
    for key in (
        "child-form-view",
        "child-check-view",
        "child-vip-view",
        "parent-form-view",
        "parent-check-view",
        "parent-form-view-2",
    )
]
VIP = script('def handler(context):\n    return get(context.instance.data, "vip", False)\n')


def child_flow() -> dict[str, Any]:
    """fill (readers; send for senders) -> check (a conditional view) -> ok."""
    return workflow(
        [
            state(
                "fill",
                1,
                [transition("send", "check", roles=[{"role": "child.sender", "grant": "allow"}])],
                view={"view": ref("child-form-view"), "loadData": True},
                queryRoles=[{"role": "child.reader", "grant": "allow"}],
            ),
            state(
                "check",
                2,
                [transition("accept", "ok")],
                view={
                    "rules": [{"rule": VIP, "view": ref("child-vip-view")}],
                    "default": {"view": ref("child-check-view")},
                },
            ),
            state("ok", 3, subType=1),
        ],
        key="ov-child",
        type="S",
    )


def parent_flow(version: str = "1.0.0", **subflow: Any) -> dict[str, Any]:
    """intake -auto-> delegate (starts ov-child with `subflow`'s overrides) -auto-> closed."""
    mapping = script("def input_handler(context):\n    return {'fromParent': True}\n")
    document = workflow(
        [
            state("intake", 1, [transition("delegate-now", "delegate", 1, triggerKind=10)]),
            state(
                "delegate",
                4,
                [transition("wrap-up", "closed", 1, triggerKind=10)],
                subFlow={
                    "type": "S",
                    "process": {
                        "key": "ov-child",
                        "domain": "core",
                        "version": "1.0.0",
                        "flow": "sys-flows",
                    },
                    "mapping": mapping,
                    **subflow,
                },
            ),
            state("closed", 3, subType=1),
        ],
        key="ov-parent",
    )
    document["version"] = version
    return document


OVERRIDES: dict[str, Any] = {
    "viewOverrides": {"child-form-view": ref("parent-form-view")},
    "overrides": {
        "views": {"child-check-view": ref("parent-check-view")},
        "transitions": {"send": {"roles": AGENTS}},
        "states": {"fill": {"queryRoles": READERS}},
    },
}


@pytest.fixture(autouse=True)
def published(db: None) -> None:
    publish(*VIEWS, child_flow(), parent_flow(**copy.deepcopy(OVERRIDES)))


def member(name: str, *roles: str) -> APIClient:
    user: Any = get_user_model().objects.create_user(name, password="pw-12345678")
    staff, _ = Group.objects.get_or_create(name="ov-users")
    WorkflowGrant.objects.get_or_create(
        group=staff,
        domain="core",
        workflow="",
        defaults={"read_instances": True, "start_instances": True, "drive_instances": True},
    )
    user.groups.add(staff, *(Group.objects.get_or_create(name=role)[0] for role in roles))
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def agent() -> APIClient:
    return member("agent", "parent.agent")


@pytest.fixture
def intern() -> APIClient:
    return member("intern", "parent.agent", "parent.intern")


@pytest.fixture
def sender() -> APIClient:
    return member("sender", "child.sender", "child.reader")


def started(client: APIClient, base: str = PARENT) -> str:
    response = client.post(f"{base}/start?sync=true", {}, format="json")
    assert response.status_code == 200, response.json()
    return str(response.json()["id"])


def child_of(parent_id: str) -> Instance:
    return Instance.objects.get(parent_correlation__parent__pk=parent_id)


def served(client: APIClient, child_id: str) -> str:
    response = client.get(f"{CHILD}/{child_id}/functions/view")
    assert response.status_code == 200, response.json()
    return str(response.json()["key"])


def fire(client: APIClient, base: str, ref_: str, key: str) -> Any:
    return client.patch(f"{base}/{ref_}/transitions/{key}?sync=true", {}, format="json")


def refused(response: Any, code: str) -> None:
    assert response.status_code == 403, response.content
    assert response.json()["errorCode"] == code


def test_the_child_pins_its_parents_overrides_and_serves_the_replacement_views(agent):
    parent_id = started(agent)
    child = child_of(parent_id)
    assert (child.current_state, child.data) == ("fill", {"fromParent": True})
    assert child.extra["subflowOverrides"] == {
        "source": "core/ov-parent@1.0.0#delegate",
        "views": {
            "child-form-view": ref("parent-form-view"),
            "child-check-view": ref("parent-check-view"),
        },
        "transitions": {"send": AGENTS},
        "states": {"fill": READERS},
    }

    assert served(agent, str(child.pk)) == "parent-form-view"
    # The waiting parent's state function describes its child, view block included.
    block = agent.get(f"{PARENT}/{parent_id}/functions/state").json()["view"]
    assert (block["label"], block["loadData"]) == ("parent-form-view", True)
    assert block["href"] == f"{CHILD}/{child.pk}/functions/view"

    assert fire(agent, PARENT, parent_id, "send").status_code == 200  # forwarded to the child
    assert Instance.objects.get(pk=child.pk).current_state == "check"
    # The default of the child's conditional view is replaced; a rule's own view is not.
    assert served(agent, str(child.pk)) == "parent-check-view"
    Instance.objects.filter(pk=child.pk).update(data={"vip": True}, etag="changed")
    assert served(agent, str(child.pk)) == "child-vip-view"


def test_a_child_started_on_its_own_has_no_overrides(sender):
    child_id = started(sender, CHILD)
    assert "subflowOverrides" not in Instance.objects.get(pk=child_id).extra
    assert served(sender, child_id) == "child-form-view"
    assert fire(sender, CHILD, child_id, "send").status_code == 200


def test_the_transition_role_override_replaces_the_childs_roles(agent, intern, sender):
    parent_id = started(agent)
    child_id = str(child_of(parent_id).pk)

    offered = agent.get(f"{CHILD}/{child_id}/functions/state").json()["transitions"]
    assert [t["name"] for t in offered] == ["send"]
    assert intern.get(f"{CHILD}/{child_id}/functions/state").json()["transitions"] == []
    allowed = agent.get(f"{CHILD}/{child_id}/functions/authorize?transitionKey=send")
    assert (allowed.status_code, allowed.json()) == (200, {"allowed": True})
    denied = intern.get(f"{CHILD}/{child_id}/functions/authorize?transitionKey=send")
    assert (denied.status_code, denied.json()) == (403, {"allowed": False})

    # The child's own sender role no longer fires it, through the parent or on the child.
    refused(fire(sender, PARENT, parent_id, "send"), "Transition:100010")
    refused(fire(sender, CHILD, child_id, "send"), "Transition:100010")
    refused(fire(intern, CHILD, child_id, "send"), "Transition:100010")
    assert Instance.objects.get(pk=child_id).current_state == "fill"
    assert fire(agent, CHILD, child_id, "send").status_code == 200
    assert Instance.objects.get(pk=child_id).current_state == "check"


def test_the_state_query_role_override_replaces_the_childs_and_listings_follow(agent, sender):
    overridden = str(child_of(started(agent)).pk)
    alone = started(sender, CHILD)

    for name in ("state", "data", "view"):
        refused(sender.get(f"{CHILD}/{overridden}/functions/{name}"), "Authorization:110001")
        refused(agent.get(f"{CHILD}/{alone}/functions/{name}"), "Authorization:110001")
        assert agent.get(f"{CHILD}/{overridden}/functions/{name}").status_code == 200
        assert sender.get(f"{CHILD}/{alone}/functions/{name}").status_code == 200
    refused(sender.get(f"{CHILD}/{overridden}"), "Authorization:110001")

    def listed(client: APIClient) -> list[str]:
        response = client.get(CHILD)
        assert response.status_code == 200, response.json()
        return [item["id"] for item in response.json()["items"]]

    assert listed(agent) == [overridden]
    assert listed(sender) == [alone]

    # Out of the overridden state the child's own rules apply again (check has none).
    assert fire(agent, CHILD, overridden, "send").status_code == 200
    assert sender.get(f"{CHILD}/{overridden}/functions/state").status_code == 200
    assert sorted(listed(sender)) == sorted([overridden, alone])


def test_a_later_publish_of_the_parent_changes_no_running_child(agent, sender):
    before = child_of(started(agent))
    component_publish(
        document=parent_flow("1.1.0", viewOverrides={"child-form-view": ref("parent-form-view-2")})
    )
    newer = started(agent)
    after = child_of(newer)
    assert Instance.objects.get(pk=newer).workflow_version == "1.1.0"

    assert served(agent, str(before.pk)) == "parent-form-view"
    refused(sender.get(f"{CHILD}/{before.pk}/functions/state"), "Authorization:110001")
    refused(fire(sender, CHILD, str(before.pk), "send"), "Transition:100010")

    # The new version overrides the view only: the child's own roles decide again.
    assert served(sender, str(after.pk)) == "parent-form-view-2"
    assert fire(sender, CHILD, str(after.pk), "send").status_code == 200
