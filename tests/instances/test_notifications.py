"""State notifications (seed 001): entering a state commits one notification job per entry;
the job evaluates the rule (false: skipped, not sent), shapes the content with the mapping and
POSTs it to the webhook, signed (HMAC-SHA256 of the body); a webhook that is down is retried
with backoff until it answers, and one that never does leaves a failed job — never a lost one."""

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
from instances.notifications import signature
from tests.engine.builders import script, state, transition, workflow
from tests.instances.scenario_api import make_due
from tests.instances.workflows import publish
from vnext.conf import notification_secret

pytestmark = pytest.mark.django_db
BASE = "/api/v1/core/workflows/noticed/instances"

MAPPING = """
def handler(context):
    return ScriptResponse(
        data={"to": "ops", "n": context.instance.data.get("n")},
        headers={"X-Topic": "review"},
    )
"""
RULE = "def handler(context):\n    return context.instance.data.get('notify', True)\n"


@dataclass
class Webhook:
    """A webhook that fails its first `failures` calls (503), then answers 200."""

    url: str = ""
    failures: int = 0
    calls: list[tuple[dict[str, str], bytes]] = field(default_factory=list)


@pytest.fixture
def webhook(settings) -> Iterator[Webhook]:
    hook = Webhook()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            hook.calls.append((dict(self.headers), body))
            status = 503 if len(hook.calls) <= hook.failures else 200
            self.send_response(status)
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


def noticed() -> dict[str, Any]:
    notification = {"type": 0, "mapping": script(MAPPING), "rule": script(RULE)}
    return workflow(
        [
            state("ready", 1, [transition("go", "review")]),
            state("review", 2, [transition("back", "ready")], notifications=[notification]),
        ],
        key="noticed",
    )


def enter_review(client: Any, **data: Any) -> str:
    started = client.post(f"{BASE}/start?sync=true", {"attributes": data}, format="json")
    instance_id = str(started.json()["id"])
    went = client.patch(f"{BASE}/{instance_id}/transitions/go?sync=true", {}, format="json")
    assert went.status_code == 200
    return instance_id


def notification_job(instance_id: str) -> Job:
    return Job.objects.get(instance_id=instance_id, kind="notification")


def test_entering_the_state_sends_its_notification_signed(operator_client, webhook):
    publish(noticed())
    instance_id = enter_review(operator_client, n=7)
    job = notification_job(instance_id)
    assert (job.status, job.payload["state"], job.payload["transition"]) == (
        "pending",
        "review",
        "go",
    )

    jobs_run_due()

    ((headers, body),) = webhook.calls
    sent = json.loads(body)
    assert sent["content"] == {"to": "ops", "n": 7}
    assert (sent["instanceId"], sent["state"], sent["transition"], sent["workflow"]) == (
        instance_id,
        "review",
        "go",
        "noticed",
    )
    assert headers["X-VNext-Signature"] == signature(body, notification_secret())
    assert headers["X-Topic"] == "review"
    assert notification_job(instance_id).status == "succeeded"


def test_a_false_rule_sends_nothing(operator_client, webhook):
    publish(noticed())
    instance_id = enter_review(operator_client, n=1, notify=False)

    jobs_run_due()

    assert webhook.calls == []
    job = notification_job(instance_id)
    assert (job.status, job.last_error) == ("skipped", "its rule is false: not sent")


def test_a_webhook_that_is_down_is_retried_until_it_answers(operator_client, webhook):
    webhook.failures = 2
    publish(noticed())
    instance_id = enter_review(operator_client, n=2)

    jobs_run_due()
    job = notification_job(instance_id)
    assert (job.status, job.attempts) == ("pending", 1)
    assert "answered 503" in job.last_error
    for _ in range(2):
        make_due(job)
        jobs_run_due()

    job = notification_job(instance_id)
    assert (job.status, job.attempts) == ("succeeded", 3)
    assert len(webhook.calls) == 3
    assert len({json.loads(body)["id"] for _, body in webhook.calls}) == 1  # one notification


def test_a_webhook_that_never_answers_leaves_a_failed_job_not_a_lost_one(
    operator_client, webhook, settings
):
    webhook.failures = 100
    settings.VNEXT = {**settings.VNEXT, "JOB_MAX_ATTEMPTS": 2}
    publish(noticed())
    instance_id = enter_review(operator_client, n=3)

    jobs_run_due()
    make_due(notification_job(instance_id))
    jobs_run_due()

    job = notification_job(instance_id)
    assert (job.status, job.attempts) == ("failed", 2)
    assert "answered 503" in job.last_error


def test_each_entry_of_the_state_notifies_again(operator_client, webhook):
    publish(noticed())
    instance_id = enter_review(operator_client, n=4)
    operator_client.patch(f"{BASE}/{instance_id}/transitions/back?sync=true", {}, format="json")
    operator_client.patch(f"{BASE}/{instance_id}/transitions/go?sync=true", {}, format="json")

    jobs_run_due()

    assert Job.objects.filter(instance_id=instance_id, kind="notification").count() == 2
    assert len(webhook.calls) == 2
