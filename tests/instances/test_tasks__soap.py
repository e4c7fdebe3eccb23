"""SoapTask (16) end to end over the API on PostgreSQL, against a local SOAP 1.1 service (a
canned WSGI app on wsgiref, on a loopback port the egress allow-list names): the envelope the
input handler fills is POSTed with its SOAPAction; the answer's Body becomes the response data
the output handler writes into the instance; a SOAP fault fails the task `Task:Soap:Fault` with
the fault's code and string, matched by the error boundary's rule for that code; a fault under
`acceptedStatusCodes` is the output handler's to read. Plus the engine's envelope and body
handling on their own (wrapping a bare Body content, namespaces, DOCTYPE refused)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import pytest

from instances.engine.task_types.base import TaskFailure
from instances.engine.task_types.soap import soap_body, soap_envelope
from instances.models import Incident, Instance, InstanceTask
from tests.instances.target_peers import (
    calls_workflow,
    publish,
    run_call,
    soap_server,
    task_component,
)

ENVELOPE = (
    '<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/">'
    '<soap:Body><b:GetBalance xmlns:b="urn:bank"><b:account>ACCOUNT</b:account></b:GetBalance>'
    "</soap:Body></soap:Envelope>"
)

MAPPING = """
def input_handler(task, context):
    task.body = task.body.replace("ACCOUNT", context.instance.data["account"])
    return None

def output_handler(context):
    return {"soap": context.body["data"], "status": context.body["status_code"],
            "ok": context.body["is_success"], "error": context.body["error_message"]}
"""


def soap_task(url: str, **config: Any) -> dict[str, Any]:
    return task_component(
        "balance",
        "16",
        {"url": url, "soapAction": "urn:bank/GetBalance", "body": ENVELOPE, **config},
    )


@pytest.fixture
def soap_url(settings: Any) -> Any:
    """The SOAP service, its host:port allowed by name (and nothing else on loopback)."""
    with soap_server() as url:
        parsed = urlparse(url)
        settings.VNEXT = {
            **settings.VNEXT,
            "EGRESS_ALLOW_CIDRS": [],
            "EGRESS_ALLOW_HOSTS": [f"{parsed.hostname}:{parsed.port}"],
        }
        yield url


@pytest.mark.django_db
def test_a_soap_call_turns_the_answers_body_into_instance_data(operator_client: Any, soap_url: str):
    publish(soap_task(soap_url), calls_workflow("balance", MAPPING, "Task:Soap:Fault"))
    instance_id, response = run_call(operator_client, {"account": "TR-1"})

    assert response.status_code == 200, response.json()
    assert response.json()["attributes"] == {
        "account": "TR-1",
        "soap": {
            "GetBalanceResponse": {
                "account": "TR-1",
                "balance": {"@currency": "TRY", "#text": "120.50"},
                "action": '"urn:bank/GetBalance"',
            }
        },
        "status": 200,
        "ok": True,
        "error": None,
    }
    assert Instance.objects.get(pk=instance_id).current_state == "called"
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert (journal.task_key, journal.status, journal.error_code) == ("balance", "succeeded", "")
    assert journal.response is not None
    assert journal.response["headers"]["content-type"].startswith("text/xml")


@pytest.mark.django_db
def test_a_soap_fault_fails_the_task_and_the_boundary_matches_its_code(
    operator_client: Any, soap_url: str
):
    publish(soap_task(soap_url), calls_workflow("balance", MAPPING, "Task:Soap:Fault"))
    instance_id, response = run_call(operator_client, {"account": "closed-7"})

    assert response.status_code == 200, response.json()
    instance = Instance.objects.get(pk=instance_id)
    # The Task:Soap:Fault rule rolled back to give-up (any other code would have aborted).
    assert (instance.status, instance.current_state) == ("A", "gave-up")
    [journal] = InstanceTask.objects.filter(instance_id=instance_id)
    assert (journal.status, journal.error_code) == ("failed", "Task:Soap:Fault")
    assert journal.error_message == "SOAP fault soap:Client: Account closed-7 is closed"
    assert journal.response is not None
    assert journal.response["status_code"] == 500
    assert journal.response["data"] == {
        "Fault": {"faultcode": "soap:Client", "faultstring": "Account closed-7 is closed"}
    }
    incident = Incident.objects.get(instance_id=instance_id)
    assert (incident.error_code, incident.boundary_action, incident.resolved) == (
        "Task:Soap:Fault",
        "Rollback",
        True,
    )


@pytest.mark.django_db
def test_a_fault_under_accepted_status_codes_is_the_output_handlers_to_read(
    operator_client: Any, soap_url: str
):
    publish(
        soap_task(soap_url, acceptedStatusCodes=["500"]),
        calls_workflow("balance", MAPPING, "Task:Soap:Fault"),
    )
    instance_id, response = run_call(operator_client, {"account": "closed-8"})

    assert response.status_code == 200, response.json()
    data = response.json()["attributes"]
    assert data["soap"]["Fault"]["faultstring"] == "Account closed-8 is closed"
    assert (data["status"], data["ok"]) == (500, True)
    assert Instance.objects.get(pk=instance_id).current_state == "called"


@pytest.mark.django_db
def test_a_soap_service_the_egress_policy_does_not_allow_is_never_called(
    operator_client: Any, settings: Any
):
    with soap_server() as url:
        settings.VNEXT = {**settings.VNEXT, "EGRESS_ALLOW_CIDRS": [], "EGRESS_ALLOW_HOSTS": []}
        publish(soap_task(url), calls_workflow("balance", MAPPING, "Task:Soap:Fault"))
        _, response = run_call(operator_client, {"account": "TR-1"})
    assert response.json()["error"]["errorCode"] == "Task:EgressRefused"


def test_a_bare_body_content_is_wrapped_in_an_envelope_of_the_version():
    wrapped = soap_envelope('<m:Ping xmlns:m="urn:x"/>', "1.2").decode()
    assert '<soap:Envelope xmlns:soap="http://www.w3.org/2003/05/soap-envelope">' in wrapped
    assert "<soap:Body><m:Ping" in wrapped
    # An envelope of the other version is refused, not sent.
    with pytest.raises(TaskFailure) as refused:
        soap_envelope(ENVELOPE, "1.2")
    assert refused.value.code == "Task:Soap:InvalidMessage"


def test_a_soap_12_fault_gives_its_code_and_reason_and_a_doctype_is_refused():
    fault = (
        '<e:Envelope xmlns:e="http://www.w3.org/2003/05/soap-envelope"><e:Body><e:Fault>'
        "<e:Code><e:Value>e:Receiver</e:Value></e:Code>"
        '<e:Reason><e:Text xml:lang="en">down</e:Text></e:Reason></e:Fault></e:Body></e:Envelope>'
    )
    _, found = soap_body(fault)
    assert found == ("e:Receiver", "down")
    with pytest.raises(ValueError, match="DOCTYPE"):
        soap_body('<!DOCTYPE x [<!ENTITY a "b">]>' + fault)
    with pytest.raises(ValueError, match="not a SOAP Envelope"):
        soap_body("<html/>")


def test_repeated_elements_become_one_list_and_a_deep_answer_is_refused():
    envelope = '<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body>{}</s:Body></s:Envelope>'
    rows = "".join(f"<row>{n}</row>" for n in range(50_000))
    data, fault = soap_body(envelope.format(f"<list>{rows}</list>"))
    assert fault is None
    assert data["list"]["row"] == [str(n) for n in range(50_000)]

    nested = "<a>" * 5_000 + "x" + "</a>" * 5_000
    with pytest.raises(ValueError, match="deeper than 64"):
        soap_body(envelope.format(nested))
