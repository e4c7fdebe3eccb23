"""Custom functions (vNext "Custom Functions"), through the HTTP API: a `sys-functions`
component the workflow declares runs its task on `GET .../instances/{id}/functions/{name}` (its
mapping's handlers in the script workers) and answers `{"<functionKey>": output}`, or with
`rawResponse` the output itself; a domain function (scope `D`) also runs without an instance on
`GET /api/v1/{domain}/functions/{name}`. Roles, undeclared names, failing tasks and the
function's own cache; the instance is never written."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from instances.models import Instance, InstanceTask
from tests.engine.builders import script, script_task, state, task_ref, transition, workflow
from tests.instances.http_server import http_server
from tests.instances.workflows import http_ref, http_task, publish
from workflows.models import WorkflowGrant

pytestmark = pytest.mark.django_db

BASE = "/api/v1/core/workflows/casebook/instances"
DOMAIN_FUNCTIONS = "/api/v1/core/functions"
CLERK, AUDITOR, GUEST = "casebook.clerk", "casebook.auditor", "casebook.guest"

SUMMARY_OUTPUT = (
    "{'caseRef': context.instance.data.get('caseRef'), 'state': context.instance.state, "
    "'role': context.headers.get('role'), 'page': context.query.get('page'), "
    "'sawCredentials': 'authorization' in context.headers}"
)


def function(key: str, *, scope: str = "I", **attributes: Any) -> dict[str, Any]:
    """A function component running `task`, else `onExecutionTasks`, else the script task with
    the summary mapping."""
    if "onExecutionTasks" not in attributes:
        attributes.setdefault("task", task_ref(SUMMARY_OUTPUT))
    return {
        "key": key,
        "domain": "core",
        "version": "1.0.0",
        "flow": "sys-functions",
        "flowVersion": "1.0.0",
        "tags": ["test"],
        "attributes": {"scope": scope, **attributes},
    }


def declared(*keys: str) -> list[dict[str, str]]:
    return [{"key": k, "domain": "core", "version": "1.0.0", "flow": "sys-functions"} for k in keys]


def casebook(*functions: str, **extra: Any) -> dict[str, Any]:
    """open -close-> closed (auditors only may read it), a `$self` note on open, declaring
    `functions`."""
    return workflow(
        [
            state("open", 1, [transition("close", "closed"), transition("note", "$self")]),
            state("closed", 2, queryRoles=[{"role": AUDITOR, "grant": "allow"}]),
        ],
        key="casebook",
        functions=declared(*functions),
        **extra,
    )


def started(client: APIClient, data: dict[str, Any] | None = None) -> str:
    response = client.post(f"{BASE}/start?sync=true", data or {"caseRef": "c-1"}, format="json")
    assert response.status_code == 200, response.json()
    return str(response.json()["id"])


def call(client: APIClient, ref: str, name: str, headers: dict[str, str] | None = None) -> Any:
    return client.get(f"{BASE}/{ref}/functions/{name}", headers=headers)


def caller(name: str, *roles: str, domain_wide: bool = False) -> APIClient:
    """A user granted casebook (or the whole domain) and holding `roles` (its groups)."""
    user: Any = get_user_model().objects.create_user(name, password="pw-12345678")
    users = Group.objects.create(name=f"{name}-grants")
    WorkflowGrant.objects.create(
        group=users,
        domain="core",
        workflow="" if domain_wide else "casebook",
        read_instances=True,
        start_instances=True,
        drive_instances=True,
    )
    user.groups.add(users, *(Group.objects.get_or_create(name=role)[0] for role in roles))
    client = APIClient()
    client.force_authenticate(user)
    return client


# --- running a declared function ----------------------------------------------------------------


def test_a_declared_function_runs_its_task_and_answers_its_output_wrapped(operator_client):
    publish(function("case-summary"), casebook("case-summary"))
    ref = started(operator_client)
    stored = Instance.objects.get(pk=ref)

    response = operator_client.get(
        f"{BASE}/{ref}/functions/case-summary?page=2",
        headers={"role": "desk", "Authorization": "Token not-for-scripts"},
    )

    assert response.status_code == 200, response.json()
    assert response.json() == {
        "caseSummary": {
            "caseRef": "c-1",
            "state": "open",
            "role": "desk",
            "page": "2",
            "sawCredentials": False,
        }
    }
    # A function only answers: no data, version, ETag or journal row of the instance changes.
    after = Instance.objects.get(pk=ref)
    assert (after.data, after.etag, after.data_version) == (
        stored.data,
        stored.etag,
        stored.data_version,
    )
    assert not InstanceTask.objects.filter(instance_id=ref, phase="function").exists()


def test_the_data_comes_from_the_task_an_http_call_without_output_handler(operator_client):
    with http_server() as base:
        publish(
            http_task("fetch-echo", f"{base}/echo", method="POST", body={"asked": "by-function"}),
            function("remote-echo", task=http_ref("fetch-echo")),
            casebook("remote-echo"),
        )
        ref = started(operator_client)

        response = call(operator_client, ref, "remote-echo")

    assert response.status_code == 200, response.json()
    # No output handler: the output is the task's response data.
    assert response.json() == {
        "remoteEcho": {"method": "POST", "body": {"asked": "by-function"}, "header": None}
    }


def test_a_raw_function_answers_its_output_as_is_with_its_output_scripts_status(operator_client):
    output = script(
        "def output_handler(context):\n"
        "    summary = context.body['script-task']\n"
        "    tasks = sorted(context.task_responses)\n"
        "    return ScriptResponse(data={'ref': summary['caseRef'], 'tasks': tasks}, "
        "status_code=201, headers={'X-Case': summary['caseRef']})\n"
    )
    raw = function(
        "case-created", rawResponse=True, onExecutionTasks=[task_ref(SUMMARY_OUTPUT)], output=output
    )
    publish(raw, function("plain-raw", rawResponse=True), casebook("case-created", "plain-raw"))
    ref = started(operator_client)

    shaped = call(operator_client, ref, "case-created")
    assert shaped.status_code == 201, shaped.json()
    assert shaped.json() == {"ref": "c-1", "tasks": ["script-task"]}
    assert shaped["X-Case"] == "c-1"

    plain = call(operator_client, ref, "plain-raw")
    assert plain.status_code == 200  # the script task's own status
    assert plain.json()["caseRef"] == "c-1"


def test_tasks_run_in_order_and_the_output_script_sees_each_ones_output(operator_client):
    first = task_ref("{'n': 1}", order=1)
    second = task_ref("{'seenBefore': sorted(context.task_responses)}", order=2, key="second")
    combined = function(
        "two-steps",
        onExecutionTasks=[first, second],
        output=script("def handler(context):\n    return context.body\n"),
    )
    publish(script_task("second"), combined, casebook("two-steps"))
    ref = started(operator_client)

    response = call(operator_client, ref, "two-steps")

    assert response.status_code == 200, response.json()
    assert response.json() == {
        "twoSteps": {"script-task": {"n": 1}, "second": {"seenBefore": ["script-task"]}}
    }


# --- who may call, and what ---------------------------------------------------------------------


def test_the_functions_roles_decide_who_may_run_it_and_authorize_says_the_same(db):
    guarded = function(
        "audit-trail",
        roles=[{"role": CLERK, "grant": "allow"}, {"role": GUEST, "grant": "deny"}],
    )
    publish(guarded, casebook("audit-trail"))
    clerk, guest_clerk, stranger = (
        caller("clara", CLERK),
        caller("gus", CLERK, GUEST),
        caller("sam"),
    )
    ref = started(clerk)

    assert call(clerk, ref, "audit-trail").status_code == 200
    for refused in (guest_clerk, stranger):
        response = call(refused, ref, "audit-trail")
        assert response.status_code == 403, response.json()
        assert response.json()["errorCode"] == "Authorization:110001"

    def authorize(client: APIClient, **params: str) -> Any:
        return client.get(
            f"{BASE}/{ref}/functions/authorize", {"functionKey": "audit-trail", **params}
        )

    assert (authorize(clerk).status_code, authorize(clerk).json()) == (200, {"allowed": True})
    assert (authorize(guest_clerk).status_code, authorize(guest_clerk).json()) == (
        403,
        {"allowed": False},
    )
    assert authorize(stranger, role=CLERK).json() == {"allowed": True}
    unknown = clerk.get(f"{BASE}/{ref}/functions/authorize", {"functionKey": "nope"})
    assert (unknown.status_code, unknown.json()["errorCode"]) == (404, "Function:NotFound")


def test_the_states_query_roles_refuse_a_caller_as_they_do_the_built_ins(db):
    publish(function("case-summary"), casebook("case-summary"))
    clerk, auditor = caller("clara", CLERK), caller("ada", AUDITOR)
    ref = started(clerk)
    assert clerk.patch(f"{BASE}/{ref}/transitions/close?sync=true", {}, format="json").json()

    refused = call(clerk, ref, "case-summary")
    assert (refused.status_code, refused.json()["errorCode"]) == (403, "Authorization:110001")
    assert call(auditor, ref, "case-summary").json()["caseSummary"]["state"] == "closed"


def test_a_name_the_workflow_does_not_declare_is_404_and_built_ins_win(operator_client):
    # `stray` is published, but casebook does not declare it.
    publish(function("stray"), function("case-summary"), casebook("case-summary"))
    ref = started(operator_client)

    for name in ("stray", "no-such-function"):
        response = call(operator_client, ref, name)
        assert response.status_code == 404, response.json()
        assert response.json()["errorCode"] == "Function:NotFound"
        assert name in response.json()["detail"]
    # The built-in functions keep their routes.
    assert call(operator_client, ref, "data").json()["data"] == {"caseRef": "c-1"}
    unknown = operator_client.get(f"{BASE}/{uuid.uuid4()}/functions/case-summary")
    assert unknown.json()["errorCode"] == "Instance:100017"


# --- failures -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("task", "cause"),
    [
        ("http 503", "Task:Http:503"),
        ("raising input handler", "Task:Script:script-task:500"),
        ("raising output handler", "Task:400008"),
    ],
)
def test_a_failing_task_answers_502_function_execution_failed_with_its_cause(
    operator_client, task, cause
):
    with http_server() as base:
        references = {
            "http 503": http_ref("broken-call"),
            "raising input handler": {
                **task_ref("{}"),
                "mapping": script(
                    "def input_handler(task, context):\n    raise ValueError('no')\n"
                ),
            },
            "raising output handler": task_ref("1 / 0"),
        }
        publish(
            http_task("broken-call", f"{base}/status/503"),
            function("fragile", task=references[task]),
            casebook("fragile"),
        )
        ref = started(operator_client)

        response = call(operator_client, ref, "fragile")

    assert response.status_code == 502, response.json()
    body = response.json()
    assert body["errorCode"] == "Function:ExecutionFailed"
    assert cause in body["detail"]
    assert body["instanceId"] == ref


# --- the function's own cache -------------------------------------------------------------------


def counted_function(
    name: str, counter: str, base: str, scope: str = "I", **cache: Any
) -> list[dict[str, Any]]:
    """A function calling `/counted/<counter>` (the server counts its calls), with `cache`."""
    return [
        http_task(f"{name}-call", f"{base}/counted/{counter}"),
        function(name, scope=scope, task=http_ref(f"{name}-call"), cache=cache),
    ]


def calls_made(client: APIClient, base: str, counter: str) -> int:
    import httpx

    count: int = httpx.get(f"{base}/count/{counter}").json()["count"]
    return count


def test_a_cached_function_answers_from_its_cache_while_the_instance_is_unchanged(
    operator_client,
):
    counter = uuid.uuid4().hex
    with http_server() as base:
        publish(
            *counted_function("cached-lookup", counter, base, key="lookup", ttlInSeconds=60),
            casebook("cached-lookup"),
        )
        ref, other = started(operator_client), started(operator_client)

        first = call(operator_client, ref, "cached-lookup")
        again = call(operator_client, ref, "cached-lookup")
        assert first.json() == again.json() == {"cachedLookup": {"counted": True}}
        assert calls_made(operator_client, base, counter) == 1
        call(operator_client, other, "cached-lookup")  # another instance: its own entry
        assert calls_made(operator_client, base, counter) == 2

        noted = operator_client.patch(
            f"{BASE}/{ref}/transitions/note?sync=true", {"n": 1}, format="json"
        )
        assert noted.status_code == 200, noted.json()
        call(operator_client, ref, "cached-lookup")  # the instance changed: run again
        assert calls_made(operator_client, base, counter) == 3


def test_without_cache_every_call_runs_and_vary_by_headers_splits_the_entries(operator_client):
    counter, varied = uuid.uuid4().hex, uuid.uuid4().hex
    with http_server() as base:
        plain = [
            http_task("plain-call", f"{base}/counted/{counter}"),
            function("uncached", task=http_ref("plain-call")),
        ]
        publish(
            *plain,
            *counted_function(
                "by-branch", varied, base, ttlInSeconds=60, varyByHeaders=["X-Branch"]
            ),
            casebook("uncached", "by-branch"),
        )
        ref = started(operator_client)

        call(operator_client, ref, "uncached")
        call(operator_client, ref, "uncached")
        assert calls_made(operator_client, base, counter) == 2

        for branch in ("north", "north", "south"):
            operator_client.get(f"{BASE}/{ref}/functions/by-branch", headers={"X-Branch": branch})
        assert calls_made(operator_client, base, varied) == 2


class BrokenCache:
    """A cache backend that is down."""

    def get(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("cache down")

    set = get


def test_a_cache_that_fails_is_bypassed_unless_the_function_says_otherwise(
    operator_client, monkeypatch, caplog
):
    publish(
        function("tolerant", cache={"ttlInSeconds": 60}),
        function("strict", cache={"ttlInSeconds": 60, "bypassOnCacheError": False}),
        casebook("tolerant", "strict"),
    )
    ref = started(operator_client)
    monkeypatch.setattr("instances.functions.cache_store", lambda name: BrokenCache())

    assert call(operator_client, ref, "tolerant").status_code == 200
    assert any("cache read failed" in record.getMessage() for record in caplog.records)
    strict = call(operator_client, ref, "strict")
    assert (strict.status_code, strict.json()["errorCode"]) == (503, "Function:CacheFailed")


# --- domain functions ---------------------------------------------------------------------------


def test_a_domain_function_runs_without_an_instance_and_caches_for_everyone(operator_client):
    counter = uuid.uuid4().hex
    with http_server() as base:
        publish(
            *counted_function("domain-echo", counter, base, scope="D", ttlInSeconds=60),
            function("instance-only"),
        )

        first = operator_client.get(f"{DOMAIN_FUNCTIONS}/domain-echo", {"q": "1"})
        again = operator_client.get(f"{DOMAIN_FUNCTIONS}/domain-echo", {"version": "1.0.0"})
        assert first.status_code == again.status_code == 200, first.json()
        assert first.json() == again.json() == {"domainEcho": {"counted": True}}
        assert calls_made(operator_client, base, counter) == 1

    for path, params in (
        ("instance-only", {}),  # scope I: it needs an instance
        ("domain-echo", {"version": "9.9.9"}),
        ("nothing-here", {}),
    ):
        response = operator_client.get(f"{DOMAIN_FUNCTIONS}/{path}", params)
        assert (response.status_code, response.json()["errorCode"]) == (404, "Function:NotFound")


def test_a_domain_function_needs_a_domain_wide_grant(db):
    publish(
        function("domain-summary", scope="D", task=task_ref("{'instance': context.instance.id}"))
    )
    workflow_only, domain_wide = caller("wendy"), caller("dora", domain_wide=True)

    assert workflow_only.get(f"{DOMAIN_FUNCTIONS}/domain-summary").status_code == 403
    answer = domain_wide.get(f"{DOMAIN_FUNCTIONS}/domain-summary")
    assert answer.status_code == 200, answer.json()
    # No instance: the scripts' context.instance is empty.
    assert answer.json() == {"domainSummary": {"instance": str(uuid.UUID(int=0))}}


# --- the OpenAPI document -----------------------------------------------------------------------


def test_the_openapi_document_types_both_routes_and_their_errors(operator_client):
    document = operator_client.get("/api/schema/", {"format": "json"}).json()
    paths = document["paths"]
    on_instance = paths[
        "/api/v1/{domain}/workflows/{workflow}/instances/{instance}/functions/{function}"
    ]["get"]
    on_domain = paths["/api/v1/{domain}/functions/{function}"]["get"]
    for operation in (on_instance, on_domain):
        assert {"200", "403", "404", "502", "503"} <= set(operation["responses"])
        assert all("schema" in parameter for parameter in operation["parameters"])
    assert {p["name"] for p in on_domain["parameters"]} == {"domain", "function", "version"}
    authorize = paths[
        "/api/v1/{domain}/workflows/{workflow}/instances/{instance}/functions/authorize"
    ]
    assert "functionKey" in {p["name"] for p in authorize["get"]["parameters"]}
