"""Custom functions called with a verb and a body, and their contracts, through the HTTP API: a
function answers the verbs it declares (`verbs`; none declared: all four) and 405s the others
with `Allow`; POST, PATCH and DELETE carry a JSON object (or a bracket-path form) the scripts see
as `context.body`, checked against the function's `inputSchema` before anything runs; its output
is checked against its `outputSchema` before it is answered (a breach is 502, logged, never
sent); the catalogs list the functions a caller may run with their schemas and views. GET needs
the read grant, the other verbs the drive grant."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from instances.models import Instance
from tests.engine.builders import script, state, transition, workflow
from tests.instances.http_server import http_server
from tests.instances.workflows import http_ref, http_task, publish
from workflows.models import WorkflowGrant

pytestmark = pytest.mark.django_db

BASE = "/api/v1/core/workflows/ledger/instances"
DOMAIN_FUNCTIONS = "/api/v1/core/functions"
CLERK, GUEST = "ledger.clerk", "ledger.guest"
HEADER = {"domain": "core", "version": "1.0.0", "flowVersion": "1.0.0", "tags": ["test"]}


def ref(key: str, flow: str, version: str = "1.0.0") -> dict[str, str]:
    return {"key": key, "domain": "core", "version": version, "flow": flow}


def body_echo(expression: str = "{'got': context.body, 'ref': context.instance.key}") -> Any:
    """The script task, its input handler answering `expression` (its data is the output)."""
    return {
        "order": 1,
        "task": ref("script-task", "sys-tasks"),
        "mapping": script(
            f"def input_handler(task, context):\n    return ScriptResponse(data={expression})\n"
        ),
    }


def function(key: str, *, scope: str = "I", version: str = "1.0.0", **attributes: Any) -> Any:
    if "onExecutionTasks" not in attributes:
        attributes.setdefault("task", body_echo())
    return {
        "key": key,
        "flow": "sys-functions",
        **HEADER,
        "version": version,
        "attributes": {"scope": scope, **attributes},
    }


def schema_component(key: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "key": key,
        "flow": "sys-schemas",
        **HEADER,
        "attributes": {"type": "schema", "schema": {"type": "object", **schema}},
    }


def view_component(key: str, content: str) -> dict[str, Any]:
    return {
        "key": key,
        "flow": "sys-views",
        **HEADER,
        "attributes": {"type": 1, "content": content, "display": "full-page"},
    }


PAYMENT = schema_component(
    "payment-input",
    {
        "required": ["amount", "currency"],
        "properties": {
            "amount": {"type": "integer", "minimum": 1},
            "currency": {"enum": ["EUR", "TRY"]},
        },
    },
)
COMPANY = schema_component("company-input", {"required": ["taxNumber"]})
PERSON = schema_component("person-input", {"required": ["nationalId"]})
TOTALS = schema_component(
    "totals-output",
    {"required": ["total"], "properties": {"total": {"type": "integer"}}},
)


def ledger(*functions: str) -> dict[str, Any]:
    return workflow(
        [state("open", 1, [transition("close", "closed")]), state("closed", 2)],
        key="ledger",
        functions=[ref(key, "sys-functions") for key in functions],
    )


def started(client: APIClient, key: str = "l-1", data: Any = None) -> str:
    body = {"key": key, "attributes": data or {"owner": "ada"}}
    response = client.post(f"{BASE}/start?sync=true", body, format="json")
    assert response.status_code == 200, response.json()
    return str(response.json()["id"])


def caller(name: str, *roles: str, drive: bool, domain_wide: bool = False) -> APIClient:
    """A user granted reading (and with `drive`, driving) ledger or the whole domain."""
    user: Any = get_user_model().objects.create_user(name, password="pw-12345678")
    grants = Group.objects.create(name=f"{name}-grants")
    WorkflowGrant.objects.create(
        group=grants,
        domain="core",
        workflow="" if domain_wide else "ledger",
        read_instances=True,
        start_instances=True,
        drive_instances=drive,
    )
    user.groups.add(grants, *(Group.objects.get_or_create(name=role)[0] for role in roles))
    client = APIClient()
    client.force_authenticate(user)
    return client


# --- verbs and bodies ---------------------------------------------------------------------------


def test_each_declared_verb_runs_with_its_body_and_another_verb_is_405_with_allow(
    operator_client,
):
    publish(function("post-entry", verbs=["POST", "PATCH", "DELETE"]), ledger("post-entry"))
    ref_ = started(operator_client)
    url = f"{BASE}/{ref_}/functions/post-entry"

    posted = operator_client.post(url, {"amount": 5, "lines": [1, 2]}, format="json")
    assert posted.status_code == 200, posted.json()
    assert posted.json() == {"postEntry": {"got": {"amount": 5, "lines": [1, 2]}, "ref": "l-1"}}

    # A form body is the JSON its bracket paths spell.
    patched = operator_client.patch(
        url,
        "amount=7&meta[by]=ada&tags[]=a",
        content_type="application/x-www-form-urlencoded",
    )
    assert patched.status_code == 200, patched.json()
    assert patched.json()["postEntry"]["got"] == {
        "amount": "7",
        "meta": {"by": "ada"},
        "tags": ["a"],
    }

    deleted = operator_client.delete(url)
    assert deleted.status_code == 200, deleted.json()
    assert deleted.json()["postEntry"]["got"] == {}  # no body: an empty object

    refused = operator_client.get(url)
    assert refused.status_code == 405, refused.json()
    assert refused["Content-Type"] == "application/problem+json"
    assert refused["Allow"] == "POST, PATCH, DELETE"
    assert refused.json()["errorCode"] == "Function:VerbNotAllowed"
    # A function only answers: the instance is untouched whatever the verb.
    assert Instance.objects.get(pk=ref_).data == {"owner": "ada"}


def test_a_function_declaring_no_verbs_answers_all_four_and_get_reads_no_body(operator_client):
    publish(function("any-verb"), ledger("any-verb"))
    ref_ = started(operator_client)
    url = f"{BASE}/{ref_}/functions/any-verb"

    for send in (operator_client.post, operator_client.patch, operator_client.delete):
        answer = send(url, {"n": 1}, format="json")
        assert (answer.status_code, answer.json()["anyVerb"]["got"]) == (200, {"n": 1})
    got = operator_client.get(url)
    assert (got.status_code, got.json()["anyVerb"]["got"]) == (200, {})


def test_a_body_that_is_not_a_json_object_is_400_at_the_root(operator_client):
    publish(function("post-entry", verbs=["POST"]), ledger("post-entry"))
    ref_ = started(operator_client)

    response = operator_client.post(f"{BASE}/{ref_}/functions/post-entry", [1, 2], format="json")

    assert response.status_code == 400, response.json()
    assert response.json()["errorCode"] == "App:900002"
    assert response.json()["errors"] == [{"pointer": "", "message": "must be an object"}]


def test_get_needs_the_read_grant_and_the_other_verbs_the_drive_grant(db):
    publish(
        function("post-entry", verbs=["GET", "POST"]),
        function("domain-entry", scope="D", verbs=["GET", "POST"], task=body_echo("1")),
        ledger("post-entry"),
    )
    reader = caller("rita", drive=False)
    driver = caller("dan", drive=True)
    ref_ = started(driver)
    url = f"{BASE}/{ref_}/functions/post-entry"

    assert reader.get(url).status_code == 200
    refused = reader.post(url, {"n": 1}, format="json")
    assert (refused.status_code, refused.json()["errorCode"]) == (403, "Authorization:110001")
    assert driver.post(url, {"n": 1}, format="json").status_code == 200

    # A domain function: the same rights, domain-wide.
    domain_reader = caller("dora", drive=False, domain_wide=True)
    domain_driver = caller("drew", drive=True, domain_wide=True)
    domain_url = f"{DOMAIN_FUNCTIONS}/domain-entry"
    assert domain_reader.get(domain_url).json() == {"domainEntry": 1}
    assert domain_reader.post(domain_url, {}, format="json").status_code == 403
    assert domain_driver.post(domain_url, {}, format="json").json() == {"domainEntry": 1}


def test_the_roles_are_checked_before_the_verb_so_a_refused_caller_learns_no_verbs(db):
    publish(
        function("post-entry", verbs=["POST"], roles=[{"role": CLERK, "grant": "allow"}]),
        ledger("post-entry"),
    )
    stranger, clerk = caller("sam", drive=True), caller("clara", CLERK, drive=True)
    ref_ = started(clerk)

    response = stranger.get(f"{BASE}/{ref_}/functions/post-entry")
    assert response.status_code == 403, response.json()
    assert clerk.get(f"{BASE}/{ref_}/functions/post-entry").status_code == 405


def test_a_domain_function_takes_verbs_and_bodies_too(operator_client):
    publish(function("domain-echo", scope="D", verbs=["PATCH"], task=body_echo("context.body")))

    answer = operator_client.patch(f"{DOMAIN_FUNCTIONS}/domain-echo", {"x": [1]}, format="json")
    assert (answer.status_code, answer.json()) == (200, {"domainEcho": {"x": [1]}})
    refused = operator_client.post(f"{DOMAIN_FUNCTIONS}/domain-echo", {}, format="json")
    assert (refused.status_code, refused["Allow"]) == (405, "PATCH")


# --- the input schema ---------------------------------------------------------------------------


def test_a_body_breaking_the_input_schema_is_400_with_pointers_and_nothing_runs(operator_client):
    counter = uuid.uuid4().hex
    with http_server() as base:
        publish(
            PAYMENT,
            http_task("pay-call", f"{base}/counted/{counter}"),
            function(
                "pay",
                verbs=["GET", "POST"],
                inputSchema=ref("payment-input", "sys-schemas"),
                task=http_ref("pay-call"),
            ),
            ledger("pay"),
        )
        ref_ = started(operator_client)
        url = f"{BASE}/{ref_}/functions/pay"

        refused = operator_client.post(url, {"amount": 0, "currency": "USD"}, format="json")
        assert refused.status_code == 400, refused.json()
        body = refused.json()
        assert body["errorCode"] == "App:900002"
        assert "input schema of function pay" in body["detail"]
        assert sorted(e["pointer"] for e in body["errors"]) == ["/amount", "/currency"]
        missing = operator_client.post(url, {}, format="json").json()["errors"]
        assert sorted(e["pointer"] for e in missing) == ["/amount", "/currency"]
        assert httpx.get(f"{base}/count/{counter}").json()["count"] == 0  # nothing ran

        accepted = operator_client.post(url, {"amount": 3, "currency": "EUR"}, format="json")
        assert accepted.status_code == 200, accepted.json()
        # A GET sends no body: nothing to check, as in vNext.
        assert operator_client.get(url).status_code == 200
        assert httpx.get(f"{base}/count/{counter}").json()["count"] == 2


def test_input_schema_rules_choose_the_schema_from_the_request(operator_client):
    rules = [
        {
            "rule": script("def handler(context):\n    return context.body.get('kind') == 'c'\n"),
            "schema": ref("company-input", "sys-schemas"),
        },
        {"schema": ref("person-input", "sys-schemas")},
    ]
    publish(
        COMPANY,
        PERSON,
        function("register", verbs=["POST"], inputSchema={"schemas": rules}),
        ledger("register"),
    )
    ref_ = started(operator_client)
    url = f"{BASE}/{ref_}/functions/register"

    company = operator_client.post(url, {"kind": "c"}, format="json")
    assert [e["pointer"] for e in company.json()["errors"]] == ["/taxNumber"]
    person = operator_client.post(url, {"kind": "p"}, format="json")
    assert [e["pointer"] for e in person.json()["errors"]] == ["/nationalId"]
    valid = operator_client.post(url, {"kind": "p", "nationalId": "1"}, format="json")
    assert valid.status_code == 200, valid.json()


# --- the output schema --------------------------------------------------------------------------


def test_an_output_breaking_the_output_schema_is_502_logged_and_never_sent(operator_client, caplog):
    publish(
        TOTALS,
        function(
            "totals",
            outputSchema=ref("totals-output", "sys-schemas"),
            task=body_echo("{'total': context.query.get('total', 'many'), 'secret': 's3'}"),
        ),
        ledger("totals"),
    )
    ref_ = started(operator_client)
    caplog.set_level(logging.ERROR, logger="vnext.functions")

    broken = operator_client.get(f"{BASE}/{ref_}/functions/totals")

    assert broken.status_code == 502, broken.json()
    body = broken.json()
    assert body["errorCode"] == "Function:OutputInvalid"
    assert "/total" in body["detail"]
    assert "s3" not in broken.content.decode()
    assert any(
        "output breaks output schema totals-output" in record.getMessage()
        for record in caplog.records
    )


def test_an_output_matching_the_output_schema_is_answered_and_error_answers_are_not_checked(
    operator_client,
):
    raw_output = script(
        "def output_handler(context):\n"
        "    if context.query.get('missing'):\n"
        "        return ScriptResponse(data={'error': 'none'}, status_code=404)\n"
        "    return {'total': 3}\n"
    )
    publish(
        TOTALS,
        function(
            "raw-totals",
            rawResponse=True,
            outputSchema=ref("totals-output", "sys-schemas"),
            onExecutionTasks=[body_echo("{}")],
            output=raw_output,
        ),
        ledger("raw-totals"),
    )
    ref_ = started(operator_client)
    url = f"{BASE}/{ref_}/functions/raw-totals"

    fine = operator_client.get(url)
    assert (fine.status_code, fine.json()) == (200, {"total": 3})
    # The script's own error answer (not 2xx) is not the output the schema describes.
    missing = operator_client.get(url, {"missing": "1"})
    assert (missing.status_code, missing.json()) == (404, {"error": "none"})


# --- catalogs -----------------------------------------------------------------------------------


def test_the_instance_catalog_lists_the_functions_the_caller_may_run_with_their_contracts(db):
    ruled_view = [
        {
            "rule": script(
                "def handler(context):\n    return context.body.get('owner') == 'ada'\n"
            ),
            "view": ref("ada-view", "sys-views"),
            "loadData": True,
        },
        {"view": ref("plain-view", "sys-views")},
    ]
    labels = [{"label": "Pay", "language": "en-US"}]
    publish(
        PAYMENT,
        TOTALS,
        view_component("ada-view", '{"for": "ada"}'),
        view_component("plain-view", '{"for": "anyone"}'),
        function(
            "pay",
            verbs=["POST"],
            labels=labels,
            inputSchema=ref("payment-input", "sys-schemas"),
            outputSchema=ref("totals-output", "sys-schemas"),
            inputView=ruled_view,
            cache={"ttlInSeconds": 5},
        ),
        function("audit", roles=[{"role": GUEST, "grant": "deny"}]),
        ledger("pay", "audit"),
    )
    clerk, guest = caller("clara", CLERK, drive=False), caller("gus", GUEST, drive=False)
    ada, bob = started(clerk, "l-ada"), started(clerk, "l-bob", {"owner": "bob"})

    catalog = clerk.get(f"{BASE}/{ada}/functions")

    assert catalog.status_code == 200, catalog.json()
    pay, audit = catalog.json()["items"]
    assert pay == {
        "key": "pay",
        "domain": "core",
        "version": "1.0.0",
        "scope": "I",
        "verbs": ["POST"],
        "rawResponse": False,
        "cacheable": True,
        "labels": labels,
        "href": f"{BASE}/{ada}/functions/pay",
        "inputSchema": {
            "key": "payment-input",
            "version": "1.0.0",
            "type": "schema",
            "schema": PAYMENT["attributes"]["schema"],
        },
        "outputSchema": {
            "key": "totals-output",
            "version": "1.0.0",
            "type": "schema",
            "schema": TOTALS["attributes"]["schema"],
        },
        "inputView": {
            "key": "ada-view",
            "version": "1.0.0",
            "content": '{"for": "ada"}',
            "type": 1,
            "display": "full-page",
            "label": None,
            "loadData": True,
        },
        "outputView": None,
    }
    assert (audit["key"], audit["verbs"]) == ("audit", ["GET", "POST", "PATCH", "DELETE"])
    # The view rules see the instance's data: another owner gets the fallback view.
    other = clerk.get(f"{BASE}/{bob}/functions").json()["items"][0]
    assert other["inputView"]["key"] == "plain-view"
    # The guest's roles refuse `audit`: it is not listed.
    assert [item["key"] for item in guest.get(f"{BASE}/{ada}/functions").json()["items"]] == ["pay"]


def test_the_domain_catalog_lists_the_newest_domain_functions_the_caller_may_run(db):
    publish(
        function("rates", scope="D", version="1.0.0"),
        function("rates", scope="D", version="1.1.0", verbs=["GET"]),
        function("instance-only"),
        function("clerks-only", scope="D", roles=[{"role": CLERK, "grant": "allow"}]),
    )
    reader = caller("rita", drive=False, domain_wide=True)
    clerk = caller("clara", CLERK, drive=False, domain_wide=True)
    workflow_only = caller("wendy", drive=False)

    listed = reader.get(DOMAIN_FUNCTIONS)

    assert listed.status_code == 200, listed.json()
    [rates] = listed.json()["items"]
    assert (rates["key"], rates["version"], rates["verbs"], rates["href"]) == (
        "rates",
        "1.1.0",
        ["GET"],
        f"{DOMAIN_FUNCTIONS}/rates",
    )
    assert [item["key"] for item in clerk.get(DOMAIN_FUNCTIONS).json()["items"]] == [
        "clerks-only",
        "rates",
    ]
    assert workflow_only.get(DOMAIN_FUNCTIONS).status_code == 403


# --- publish ------------------------------------------------------------------------------------


def test_publishing_a_function_with_an_unknown_store_or_verb_is_refused_with_pointers(
    operator_client,
):
    publish()  # the script task it runs
    document = function("badly-set", verbs=["GET", "PUT"], cache={"storeName": "nowhere"})

    response = operator_client.post("/api/v1/definitions/publish", document, format="json")

    assert response.status_code == 400, response.json()
    assert response.json()["errorCode"] == "App:900006"
    pointers = {error["pointer"] for error in response.json()["errors"]}
    assert pointers == {"/attributes/verbs/1", "/attributes/cache/storeName"}


# --- the OpenAPI document -----------------------------------------------------------------------


def test_the_openapi_document_has_every_verb_and_the_catalogs_with_their_errors(operator_client):
    paths = operator_client.get("/api/schema/", {"format": "json"}).json()["paths"]
    on_instance = paths[
        "/api/v1/{domain}/workflows/{workflow}/instances/{instance}/functions/{function}"
    ]
    on_domain = paths["/api/v1/{domain}/functions/{function}"]
    for route in (on_instance, on_domain):
        assert {"get", "post", "patch", "delete"} <= set(route)
        for verb in ("get", "post", "patch", "delete"):
            assert {"200", "400", "403", "404", "405", "502", "503"} <= set(
                route[verb]["responses"]
            )
        for verb in ("post", "patch"):
            content = route[verb]["requestBody"]["content"]
            assert {"application/json", "application/x-www-form-urlencoded"} <= set(content)
    for catalog in (
        paths["/api/v1/{domain}/workflows/{workflow}/instances/{instance}/functions"]["get"],
        paths["/api/v1/{domain}/functions"]["get"],
    ):
        assert {"200", "403", "404"} <= set(catalog["responses"])
        assert catalog["responses"]["200"]["content"]["application/json"]["schema"]
