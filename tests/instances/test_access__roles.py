"""The caller's roles beyond role-matrix-lab: roles carried by a JWT, `$PreviousUser`, the state
alias and display labels by `Accept-Language`, long-poll roles on the ack, the instance list
filtered by query roles, and the lockout of failed logins."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import override_settings
from rest_framework.test import APIClient
from rest_framework_simplejwt.tokens import AccessToken

from instances.engine.roles import decide
from tests.engine.builders import state, transition, workflow
from tests.instances.workflows import publish
from workflows.models import WorkflowGrant

pytestmark = pytest.mark.django_db

BASE = "/api/v1/core/workflows/desk/instances"
CLERK = [{"role": "desk.clerk", "grant": "allow"}]
LABELS = [{"label": "Under review", "language": "en-US"}, {"label": "Inceleme", "language": "tr"}]
ALIAS = [
    {
        "name": "In assessment",
        "roles": [{"role": "desk.customer", "grant": "allow"}],
        "labels": [{"label": "Degerlendirmede", "language": "tr"}],
    },
    {
        "name": "Operational review",
        "roles": [{"role": "desk.clerk", "grant": "allow"}],
        "labels": [{"label": "Operational review", "language": "en"}],
    },
]


def desk() -> dict[str, Any]:
    return workflow(
        [
            state(
                "intake",
                1,
                [
                    transition("review", "check", roles=CLERK),
                    transition(
                        "confirm", "intake", roles=[{"role": "$PreviousUser", "grant": "allow"}]
                    ),
                ],
            ),
            state(
                "check",
                2,
                [transition("done", "closed")],
                alias=ALIAS,
                labels=LABELS,
                queryRoles=[
                    {"role": "desk.clerk", "grant": "allow"},
                    {"role": "desk.customer", "grant": "allow"},
                ],
                interaction={
                    "longPoll": {"terminate": True, "fallbackTimeoutSeconds": 30, "roles": CLERK}
                },
            ),
            state("closed", 3, subType=1),
        ],
        key="desk",
    )


def member(name: str, *roles: str) -> tuple[Any, APIClient]:
    user: Any = get_user_model().objects.create_user(name, password="pw-12345678")
    staff, _ = Group.objects.get_or_create(name="desk-users")
    WorkflowGrant.objects.get_or_create(
        group=staff,
        domain="core",
        workflow="desk",
        defaults={
            "read_instances": True,
            "start_instances": True,
            "drive_instances": True,
        },
    )
    user.groups.add(staff, *(Group.objects.get_or_create(name=role)[0] for role in roles))
    client = APIClient()
    client.force_authenticate(user)
    return user, client


@pytest.fixture(autouse=True)
def published(db: None) -> None:
    publish(desk())


def started(client: APIClient) -> str:
    response = client.post(f"{BASE}/start?sync=true", {}, format="json")
    assert response.status_code == 200, response.json()
    return str(response.json()["id"])


def test_grant_lists_deny_beats_allow_and_a_deny_list_needs_some_role():
    rules = [{"role": "a", "grant": "allow"}, {"role": "b", "grant": "deny"}]
    assert decide(rules, {"a"}) is True
    assert decide(rules, {"a", "b"}) is False
    assert decide(rules, {"c"}) is False
    assert decide([{"role": "b", "grant": "deny"}], {"c"}) is True
    assert decide([{"role": "b", "grant": "deny"}], set()) is False
    assert decide([], {"a"}) is None


def test_roles_carried_by_a_jwt_add_to_the_groups():
    user, _ = member("jale")
    token = AccessToken.for_user(user)
    token["sub"] = "jale"
    token["roles"] = ["desk.clerk"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    ref = started(client)

    response = client.patch(f"{BASE}/{ref}/transitions/review?sync=true", {}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "B"  # paused for the long-poll acknowledgement

    plain = APIClient()
    plain.credentials(HTTP_AUTHORIZATION=f"Bearer {AccessToken.for_user(user)}x")
    assert plain.get(f"{BASE}/{ref}").status_code == 401  # a forged signature


def test_previous_user_is_the_one_who_made_the_last_transition():
    _, first = member("first")
    _, second = member("second")
    ref = started(first)

    refused = second.patch(f"{BASE}/{ref}/transitions/confirm?sync=true", {}, format="json")
    assert refused.status_code == 403
    assert refused.json()["errorCode"] == "Transition:100010"
    assert (
        first.patch(f"{BASE}/{ref}/transitions/confirm?sync=true", {}, format="json").status_code
        == 200
    )
    names = [t["name"] for t in second.get(f"{BASE}/{ref}/functions/state").json()["transitions"]]
    assert "confirm" not in names


def in_check() -> str:
    _, clerk = member("clerk", "desk.clerk")
    ref = started(clerk)
    response = clerk.patch(f"{BASE}/{ref}/transitions/review?sync=true", {}, format="json")
    assert response.status_code == 200, response.json()
    return ref


def state_of(client: APIClient, ref: str, language: str = "") -> dict[str, Any]:
    headers = {"Accept-Language": language} if language else {}
    response = client.get(f"{BASE}/{ref}/functions/state", headers=headers)
    assert response.status_code == 200, response.content
    body: dict[str, Any] = response.json()
    return body


def test_the_state_is_masked_by_the_alias_of_the_callers_role_in_its_language():
    ref = in_check()
    _, customer = member("cem", "desk.customer")
    _, clerk = member("clara", "desk.clerk")

    assert state_of(customer, ref, "tr-TR,tr;q=0.9")["state"] == "Degerlendirmede"
    assert state_of(customer, ref, "en")["state"] == "In assessment"  # the alias name
    assert state_of(clerk, ref, "en-GB")["state"] == "Operational review"
    body = state_of(clerk, ref, "tr")
    assert body["label"] == "Inceleme"
    assert state_of(clerk, ref, "en-US")["label"] == "Under review"


def test_the_interaction_and_the_ack_follow_the_long_poll_roles():
    ref = in_check()
    _, customer = member("cenk", "desk.customer")
    _, clerk = member("can", "desk.clerk")

    assert "interaction" not in state_of(customer, ref)
    assert state_of(clerk, ref)["interaction"]["terminateLongPoll"] is True
    allowed = customer.get(f"{BASE}/{ref}/functions/authorize?ack=true")
    assert (allowed.status_code, allowed.json()) == (403, {"allowed": False})
    denied = customer.patch(f"{BASE}/{ref}/longpoll/ack", {}, format="json")
    assert denied.status_code == 403
    assert denied.json()["errorCode"] == "Authorization:110001"
    acked = clerk.patch(f"{BASE}/{ref}/longpoll/ack", {}, format="json")
    assert acked.status_code == 200, acked.json()
    assert acked.json()["status"] == "A"
    # Nothing awaits an ack any more: anyone is "allowed", a second ack is 409.
    again = customer.get(f"{BASE}/{ref}/functions/authorize?ack=true")
    assert (again.status_code, again.json()) == (200, {"allowed": True})
    assert clerk.patch(f"{BASE}/{ref}/longpoll/ack", {}, format="json").status_code == 409


def test_the_list_leaves_out_instances_the_caller_may_not_read():
    checked = in_check()
    _, plain = member("pelin")
    waiting = started(plain)

    items = plain.get(BASE).json()["items"]
    assert [item["id"] for item in items] == [waiting]
    assert plain.get(f"{BASE}/{checked}").status_code == 403
    _, clerk = member("cagla", "desk.clerk")
    assert {item["id"] for item in clerk.get(BASE).json()["items"]} == {checked, waiting}


@override_settings(AXES_FAILURE_LIMIT=3)
def test_failed_logins_lock_the_username_out_with_a_problem_body():
    user, _ = member("lena")
    client = APIClient()

    def basic(password: str) -> Any:
        credentials = base64.b64encode(f"lena:{password}".encode()).decode()
        return client.get(BASE, headers={"Authorization": f"Basic {credentials}"})

    assert basic("pw-12345678").status_code == 200
    for _ in range(2):
        assert basic("wrong").status_code == 401
    assert basic("wrong").status_code == 429  # the third failure locks
    locked = basic("pw-12345678")  # even the right password, until the cool-off ends
    assert locked.status_code == 429
    assert locked["Content-Type"] == "application/problem+json"
    assert locked.json()["errorCode"] == "App:900008"
    assert int(locked["Retry-After"]) > 0
    user.refresh_from_db()
    assert user.is_active  # only the login is locked, not the account
