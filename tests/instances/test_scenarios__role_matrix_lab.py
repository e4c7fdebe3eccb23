"""SCENARIOS.md section 9, role-matrix-lab, driven through the HTTP API by callers holding the
lab's roles (Django groups named `morph-idm.maker`, `.approver`, `.auditor`, `.viewer`): workflow
and state query roles, transition roles with deny entries, `$InstanceStarter`, `availableIn`
role narrowing, the well-known cancel/exit/updateData transitions with roles, and the master
schema's field rules on data reads (`x-roles`, `x-masking`, `x-encryption: hash`) and its
fields encrypted at rest (`vault.email`, `vault.pin`: `x-encryption: encrypt`).

Item 6, the instance function `role-matrix-summary`, deviates from SCENARIOS.md: upstream
declares its roles "but does not enforce them" (authorize says 403 to a viewer that may still
run it); here running a custom function needs what reading the instance needs (the state's query
roles) and the function's own roles, so authorize and the run agree. Deviation from the upstream
files (examples/README.md): `hashedCustomerNo` has no exemption roles in the schema, so every
caller, the auditor too, sees its digest.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from instances.models import Instance, InstanceDataVersion, InstanceTask, InstanceTransition
from tests.instances.scenario_api import WorkflowApi, import_examples
from vnext.conf import schema_hash_salt
from workflows.models import WorkflowGrant

pytestmark = pytest.mark.django_db

WORKFLOW = "role-matrix-lab"
MAKER, APPROVER, AUDITOR, VIEWER = (
    "morph-idm.maker",
    "morph-idm.approver",
    "morph-idm.auditor",
    "morph-idm.viewer",
)


def caller(name: str, *roles: str) -> WorkflowApi:
    """A user in the lab's user group (granted the workflow) and the role groups `roles`."""
    user: Any = get_user_model().objects.create_user(name, password="pw-12345678")
    lab, _ = Group.objects.get_or_create(name="role-matrix-users")
    WorkflowGrant.objects.get_or_create(
        group=lab,
        domain="core",
        workflow=WORKFLOW,
        defaults={
            "read_definitions": True,
            "read_instances": True,
            "start_instances": True,
            "drive_instances": True,
        },
    )
    user.groups.add(lab, *(Group.objects.get_or_create(name=role)[0] for role in roles))
    client = APIClient()
    client.force_authenticate(user)
    return WorkflowApi(client, WORKFLOW)


@pytest.fixture(autouse=True)
def examples(db: None) -> None:
    import_examples()


@pytest.fixture
def maker() -> WorkflowApi:
    return caller("mia", MAKER)


@pytest.fixture
def approver() -> WorkflowApi:
    return caller("arda", APPROVER)


@pytest.fixture
def auditor() -> WorkflowApi:
    return caller("aylin", AUDITOR)


@pytest.fixture
def viewer() -> WorkflowApi:
    return caller("veli", VIEWER)


def offered(api: WorkflowApi, ref: str) -> dict[str, str | None]:
    """The transitions the caller's state function offers, with their kind."""
    return {t["name"]: t.get("kind") for t in api.state(ref)["transitions"]}


def refused(response: Any, code: str = "Transition:100010") -> dict[str, Any]:
    assert response.status_code == 403, response.content
    body: dict[str, Any] = response.json()
    assert body["errorCode"] == code, body
    return body


def in_review(maker: WorkflowApi, approver: WorkflowApi) -> str:
    ref = maker.started({"attributes": {"caseRef": "case-7"}})
    assert approver.fired(ref, "submit-for-review")["status"] == "A"
    return ref


# --- 1-2. intake: start, offered transitions, submit -------------------------------------------


def test_start_enters_intake_and_a_maker_is_offered_what_its_roles_allow(maker):
    ref = maker.started({"attributes": {"caseRef": "case-1"}})

    detail = maker.detail(ref)
    assert detail["metadata"]["currentState"] == "intake"
    assert detail["attributes"]["intakeEntries"] == 1
    assert detail["attributes"]["caseRef"] == "case-1"
    assert offered(maker, ref) == {
        "submit-for-review": None,
        "record-note": None,
        "mirror-self": None,
        "cancel-role-matrix": "cancel",
        "update-role-matrix-data": "updateData",
    }


def test_a_viewer_may_not_read_the_instance_nor_submit_it(maker, viewer):
    ref = maker.started({"attributes": {"caseRef": "case-2"}})

    for name in ("state", "data", "view", "schema"):
        refused(viewer.function(ref, name), "Authorization:110001")
    refused(viewer.client.get(viewer.url(ref)), "Authorization:110001")
    body = refused(viewer.fire(ref, "submit-for-review"))
    assert "submit-for-review" in body["detail"]
    assert maker.detail(ref)["metadata"]["currentState"] == "intake"  # nothing happened


def test_the_denied_viewer_is_refused_although_it_also_holds_an_allowing_role(maker):
    both = caller("vera", MAKER, VIEWER)
    ref = maker.started()

    refused(both.fire(ref, "submit-for-review"))
    assert "submit-for-review" not in offered(both, ref)


def test_submit_for_review_by_an_approver_enters_review(maker, approver):
    ref = in_review(maker, approver)

    detail = approver.detail(ref)
    assert detail["metadata"]["currentState"] == "review"
    assert detail["attributes"]["reviewEntries"] == 1


# --- 3. review: state query roles, transition roles, availableIn narrowing ---------------------


def test_in_review_the_state_query_roles_replace_the_workflows(maker, approver, auditor):
    ref = in_review(maker, approver)

    refused(maker.function(ref, "state"), "Authorization:110001")
    refused(maker.function(ref, "data"), "Authorization:110001")
    assert approver.state(ref)["state"] == "review"
    assert auditor.state(ref)["state"] == "review"
    # The maker's listing leaves out what it may not read.
    assert [i["id"] for i in maker.listing()["items"]] == []
    assert [i["id"] for i in approver.listing()["items"]] == [ref]


def test_review_offers_each_role_its_own_transitions(maker, approver, auditor):
    ref = in_review(maker, approver)

    assert set(offered(approver, ref)) == {
        "approve",
        "reject",
        "open-review-note",
        "record-note",
        "cancel-role-matrix",
    }
    assert set(offered(auditor, ref)) == {"open-review-note", "exit-role-matrix"}


def test_approve_needs_an_approver_and_a_decision(maker, approver):
    ref = in_review(maker, approver)

    refused(maker.fire(ref, "approve", {"attributes": {"decision": "approve"}}))
    invalid = approver.fire(ref, "approve", {"attributes": {"decision": "maybe"}})
    assert invalid.status_code == 400, invalid.json()
    answer = approver.fired(ref, "approve", {"attributes": {"decision": "approve"}})

    assert answer["status"] == "C"
    assert approver.detail(ref)["metadata"]["currentState"] == "approved"
    assert approver.detail(ref)["attributes"]["decision"] == "approve"


def test_reject_is_anyone_but_the_auditor(maker, approver, auditor):
    ref = in_review(maker, approver)

    refused(auditor.fire(ref, "reject", {"attributes": {"decision": "reject"}}))
    maker.fired(ref, "reject", {"attributes": {"decision": "reject"}})

    assert auditor.detail(ref)["metadata"]["currentState"] == "rejected"


def test_escalate_is_for_the_instance_starter_only(maker, approver, auditor):
    ref = in_review(maker, approver)

    refused(approver.fire(ref, "escalate"))
    maker.fired(ref, "escalate")  # mia started it: $InstanceStarter

    refused(approver.function(ref, "state"), "Authorization:110001")  # auditor only
    assert auditor.state(ref)["state"] == "escalated"
    auditor.fired(ref, "resolve-escalation")
    assert auditor.detail(ref)["metadata"]["currentState"] == "approved"


def test_record_note_in_review_is_narrowed_to_approvers(maker, approver):
    ref = maker.started()
    maker.fired(ref, "record-note")  # intake: maker or approver
    approver.fired(ref, "submit-for-review")

    refused(maker.fire(ref, "record-note"))
    approver.fired(ref, "record-note")

    assert approver.detail(ref)["attributes"]["noteMarks"] == 2


def test_exit_only_in_review_and_only_for_the_auditor(maker, approver, auditor):
    ref = maker.started()
    response = auditor.fire(ref, "exit-role-matrix")
    assert response.status_code == 400, response.json()  # not available in intake
    approver.fired(ref, "submit-for-review")

    refused(approver.fire(ref, "exit-role-matrix"))
    auditor.fired(ref, "exit-role-matrix")

    assert auditor.detail(ref)["metadata"]["currentState"] == "exited"


def test_cancel_and_update_data_follow_their_roles(maker, auditor):
    ref = maker.started()

    refused(auditor.fire(ref, "update-role-matrix-data"))
    maker.fired(ref, "update-role-matrix-data")
    assert maker.detail(ref)["attributes"]["updateDataMarks"] == 1
    refused(auditor.fire(ref, "cancel-role-matrix"))
    maker.fired(ref, "cancel-role-matrix")

    assert maker.detail(ref)["metadata"]["currentState"] == "cancelled"


def test_an_async_transition_is_refused_before_it_is_accepted(maker, viewer):
    ref = maker.started()

    refused(viewer.fire(ref, "submit-for-review", sync=False))
    assert maker.detail(ref)["metadata"]["status"] == "A"


# --- 4. field visibility on data reads ----------------------------------------------------------


def data(api: WorkflowApi, ref: str) -> dict[str, Any]:
    response = api.function(ref, "data")
    assert response.status_code == 200, response.content
    shown: dict[str, Any] = response.json()["data"]
    return shown


def digest(value: str) -> str:
    return hashlib.sha256((schema_hash_salt() + value).encode()).hexdigest()


def test_a_maker_sees_the_unguarded_fields_and_the_masks(maker):
    ref = maker.started({"attributes": {"caseRef": "case-4"}})

    shown = data(maker, ref)
    assert shown["caseRef"] == "case-4"
    for hidden in ("decisionNote", "auditTrail", "riskScore", "accounts"):
        assert hidden not in shown
    assert shown["customer"] == {"name": "Ada Lovelace", "tckn": "********901"}
    assert shown["ownerNote"] == "for the starter only"  # mia started it
    assert shown["maskedForAll"] == "************1111"
    assert shown["maskedExceptAuditor"] == "***********************326"
    assert shown["replacedNote"] == "[gizli]"
    assert shown["hashedCustomerNo"] == digest("C-0042")
    assert re.fullmatch(r"[0-9a-f]{64}", shown["hashedCustomerNo"])


def test_the_auditor_sees_its_fields_clear(maker, auditor):
    ref = maker.started()

    shown = data(auditor, ref)
    assert shown["auditTrail"] == "created;seeded"
    assert shown["riskScore"] == 72
    assert shown["decisionNote"] == "note for deciders"
    assert shown["maskedExceptAuditor"] == "TR330006100519786457841326"
    assert shown["customer"]["tckn"] == "12345678901"
    assert shown["customer"]["segment"] == "private"
    contact = shown["customer"]["contact"]
    assert contact["address"] == {"city": "Istanbul", "line1": "Bagdat Cd. 1"}
    assert contact["email"] == "ad*********.com"
    assert contact["phone"] == digest("+905551112233")
    assert shown["maskedForAll"] == "************1111"  # masked for every caller
    assert "ownerNote" not in shown  # not the starter


def test_deny_wins_for_a_caller_holding_maker_and_approver(maker):
    both = caller("deniz", MAKER, APPROVER)
    ref = maker.started()

    shown = data(both, ref)
    assert "decisionNote" not in shown
    assert "contact" not in shown["customer"]
    assert shown["accounts"][0]["iban"] == "TR000001"  # approver's field
    assert "decisionNote" not in both.detail(ref)["attributes"]
    listed = both.listing()["items"][0]["attributes"]
    assert "decisionNote" not in listed
    assert listed["maskedForAll"] == "************1111"


def test_a_sync_answer_shows_the_caller_only_its_fields(maker):
    answer = maker.start({"attributes": {"caseRef": "case-5"}})

    assert answer.status_code == 200, answer.json()
    attributes = answer.json()["attributes"]
    assert attributes["caseRef"] == "case-5"
    assert "auditTrail" not in attributes
    assert attributes["replacedNote"] == "[gizli]"


def test_the_data_etag_differs_by_what_the_caller_sees(maker, auditor):
    ref = maker.started()

    seen_by_maker = maker.function(ref, "data")["ETag"]
    seen_by_auditor = auditor.function(ref, "data")["ETag"]
    assert seen_by_maker != seen_by_auditor
    again = maker.function(ref, "data", headers={"If-None-Match": seen_by_maker})
    assert again.status_code == 304


# --- 5. a system read sees the stored values ---------------------------------------------------


def test_mirror_self_copies_the_stored_values_whoever_fires_it(maker):
    ref = maker.started()
    maker.fired(ref, "mirror-self")

    stored = maker.detail(ref)["attributes"]
    assert stored["mirroredMasked"] == "TR330006100519786457841326"
    assert stored["mirroredAuditTrail"] == "created;seeded"
    assert stored["mirroredPhone"] == "+905551112233"
    assert stored["scriptSawVaultEmail"] == "vault@example.com"


def test_mirror_self_reads_its_own_vault_in_clear_but_its_journal_keeps_it_sealed(maker):
    ref = maker.started()
    maker.fired(ref, "mirror-self")

    stored = Instance.objects.get(pk=ref).data
    assert stored["mirroredVaultEmail"] == "vault@example.com"  # the author copied it out
    answer: Any = InstanceTask.objects.get(instance_id=ref, task_key="role-matrix-self-read-task")
    assert answer.response["data"]["vault"] == stored["vault"]  # the tokens


# --- 4. fields encrypted at rest: vault.email (auditor exempt), vault.pin ----------------------

CLEAR_VAULT = ("vault@example.com", "1234")


def test_the_vault_is_stored_as_tokens_never_in_clear(maker):
    ref = maker.started({"attributes": {"caseRef": "case-v"}})

    vault = Instance.objects.get(pk=ref).data["vault"]
    assert vault["email"].startswith("enc:v1:")
    assert vault["pin"].startswith("enc:v1:")
    assert vault["label"] == "primary"  # not encrypted
    rows = [
        Instance.objects.filter(pk=ref).values_list("data", flat=True).get(),
        *InstanceDataVersion.objects.filter(instance_id=ref).values_list("data", "patch"),
        *InstanceTask.objects.filter(instance_id=ref).values_list("response", flat=True),
        *InstanceTransition.objects.filter(instance_id=ref).values_list("body", flat=True),
    ]
    for clear in CLEAR_VAULT:
        assert json.dumps(clear) not in json.dumps(rows)  # as a JSON string value


def test_the_auditor_reads_the_vault_email_clear_and_everyone_the_pin_token(maker, auditor):
    ref = maker.started()
    stored = Instance.objects.get(pk=ref).data["vault"]

    assert data(auditor, ref)["vault"] == {
        "email": "vault@example.com",
        "pin": stored["pin"],
        "label": "primary",
    }
    assert data(maker, ref)["vault"] == stored  # the tokens, as stored
    assert maker.detail(ref)["attributes"]["vault"] == stored
    assert auditor.listing()["items"][0]["attributes"]["vault"]["email"] == "vault@example.com"


def test_the_engine_keeps_working_on_the_clear_vault(maker, approver, auditor):
    ref = in_review(maker, approver)
    approver.fired(ref, "record-note")  # a transition that rewrites the data, not the vault

    before = Instance.objects.get(pk=ref).data["vault"]
    assert data(auditor, ref)["vault"]["email"] == "vault@example.com"
    auditor.fired(ref, "exit-role-matrix")
    assert Instance.objects.get(pk=ref).data["vault"] == before  # tokens kept, not re-sealed


def test_a_filter_or_sort_on_the_vault_is_refused(maker):
    maker.started()

    for params in (
        {"filter": json.dumps({"attributes.vault.email": {"eq": "vault@example.com"}})},
        {"filter": "attributes.vault.pin eq '1234'"},
        {"sort": json.dumps({"field": "attributes.vault.email"})},
    ):
        response = maker.client.get(maker.base, params)
        assert response.status_code == 400, response.content
        body = response.json()
        assert body["errorCode"] == "invalid_column"
        assert "encrypted at rest" in body["detail"]
    assert maker.listing(filter=json.dumps({"attributes.vault.label": {"eq": "primary"}}))["items"]


# --- authorize ----------------------------------------------------------------------------------


def authorize(api: WorkflowApi, ref: str, **params: str) -> tuple[int, Any]:
    response = api.client.get(api.url(ref, "functions", "authorize"), params)
    return response.status_code, response.json()


# --- 6. the instance function role-matrix-summary ----------------------------------------------

SUMMARY = "role-matrix-summary"


def test_the_summary_function_answers_the_case_to_the_roles_it_allows(
    maker, approver, auditor, viewer
):
    ref = maker.started({"attributes": {"caseRef": "case-6"}})
    maker.fired(ref, "record-note")

    response = approver.function(ref, SUMMARY, headers={"role": "approver", "position": "desk-2"})
    assert response.status_code == 200, response.content
    assert response.json() == {
        "roleMatrixSummary": {
            "caseRef": "case-6",
            "decision": None,
            "noteMarks": 1,
            "observedRole": "approver",
            "observedPosition": "desk-2",
            "executed": True,
        }
    }
    # Its roles allow approvers and auditors, deny viewers: a maker reads the case but may not
    # run it, a viewer may do neither; authorize answers the same.
    refused(maker.function(ref, SUMMARY), "Authorization:110001")
    refused(viewer.function(ref, SUMMARY), "Authorization:110001")
    assert authorize(approver, ref, functionKey=SUMMARY) == (200, {"allowed": True})
    assert authorize(maker, ref, functionKey=SUMMARY) == (403, {"allowed": False})
    assert authorize(viewer, ref, functionKey=SUMMARY) == (403, {"allowed": False})
    assert authorize(maker, ref, functionKey=SUMMARY, role=AUDITOR) == (200, {"allowed": True})

    approver.fired(ref, "submit-for-review")
    approver.fired(ref, "approve", {"attributes": {"decision": "approve"}})
    summary = auditor.function(ref, SUMMARY).json()["roleMatrixSummary"]
    assert (summary["decision"], summary["observedRole"]) == ("approve", None)
    # Running it wrote nothing: the note count is what the transitions left.
    assert auditor.detail(ref)["attributes"]["noteMarks"] == 1


def test_authorize_answers_for_the_caller_or_for_named_roles(maker, approver, viewer):
    ref = maker.started()

    assert authorize(maker, ref, transitionKey="submit-for-review") == (200, {"allowed": True})
    assert authorize(viewer, ref, transitionKey="submit-for-review") == (403, {"allowed": False})
    assert authorize(maker, ref, transitionKey="submit-for-review", role=VIEWER) == (
        403,
        {"allowed": False},
    )
    assert authorize(viewer, ref, queryRoles="true") == (403, {"allowed": False})
    assert authorize(maker, ref, queryRoles="true", role=f"{VIEWER},{AUDITOR}") == (
        200,
        {"allowed": True},
    )
    assert authorize(viewer, ref) == (403, {"allowed": False})  # the default: may it read?
    status, body = authorize(maker, ref, ack="banana")
    assert status == 400
    assert body["errors"] == [{"pointer": "/ack", "message": "must be true or false"}]
    approver.fired(ref, "submit-for-review")
    # In review the maker may not read, but may still ask.
    assert authorize(maker, ref, queryRoles="true") == (403, {"allowed": False})
