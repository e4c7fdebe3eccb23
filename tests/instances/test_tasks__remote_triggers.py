"""Trigger tasks whose target domain another runtime serves (`VNEXT_REMOTE_DOMAINS`): the start
(11) and direct trigger (12) become calls to that runtime's public API with the operator's token,
the task's `timeoutSeconds` and `validateSsl`; a SubProcess (14) child always starts here. At
publish, the remote-call settings are refused for a domain this runtime serves, and a direct
trigger's `version` and `tags` always (they mean nothing for a transition)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from instances.engine.errors import VNextError
from instances.models import Instance, InstanceTask
from tests.engine.builders import script, script_task, state, transition, workflow
from tests.instances.scenario_api import WorkflowApi
from workflows.models import DomainReach
from workflows.services import component_publish

pytestmark = pytest.mark.django_db
RECORD = "def output_handler(context):\n    return {'answer': context.body}\n"


class RemoteRuntime(ThreadingHTTPServer):
    """A stand-in for another vNext runtime's API: it records each request and answers like
    the API would; `/slow` in a path waits 2 s first."""

    daemon_threads = True
    requests: list[dict[str, Any]]


class Handler(BaseHTTPRequestHandler):
    server: RemoteRuntime

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"null")
        self.server.requests.append(
            {
                "method": self.command,
                "path": self.path,
                "authorization": self.headers.get("Authorization"),
                "body": body,
            }
        )
        if "slow" in self.path:
            time.sleep(2)
        status, answer = (
            (409, {"errorCode": "Instance:100016", "detail": "key exists"})
            if "taken" in json.dumps(body)
            else (200, {"id": "7c1d2b7e-0000-4000-8000-000000000001", "status": "A"})
        )
        payload = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_POST = do_PATCH = _answer


@pytest.fixture
def remote(settings) -> Iterator[RemoteRuntime]:
    server = RemoteRuntime(("127.0.0.1", 0), Handler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}/api/v1"
    settings.VNEXT = {
        **settings.VNEXT,
        "REMOTE_DOMAINS": {"payments": base, "slow": base + "/slow"},
        "REMOTE_TOKENS": {"payments": "operator-token", "slow": "operator-token"},
    }
    DomainReach.objects.create(domain="core", workflow="", target_domain="payments")
    DomainReach.objects.create(domain="core", workflow="", target_domain="slow")
    yield server
    server.shutdown()
    server.server_close()


def trigger_task(name: str, task_type: str, **config: Any) -> dict[str, Any]:
    return {
        "key": name,
        "domain": "core",
        "version": "1.0.0",
        "flow": "sys-tasks",
        "flowVersion": "1.0.0",
        "tags": ["test"],
        "attributes": {"type": task_type, "config": config},
    }


def caller(task_key: str) -> dict[str, Any]:
    reference = {
        "order": 1,
        "task": {"key": task_key, "domain": "core", "version": "1.0.0", "flow": "sys-tasks"},
        "mapping": script(RECORD),
    }
    return workflow(
        [
            state("begin", 1, [transition("go", "called", onExecutionTasks=[reference])]),
            state("called", 2),
        ],
        key="caller",
    )


def publish(*documents: dict[str, Any]) -> None:
    for document in (script_task(), *documents):
        component_publish(document=document)


def test_a_start_on_a_remote_domain_calls_its_api_with_the_operators_token(operator_client, remote):
    publish(
        trigger_task("start-payment", "11", domain="payments", flow="payment", key="pay-1",
                     version="2.0.0", tags=["web"], sync=True, body={"amount": 5},
                     timeoutSeconds=5, headers={"Authorization": "Token from-the-workflow"}),
        caller("start-payment"),
    )  # fmt: skip
    api = WorkflowApi(operator_client, "caller")

    answer = api.fired(api.started(), "go")

    assert answer["attributes"]["answer"]["status_code"] == 200
    assert answer["attributes"]["answer"]["data"]["id"] == "7c1d2b7e-0000-4000-8000-000000000001"
    assert remote.requests == [
        {
            "method": "POST",
            "path": "/api/v1/payments/workflows/payment/instances/start?sync=true&version=2.0.0",
            "authorization": "Token operator-token",
            "body": {"attributes": {"amount": 5}, "tags": ["web"], "key": "pay-1"},
        }
    ]
    assert not Instance.objects.filter(domain="payments").exists()


def test_a_direct_trigger_on_a_remote_domain_patches_the_transition(operator_client, remote):
    publish(
        trigger_task("approve-payment", "12", domain="payments", flow="payment", key="pay-1",
                     transitionName="approve", body={"by": "caller"}),
        caller("approve-payment"),
    )  # fmt: skip
    api = WorkflowApi(operator_client, "caller")

    answer = api.fired(api.started(), "go")

    assert answer["attributes"]["answer"]["status_code"] == 200
    assert remote.requests == [
        {
            "method": "PATCH",
            "path": "/api/v1/payments/workflows/payment/instances/pay-1/transitions/approve"
            "?sync=false",
            "authorization": "Token operator-token",
            "body": {"attributes": {"by": "caller"}},
        }
    ]


def test_a_remote_409_fails_the_task_with_the_trigger_code(operator_client, remote):
    # With an output handler and no error boundary the run goes on (as for any task); the
    # handler saw the answer and the journal keeps the code.
    publish(
        trigger_task("start-taken", "11", domain="payments", flow="payment", key="taken",
                     sync=True),
        caller("start-taken"),
    )  # fmt: skip
    api = WorkflowApi(operator_client, "caller")

    answer = api.fired(api.started(), "go")

    assert answer["attributes"]["answer"]["status_code"] == 409
    assert answer["attributes"]["answer"]["data"]["errorCode"] == "Instance:100016"
    assert InstanceTask.objects.get(task_key="start-taken").error_code == "Task:Trigger:409"


def test_a_remote_call_past_its_timeout_seconds_fails_with_the_timeout_code(
    operator_client, remote
):
    publish(
        trigger_task("start-slow", "11", domain="slow", flow="payment", timeoutSeconds=1),
        caller("start-slow"),
    )  # fmt: skip
    api = WorkflowApi(operator_client, "caller")

    started = time.monotonic()
    answer = api.fired(api.started(), "go")

    assert time.monotonic() - started < 1.9
    assert answer["attributes"]["answer"]["status_code"] is None
    assert "timed out after 1 s" in answer["attributes"]["answer"]["error_message"]
    row = InstanceTask.objects.get(task_key="start-slow")
    assert row.error_code == "Task:Http:Timeout"


@pytest.mark.parametrize(
    ("task_type", "config", "pointers"),
    [
        pytest.param(
            "11", {"domain": "core", "flow": "w", "timeoutSeconds": 5},
            ["/attributes/config/timeoutSeconds"], id="start-timeout-on-a-local-domain",
        ),
        pytest.param(
            "11", {"domain": "core", "flow": "w", "validateSsl": False},
            ["/attributes/config/validateSsl"], id="start-tls-on-a-local-domain",
        ),
        pytest.param(
            "14", {"domain": "core", "flow": "w", "timeoutSeconds": 5},
            ["/attributes/config/timeoutSeconds"], id="subprocess-timeout",
        ),
        pytest.param(
            "14", {"domain": "payments", "flow": "w"},
            ["/attributes/config/domain"], id="subprocess-on-a-remote-domain",
        ),
        pytest.param(
            "12", {"domain": "payments", "flow": "w", "transitionName": "t", "key": "k",
                   "version": "1.0.0", "tags": ["x"]},
            ["/attributes/config/tags", "/attributes/config/version"], id="direct-version-tags",
        ),
    ],
)  # fmt: skip
def test_publish_refuses_settings_the_target_would_not_use(remote, task_type, config, pointers):
    with pytest.raises(VNextError) as refused:
        component_publish(document=trigger_task("t", task_type, **config))

    assert sorted(v.pointer for v in refused.value.violations) == pointers


def test_publish_takes_the_remote_call_settings_for_a_remote_domain(remote):
    document = trigger_task("t", "11", domain="payments", flow="w", timeoutSeconds=5,
                            validateSsl=False)  # fmt: skip

    component_publish(document=document)


def test_a_workflow_referencing_a_task_with_idle_settings_is_refused_at_the_reference(settings):
    from tests.conftest import DictResolver
    from workflows.validation import validate_component

    task = trigger_task("start-here", "11", domain="core", flow="w", timeoutSeconds=5)
    violations = validate_component(caller("start-here"), DictResolver([task]))

    pointer = "/attributes/states/0/transitions/0/onExecutionTasks/0/task"
    assert [(v.pointer, v.message) for v in violations if v.pointer == pointer] == [
        (
            pointer,
            "task start-here: config.timeoutSeconds: applies to a call to another runtime; "
            "domain 'core' is served by this one (an operator routes domains with "
            "VNEXT_REMOTE_DOMAINS)",
        )
    ]
