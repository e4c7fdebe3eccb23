"""Conditional views (vnext-schema `viewDefinition` `{rules, default}`, vNext "Rule-Based View
Selection"): the view function runs a state's or transition's view rules in order in the script
workers with the instance and the request (headers without credentials, query) and serves the
first rule's view that holds, else `default`, else 404; a failing rule is passed over. The state
function's `view` block describes the same choice (`hasView`, `loadData`, label), wizard states
serve the view of the manual transition the caller may fire, and the function cache keeps
answers apart per request for a conditional view."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from tests.engine.builders import script, state, transition, workflow
from tests.instances.workflows import publish
from workflows.models import WorkflowGrant

pytestmark = pytest.mark.django_db

BASE = "/api/v1/core/workflows/ruled/instances"
LABEL = [{"label": "View", "language": "en-US"}]


def view(key: str, label: str = "") -> dict[str, Any]:
    """A JSON view component whose content names it."""
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
            "labels": [{"label": label or key, "language": "en-US"}],
        },
    }


def ref(key: str) -> dict[str, str]:
    return {"key": key, "domain": "core", "version": "1.0.0", "flow": "sys-views"}


def rule(expression: str) -> dict[str, str]:
    """A view rule whose handler returns `expression`."""
    return script(f"def handler(context):\n    return {expression}\n")


IOS = rule('context.headers.get("x-platform") == "ios"')
VIP = rule('get(context.instance.data, "customer.vip", False)')
BROKEN = rule("1 / 0")
CREDENTIALS = rule('"authorization" in context.headers or "cookie" in context.headers')
ANDROID_QUERY = rule('context.query.get("platform") == "android"')
ASKED_FOR_SUBMIT = rule('context.transition.key == "submit"')
APPROVERS = [{"role": "ruled.approver", "grant": "allow"}]

VIEWS = [
    view(key)
    for key in (
        "never-view",
        "leak-view",
        "ios-view",
        "vip-view",
        "web-view",
        "android-submit-view",
        "submit-view",
        "review-view",
        "approve-view",
        "approve-rich-view",
    )
]


def ruled_flow() -> dict[str, Any]:
    """form (conditional view; submit with a default-less conditional view) -> review (a
    wizard: its single manual transition approve has a conditional view, for approvers)."""
    form_view = {
        "rules": [
            {"rule": BROKEN, "view": ref("never-view")},
            {"rule": CREDENTIALS, "view": ref("leak-view")},
            {"rule": IOS, "view": ref("ios-view"), "loadData": True},
            {"rule": VIP, "view": ref("vip-view"), "loadData": True},
        ],
        "default": {"view": ref("web-view"), "loadData": False},
    }
    submit_view = {
        "rules": [
            {"rule": ANDROID_QUERY, "view": ref("android-submit-view")},
            {"rule": ASKED_FOR_SUBMIT, "view": ref("submit-view")},
        ]
    }
    lone_view = {"rules": [{"rule": ANDROID_QUERY, "view": ref("android-submit-view")}]}
    approve_view = {
        "rules": [{"rule": VIP, "view": ref("approve-rich-view"), "loadData": True}],
        "default": {"view": ref("approve-view")},
    }
    return workflow(
        [
            state(
                "form",
                1,
                [
                    transition("submit", "review", view=submit_view),
                    transition("peek", "form", view=lone_view),
                ],
                view=form_view,
            ),
            state(
                "review",
                5,
                [transition("approve", "done", view=approve_view, roles=APPROVERS)],
                view={"view": ref("review-view"), "loadData": True},
            ),
            state("done", 3, subType=1),
        ],
        key="ruled",
    )


@pytest.fixture(autouse=True)
def published(db: None) -> None:
    publish(*VIEWS, ruled_flow())


def started(client: APIClient, data: dict[str, Any] | None = None) -> str:
    response = client.post(f"{BASE}/start?sync=true", {"attributes": data or {}}, format="json")
    assert response.status_code == 200, response.json()
    return str(response.json()["id"])


def view_of(client: APIClient, ref_: str, query: str = "", **headers: str) -> Any:
    """GET the view function; `headers` by their Python names (`x_platform="ios"`)."""
    sent = {name.replace("_", "-"): value for name, value in headers.items()}
    return client.get(f"{BASE}/{ref_}/functions/view{query}", headers=sent)


def served(client: APIClient, ref_: str, query: str = "", **headers: str) -> str:
    """The key of the view the view function serves (expecting 200)."""
    response = view_of(client, ref_, query, **headers)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["content"] == {"screen": body["key"]}
    return str(body["key"])


def state_view(client: APIClient, ref_: str, **headers: str) -> dict[str, Any]:
    sent = {name.replace("_", "-"): value for name, value in headers.items()}
    response = client.get(f"{BASE}/{ref_}/functions/state", headers=sent)
    assert response.status_code == 200, response.json()
    block: dict[str, Any] = response.json()["view"]
    return block


def test_the_first_rule_that_holds_chooses_the_view_else_the_default(operator_client):
    plain = started(operator_client)
    vip = started(operator_client, {"customer": {"vip": True}})

    assert served(operator_client, plain) == "web-view"  # no rule holds: the default
    assert served(operator_client, plain, x_platform="ios") == "ios-view"
    assert served(operator_client, vip) == "vip-view"
    # Both the ios and the vip rule hold: the first in order wins.
    assert served(operator_client, vip, x_platform="ios") == "ios-view"


def test_a_failing_rule_is_passed_over_and_rules_never_see_credentials(operator_client):
    ref_ = started(operator_client)
    # The first rule raises (never-view is never served); the second would hold if the
    # caller's credentials reached the script.
    answer = served(operator_client, ref_, authorization="Bearer secret", cookie="session=1")
    assert answer == "web-view"


def test_the_state_function_describes_the_view_the_request_gets(operator_client):
    ref_ = started(operator_client)
    assert state_view(operator_client, ref_) == {
        "hasView": True,
        "loadData": False,
        "href": f"{BASE}/{ref_}/functions/view",
        "label": "web-view",
        "labels": [{"label": "web-view", "language": "en-US"}],
    }
    ios = state_view(operator_client, ref_, x_platform="ios")
    assert (ios["hasView"], ios["loadData"], ios["label"]) == (True, True, "ios-view")


def test_a_transition_view_without_default_is_404_when_no_rule_holds(operator_client):
    ref_ = started(operator_client)
    # The rules see the query and which transition is asked for.
    assert served(operator_client, ref_, "?transitionKey=submit&platform=android") == (
        "android-submit-view"
    )
    assert served(operator_client, ref_, "?transitionKey=submit") == "submit-view"

    missing = view_of(operator_client, ref_, "?transitionKey=peek")
    assert missing.status_code == 404
    body = missing.json()
    assert body["errorCode"] == "App:900004"
    assert "no view rule holds" in body["detail"]
    assert served(operator_client, ref_, "?transitionKey=peek&platform=android") == (
        "android-submit-view"
    )
    offered = {
        t["name"]: t["view"]["hasView"]
        for t in operator_client.get(f"{BASE}/{ref_}/functions/state").json()["transitions"]
    }
    assert offered == {"submit": True, "peek": True}


def test_the_function_cache_keeps_conditional_answers_apart_per_request(operator_client, settings):
    settings.VNEXT = {**settings.VNEXT, "FUNCTION_CACHE_SECONDS": 300}
    ref_ = started(operator_client)
    assert served(operator_client, ref_, x_platform="ios") == "ios-view"
    assert served(operator_client, ref_) == "web-view"
    assert served(operator_client, ref_, x_platform="ios") == "ios-view"


def member(name: str, *roles: str) -> APIClient:
    user: Any = get_user_model().objects.create_user(name, password="pw-12345678")
    staff, _ = Group.objects.get_or_create(name="ruled-users")
    WorkflowGrant.objects.get_or_create(
        group=staff,
        domain="core",
        workflow="ruled",
        defaults={"read_instances": True, "start_instances": True, "drive_instances": True},
    )
    user.groups.add(staff, *(Group.objects.get_or_create(name=role)[0] for role in roles))
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_a_wizard_serves_the_rule_chosen_view_of_the_transition_the_caller_may_fire():
    approver = member("ayla", "ruled.approver")
    clerk = member("cem")
    plain = started(approver)
    vip = started(approver, {"customer": {"vip": True}})
    for ref_ in (plain, vip):
        response = approver.patch(f"{BASE}/{ref_}/transitions/submit?sync=true", {}, format="json")
        assert response.status_code == 200, response.json()

    assert served(approver, plain) == "approve-view"  # approve's default
    assert served(approver, vip) == "approve-rich-view"
    hint = state_view(approver, vip)
    assert (hint["hasView"], hint["loadData"], hint["label"]) == (True, True, "approve-rich-view")
    # The clerk may not fire approve: the wizard state's own view, as its state function says.
    assert served(clerk, vip) == "review-view"
    hint = state_view(clerk, vip)
    assert (hint["loadData"], hint["label"]) == (True, "review-view")
