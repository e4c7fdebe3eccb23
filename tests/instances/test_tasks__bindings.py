"""DaprBinding (2) end to end over the API on PostgreSQL, through the output bindings of
settings (`VNEXT["BINDINGS"]`): a `webhook` (an HTTP call through the egress policy to a local
echo peer) and an `smtp` binding (a mail to a local aiosmtpd server). Asserted: what the peer
received, the instance data the output handler made, the task journal row, the failures (the
webhook answering 503, the SMTP server refusing the recipient, the SMTP server down) matched by
the error boundary's rule for their code, and publish refusing an unknown binding, an operation
its kind lacks, and a binding of a kind this runtime does not provide (s3)."""

from __future__ import annotations

from typing import Any

import pytest

from instances.models import Incident, Instance, InstanceTask
from tests.instances.target_peers import (
    calls_workflow,
    echo_server,
    free_port,
    publish,
    run_call,
    smtp_server,
    task_component,
)

pytestmark = pytest.mark.django_db

OUTPUT = """
def output_handler(context):
    return {"sent": context.body["data"], "ok": context.body["is_success"],
            "status": context.body["status_code"]}
"""

MAIL_MAPPING = (
    """
def input_handler(task, context):
    task.metadata["emailTo"] = context.instance.data["email"]
    return ScriptResponse(data="Your balance is " + context.instance.data["balance"])
"""
    + OUTPUT
)


def bindings(settings: Any, **entries: Any) -> None:
    settings.VNEXT = {**settings.VNEXT, "BINDINGS": entries}


def binding_task(name: str, operation: str, **config: Any) -> dict[str, Any]:
    return task_component("send", "2", {"bindingName": name, "operation": operation, **config})


def test_a_webhook_binding_posts_the_data_with_its_metadata(operator_client: Any, settings: Any):
    with echo_server() as base:
        hook = {"kind": "webhook", "url": f"{base}/hooks", "headers": {"Authorization": "Bearer s"}}
        bindings(settings, **{"notify-hook": hook})
        publish(
            binding_task(
                "notify-hook",
                "create",
                data={"event": "opened"},
                metadata={"path": "accounts", "X-Test": "meta"},
            ),
            calls_workflow("send", OUTPUT, "Task:Http:503"),
        )
        instance_id, response = run_call(operator_client, {"email": "a@b.example"})

    assert response.status_code == 200, response.json()
    assert response.json()["attributes"]["sent"] == {
        "method": "POST",
        "path": "/hooks/accounts",
        "query": {},
        "authorization": "Bearer s",
        "x_test": "meta",
        "body": {"event": "opened"},
    }
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert (journal.task_key, journal.status, journal.error_code) == ("send", "succeeded", "")


def test_a_webhook_answering_503_is_matched_by_the_error_boundary(
    operator_client: Any, settings: Any
):
    with echo_server() as base:
        bindings(settings, hook={"kind": "webhook", "url": f"{base}/status/503"})
        publish(binding_task("hook", "create"), calls_workflow("send", OUTPUT, "Task:Http:503"))
        instance_id, response = run_call(operator_client, {"email": "a@b.example"})

    assert response.status_code == 200, response.json()
    instance = Instance.objects.get(pk=instance_id)
    assert (instance.status, instance.current_state) == ("A", "gave-up")
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert (journal.status, journal.error_code) == ("failed", "Task:Http:503")


def mail_binding(port: int) -> dict[str, Any]:
    return {"kind": "smtp", "host": "127.0.0.1", "port": port, "from": "bank@example.com"}


def test_an_smtp_binding_sends_the_mail(operator_client: Any, settings: Any):
    with smtp_server() as (port, mailbox):
        bindings(settings, mail=mail_binding(port))
        publish(
            binding_task("mail", "create", metadata={"subject": "Balance", "emailCC": "cc@x.io"}),
            calls_workflow("send", MAIL_MAPPING, "Task:Binding:Refused"),
        )
        instance_id, response = run_call(
            operator_client, {"email": "ada@example.com", "balance": "120.50"}
        )

    assert response.status_code == 200, response.json()
    [(sender, recipients, message)] = mailbox.messages
    assert (sender, recipients) == ("bank@example.com", ["ada@example.com", "cc@x.io"])
    assert (message["Subject"], message["To"], message["Cc"]) == (
        "Balance",
        "ada@example.com",
        "cc@x.io",
    )
    assert str(message.get_payload()).strip() == "Your balance is 120.50"
    sent = response.json()["attributes"]["sent"]
    assert sent["accepted"] == ["ada@example.com", "cc@x.io"]
    assert (sent["refused"], sent["messageId"]) == ({}, message["Message-ID"])
    assert Instance.objects.get(pk=instance_id).current_state == "called"
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert (journal.task_key, journal.status, journal.error_code) == ("send", "succeeded", "")


def test_an_smtp_server_refusing_the_recipient_is_matched_by_the_error_boundary(
    operator_client: Any, settings: Any
):
    with smtp_server(refuse=frozenset({"gone@example.com"})) as (port, mailbox):
        bindings(settings, mail=mail_binding(port))
        publish(
            binding_task("mail", "create"),
            calls_workflow("send", MAIL_MAPPING, "Task:Binding:Refused"),
        )
        instance_id, response = run_call(
            operator_client, {"email": "gone@example.com", "balance": "1"}
        )

    assert response.status_code == 200, response.json()
    assert mailbox.messages == []
    instance = Instance.objects.get(pk=instance_id)
    assert (instance.status, instance.current_state) == ("A", "gave-up")
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert (journal.status, journal.error_code) == ("failed", "Task:Binding:Refused")
    assert "550" in journal.error_message
    assert journal.response is not None
    assert (journal.response["status_code"], journal.response["is_success"]) == (550, False)
    incident = Incident.objects.get(instance_id=instance_id)
    assert (incident.error_code, incident.boundary_action) == ("Task:Binding:Refused", "Rollback")


def test_an_smtp_server_that_is_down_fails_unavailable(operator_client: Any, settings: Any):
    bindings(settings, mail=mail_binding(free_port()))
    publish(
        binding_task("mail", "create"),
        calls_workflow("send", MAIL_MAPPING, "Task:Binding:Unavailable"),
    )
    instance_id, response = run_call(operator_client, {"email": "a@example.com", "balance": "1"})

    assert response.status_code == 200, response.json()
    assert Instance.objects.get(pk=instance_id).current_state == "gave-up"
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert (journal.status, journal.error_code) == ("failed", "Task:Binding:Unavailable")


@pytest.mark.parametrize(
    ("config", "pointer", "message"),
    [
        pytest.param(
            {"bindingName": "fax", "operation": "create"},
            "/attributes/config/bindingName",
            "the binding 'fax' is not configured: add it to VNEXT['BINDINGS'] "
            "(configured: mail, notify-hook)",
            id="unknown",
        ),
        pytest.param(
            {"bindingName": "mail", "operation": "get"},
            "/attributes/config/operation",
            "binding 'mail' is of kind 'smtp', whose operations are create, not 'get'",
            id="operation",
        ),
        pytest.param(
            {"bindingName": "archive", "operation": "create"},
            "/attributes/config/bindingName",
            "the binding 'archive' cannot be used: VNEXT['BINDINGS']['archive'] is of kind "
            "'s3', which this runtime does not provide (binding kinds: smtp, webhook)",
            id="s3",
        ),
    ],
)
def test_publish_refuses_what_no_binding_of_settings_performs(
    operator_client: Any, settings: Any, config: dict[str, Any], pointer: str, message: str
):
    bindings(
        settings,
        mail=mail_binding(25),
        **{"notify-hook": {"kind": "webhook", "url": "https://hooks.example"}},
        archive={"kind": "s3", "endpoint": "https://s3.example", "bucket": "b"},
    )
    document = task_component("send", "2", config)
    response = operator_client.post("/api/v1/definitions/publish", document, format="json")
    assert response.status_code == 400, response.json()
    [error] = response.json()["errors"]
    assert error["pointer"] == pointer
    assert error["message"].startswith(message), error["message"]
