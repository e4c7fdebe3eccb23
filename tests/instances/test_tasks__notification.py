"""Notification tasks (task type 10) end to end on PostgreSQL, through the HTTP API and a local
webhook: the transition that runs the task commits one `task-notification` job per dispatched
channel; the jobs POST each message to the webhook, signed, with its channel (`sms` shaped by
the mapping's `channel_handler`, `state` the instance's state function with `enrich`'s headers);
a skipped channel sends nothing; a webhook that is down is retried until it answers."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from instances.job_handlers import jobs_run_due
from instances.job_table import Job
from instances.models import InstanceTask
from instances.notifications import signature
from instances.status import JobKind
from tests.engine.builders import script, state, task_component, transition, workflow
from tests.instances.scenario_api import make_due
from tests.instances.workflows import publish
from vnext.conf import notification_secret

pytestmark = pytest.mark.django_db
BASE = "/api/v1/core/workflows/approvals/instances"

MAPPING = """
def channel_handler(channel, context):
    if channel == "email":
        return None
    return ScriptResponse(
        data={"to": context.instance.data.get("phone"), "text": "approved"},
        headers={"X-Correlation-Id": context.instance.id},
    )


def enrich(context):
    return {"X-Device-Id": context.instance.data.get("device", "none")}
"""


@dataclass
class Webhook:
    """A webhook that answers 503 to its first `failures` calls, then 200."""

    url: str = ""
    failures: int = 0
    calls: list[tuple[dict[str, str], bytes]] = field(default_factory=list)

    def sent(self) -> dict[str, tuple[dict[str, str], dict[str, Any]]]:
        """The last message received per channel: (headers, body)."""
        return {
            headers["X-VNext-Channel"]: (headers, json.loads(body)) for headers, body in self.calls
        }


@pytest.fixture
def webhook(settings: Any) -> Iterator[Webhook]:
    hook = Webhook()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            hook.calls.append((dict(self.headers), body))
            self.send_response(503 if len(hook.calls) <= hook.failures else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hook.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/vnext"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.VNEXT = {**settings.VNEXT, "NOTIFICATION_WEBHOOK_URL": hook.url}
    yield hook
    server.shutdown()
    server.server_close()


def approvals() -> None:
    notify = {
        "order": 1,
        "task": {"key": "notify", "domain": "core", "version": "1.0.0", "flow": "sys-tasks"},
        "mapping": script(MAPPING),
    }
    publish(
        task_component("notify", "10", {"channels": ["sms", "email"]}),
        workflow(
            [
                state("draft", 1, [transition("approve", "approved")]),
                state("approved", 2, onEntries=[notify]),
            ],
            key="approvals",
        ),
    )


def approve(client: Any) -> str:
    started = client.post(
        f"{BASE}/start?sync=true",
        {"attributes": {"phone": "+90555", "device": "device-7"}},
        format="json",
    )
    instance_id = str(started.json()["id"])
    response = client.patch(
        f"{BASE}/{instance_id}/transitions/approve?sync=true",
        {},
        format="json",
    )
    assert response.status_code == 200, response.json()
    return instance_id


def task_jobs(instance_id: str) -> list[Job]:
    jobs = Job.objects.filter(instance_id=instance_id, kind=JobKind.TASK_NOTIFICATION)
    return list(jobs.order_by("pk"))


def test_the_transition_commits_one_job_per_channel_and_each_is_posted_signed(
    operator_client, webhook
):
    approvals()
    instance_id = approve(operator_client)
    jobs = task_jobs(instance_id)
    assert [(job.status, job.payload["channel"]) for job in jobs] == [
        ("pending", "sms"),
        ("pending", "state"),
    ]
    (row,) = InstanceTask.objects.filter(instance_id=instance_id, task_key="notify")
    assert isinstance(row.response, dict)
    assert row.response["data"] == {
        "dispatched": ["sms", "state"],
        "skipped": ["email"],
        "errors": [],
    }

    jobs_run_due()

    sent = webhook.sent()
    assert set(sent) == {"sms", "state"}
    for headers, body in sent.values():
        raw = next(
            raw for h, raw in webhook.calls if h["X-VNext-Channel"] == headers["X-VNext-Channel"]
        )
        assert headers["X-VNext-Signature"] == signature(raw, notification_secret())
        assert (body["instanceId"], body["state"], body["task"]) == (
            instance_id,
            "approved",
            "notify",
        )
    sms_headers, sms = sent["sms"]
    assert sms["content"] == {"to": "+90555", "text": "approved"}
    assert sms_headers["X-Correlation-Id"] == instance_id
    state_headers, state_body = sent["state"]
    assert (state_body["content"]["state"], state_body["content"]["status"]) == ("approved", "A")
    assert state_body["content"]["eTag"]
    assert state_headers["X-Device-Id"] == "device-7"
    assert [job.status for job in task_jobs(instance_id)] == ["succeeded", "succeeded"]


def test_a_webhook_that_is_down_is_retried_and_nothing_is_lost(operator_client, webhook):
    webhook.failures = 1
    approvals()
    instance_id = approve(operator_client)

    jobs_run_due()
    retried = [job for job in task_jobs(instance_id) if job.status == "pending"]
    assert len(retried) == 1
    assert "answered 503" in retried[0].last_error
    make_due(retried[0])
    jobs_run_due()

    assert [job.status for job in task_jobs(instance_id)] == ["succeeded", "succeeded"]
    assert set(webhook.sent()) == {"sms", "state"}
    assert len(webhook.calls) == 3
