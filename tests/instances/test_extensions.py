"""Extensions (vNext "Extension Management"), through the HTTP API: a `sys-extensions` component
runs its task and its output goes into the `extensions` of GET instance, the data function,
each listed instance and the sync start/transition answer: by type (1/3 unasked, 2/4 only when
named in `?extensions=`; 1/2 in every workflow of the domain, 3/4 where declared) and by scope
(1 single-instance reads, 2 the list, 3 both). A failing extension never fails the read."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from tests.engine.builders import state, task_ref, transition, workflow
from tests.instances.http_server import http_server
from tests.instances.workflows import http_ref, http_task, publish
from workflows.models import WorkflowGrant

pytestmark = pytest.mark.django_db

BASE = "/api/v1/core/workflows/ledger/instances"
GLOBAL, GLOBAL_REQUESTED, DEFINED, DEFINED_REQUESTED = 1, 2, 3, 4
SINGLE, LIST, EVERYWHERE = 1, 2, 3
AUDITOR = "ledger.auditor"


def extension(
    key: str, kind: int, scope: int, output: str = "{}", **attributes: Any
) -> dict[str, Any]:
    """An extension running the script task whose output handler returns `output`."""
    return {
        "key": key,
        "domain": "core",
        "version": "1.0.0",
        "flow": "sys-extensions",
        "flowVersion": "1.0.0",
        "tags": ["test"],
        "attributes": {"type": kind, "scope": scope, "task": task_ref(output), **attributes},
    }


def declared(*keys: str) -> list[dict[str, str]]:
    return [
        {"key": k, "domain": "core", "version": "1.0.0", "flow": "sys-extensions"} for k in keys
    ]


def ledger(*extensions: str, key: str = "ledger", **extra: Any) -> dict[str, Any]:
    """open -post-> posted (auditors only may read it), declaring `extensions`."""
    return workflow(
        [
            state("open", 1, [transition("post", "posted")], **extra.pop("open", {})),
            state("posted", 2, queryRoles=[{"role": AUDITOR, "grant": "allow"}]),
        ],
        key=key,
        extensions=declared(*extensions),
        **extra,
    )


def started(client: APIClient, base: str = BASE) -> dict[str, Any]:
    response = client.post(f"{base}/start?sync=true", {"owner": "ada"}, format="json")
    assert response.status_code == 200, response.json()
    answer: dict[str, Any] = response.json()
    return answer


def reads(client: APIClient, ref: str, **params: Any) -> dict[str, dict[str, Any]]:
    """The `extensions` of GET instance, the data function and the instance's list item."""
    detail = client.get(f"{BASE}/{ref}", params)
    data = client.get(f"{BASE}/{ref}/functions/data", params)
    listing = client.get(BASE, params)
    for response in (detail, data, listing):
        assert response.status_code == 200, response.json()
    [item] = [item for item in listing.json()["items"] if item["id"] == ref]
    return {
        "instance": detail.json()["extensions"],
        "data": data.json()["extensions"],
        "list": item["extensions"],
    }


PROFILE = (
    "{'profile': {'owner': context.instance.data.get('owner'), "
    "'tier': context.headers.get('x-tier')}}"
)


def test_a_declared_extension_enriches_every_instance_read_and_the_sync_answers(
    operator_client,
):
    publish(extension("owner-profile", DEFINED, EVERYWHERE, PROFILE), ledger("owner-profile"))

    start = started(operator_client)
    profile = {"profile": {"owner": "ada", "tier": None}}
    assert start["extensions"] == profile
    ref = start["id"]
    assert reads(operator_client, ref) == {"instance": profile, "data": profile, "list": profile}
    tiered = operator_client.get(f"{BASE}/{ref}", headers={"X-Tier": "gold"}).json()
    assert tiered["extensions"]["profile"]["tier"] == "gold"  # the caller's request is the context
    # Nothing of it is stored.
    assert "profile" not in operator_client.get(f"{BASE}/{ref}/functions/data").json()["data"]


def test_the_scope_decides_which_reads_an_extension_enriches(operator_client):
    publish(
        extension("single", DEFINED, SINGLE, "{'single': True}"),
        extension("listed", DEFINED, LIST, "{'listed': True}"),
        ledger("single", "listed"),
    )
    start = started(operator_client)

    assert start["extensions"] == {"single": True}
    assert reads(operator_client, start["id"]) == {
        "instance": {"single": True},
        "data": {"single": True},
        "list": {"listed": True},
    }


def test_a_requested_extension_runs_only_when_named_as_the_state_view_asks(operator_client):
    view = {
        "view": {"key": "ledger-view", "domain": "core", "version": "1.0.0", "flow": "sys-views"}
    }
    publish(
        {
            "key": "ledger-view",
            "domain": "core",
            "version": "1.0.0",
            "flow": "sys-views",
            "flowVersion": "1.0.0",
            "tags": ["test"],
            "attributes": {"type": 1, "content": "{}"},
        },
        extension("limits", DEFINED_REQUESTED, SINGLE, "{'limits': {'daily': 100}}"),
        extension("rates", DEFINED_REQUESTED, SINGLE, "{'rates': {'eur': 1}}"),
        ledger("limits", "rates", open={"view": {**view, "extensions": ["limits"]}}),
    )
    ref = started(operator_client)["id"]

    state_body = operator_client.get(f"{BASE}/{ref}/functions/state").json()
    assert state_body["data"]["href"].endswith("/functions/data?extensions=limits")
    assert state_body["view"]["extensions"] == ["limits"]
    assert reads(operator_client, ref)["instance"] == {}
    asked = operator_client.get(state_body["data"]["href"]).json()
    assert asked["extensions"] == {"limits": {"daily": 100}}
    both = operator_client.get(f"{BASE}/{ref}?extensions=limits&extensions=rates").json()
    assert both["extensions"] == {"limits": {"daily": 100}, "rates": {"eur": 1}}
    comma = operator_client.get(f"{BASE}/{ref}/functions/data?extensions=rates,limits").json()
    assert comma["extensions"] == {"rates": {"eur": 1}, "limits": {"daily": 100}}


def test_an_unknown_requested_name_is_reported_and_a_malformed_one_refused(operator_client):
    publish(extension("listed-only", DEFINED_REQUESTED, LIST, "{'x': 1}"), ledger("listed-only"))
    ref = started(operator_client)["id"]

    answer = operator_client.get(f"{BASE}/{ref}?extensions=nope,listed-only").json()
    # Neither is an extension of this read: unknown, and one whose scope is the list.
    assert {name: body["error"]["code"] for name, body in answer["extensions"].items()} == {
        "nope": "Extension:NotFound",
        "listed-only": "Extension:NotFound",
    }
    for bad in ("Upper", "", "a,,b", "a b"):
        response = operator_client.get(f"{BASE}/{ref}/functions/data", {"extensions": bad})
        assert response.status_code == 400, bad
        assert response.json()["errors"][0]["pointer"] == "/extensions"


def test_global_extensions_run_in_every_workflow_of_their_domain(operator_client):
    publish(
        extension("system-info", GLOBAL, EVERYWHERE, "{'system': 'vnext'}"),
        extension("session", GLOBAL_REQUESTED, SINGLE, "{'session': 's-1'}"),
        extension("undeclared-defined", DEFINED, EVERYWHERE, "{'leak': True}"),
        ledger(),  # declares none of them
    )
    ref = started(operator_client)["id"]

    assert reads(operator_client, ref) == {
        "instance": {"system": "vnext"},
        "data": {"system": "vnext"},
        "list": {"system": "vnext"},
    }
    asked = operator_client.get(f"{BASE}/{ref}", {"extensions": "session,undeclared-defined"})
    extensions = asked.json()["extensions"]
    assert (extensions["system"], extensions["session"]) == ("vnext", "s-1")
    assert extensions["undeclared-defined"]["error"]["code"] == "Extension:NotFound"


def test_a_global_extension_published_after_a_read_runs_on_the_next_one(operator_client):
    # The domain's global extensions are cached between reads: publishing one forgets them.
    publish(ledger())
    ref = started(operator_client)["id"]
    assert operator_client.get(f"{BASE}/{ref}").json()["extensions"] == {}

    publish(extension("system-info", GLOBAL, EVERYWHERE, "{'system': 'vnext'}"))
    assert operator_client.get(f"{BASE}/{ref}").json()["extensions"] == {"system": "vnext"}
    newer = extension("system-info", GLOBAL, EVERYWHERE, "{'system': 'v2'}")
    publish({**newer, "version": "1.1.0"})
    assert operator_client.get(f"{BASE}/{ref}").json()["extensions"] == {"system": "v2"}


def test_a_failing_extension_does_not_fail_the_read(operator_client, caplog):
    caplog.set_level(logging.WARNING, "vnext.extensions")
    with http_server() as base:
        publish(
            http_task("rates-call", f"{base}/status/503"),
            extension("broken-rates", DEFINED, EVERYWHERE, task=http_ref("rates-call")),
            extension("raising", DEFINED, EVERYWHERE, "1 / 0"),
            extension("fine", DEFINED, EVERYWHERE, "{'fine': True}"),
            ledger("broken-rates", "raising", "fine"),
        )
        start = started(operator_client)
        found = reads(operator_client, start["id"])

    for extensions in (start["extensions"], *found.values()):
        assert extensions["fine"] is True
        assert extensions["broken-rates"]["error"]["code"] == "Extension:ExecutionFailed"
        assert "Task:Http:503" in extensions["broken-rates"]["error"]["message"]
        assert extensions["raising"]["error"]["code"] == "Extension:ExecutionFailed"
    logged = [r.getMessage() for r in caplog.records if r.name == "vnext.extensions"]
    assert any("broken-rates" in line and "Task:Http:503" in line for line in logged)


def test_the_etag_covers_the_extensions_and_304_needs_them_unchanged(operator_client):
    publish(extension("owner-profile", DEFINED, SINGLE, PROFILE), ledger("owner-profile"))
    ref = started(operator_client)["id"]

    gold = operator_client.get(f"{BASE}/{ref}", headers={"X-Tier": "gold"})
    tag = gold["ETag"]
    assert tag != f'"{gold.json()["eTag"]}"'  # the instance's own tag stays in the body
    same = operator_client.get(f"{BASE}/{ref}", headers={"X-Tier": "gold", "If-None-Match": tag})
    assert same.status_code == 304
    other = operator_client.get(f"{BASE}/{ref}", headers={"X-Tier": "blue", "If-None-Match": tag})
    assert other.status_code == 200
    assert other.json()["extensions"]["profile"]["tier"] == "blue"

    data = operator_client.get(f"{BASE}/{ref}/functions/data", headers={"X-Tier": "gold"})
    assert data["ETag"] == f'"{data.json()["eTag"]}"'
    again = operator_client.get(
        f"{BASE}/{ref}/functions/data", headers={"X-Tier": "gold", "If-None-Match": data["ETag"]}
    )
    assert again.status_code == 304


def test_a_caller_who_may_not_read_the_instance_gets_no_extensions(db):
    publish(extension("owner-profile", DEFINED, EVERYWHERE, PROFILE), ledger("owner-profile"))
    user: Any = get_user_model().objects.create_user("clerk", password="pw-12345678")
    grants = Group.objects.create(name="ledger-users")
    WorkflowGrant.objects.create(
        group=grants,
        domain="core",
        workflow="ledger",
        read_instances=True,
        start_instances=True,
        drive_instances=True,
    )
    user.groups.add(grants)
    clerk = APIClient()
    clerk.force_authenticate(user)
    ref = started(clerk)["id"]

    posted = clerk.patch(f"{BASE}/{ref}/transitions/post?sync=true", {}, format="json")

    # `posted` is for auditors only: the answer shows neither the data nor the extensions.
    assert posted.status_code == 200, posted.json()
    assert (posted.json()["attributes"], posted.json()["extensions"]) == ({}, {})
    assert clerk.get(f"{BASE}/{ref}").status_code == 403
