"""Publishing a schema whose fields are encrypted at rest needs a configured key (else 400
`App:900006` at each rule, "encryption key not configured"); a malformed key refuses to boot.
The other field-rule checks are mutations of the corpus master schema
(test_validation__mutations.py)."""

from __future__ import annotations

import copy
from io import StringIO
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command

from instances.field_encryption import key_problem
from tests.conftest import DictResolver
from workflows.validation import validate_component

PUBLISH = "/api/v1/definitions/publish"
MASTER = "Schemas/role-matrix-lab/role-matrix-master.json"
VAULT = "/attributes/schema/properties/vault/properties"
NOT_CONFIGURED = (
    "encryption key not configured: set VNEXT_ENCRYPTION_KEYS before publishing a schema that "
    "encrypts a field at rest"
)
A_KEY, B_KEY = Fernet.generate_key().decode(), Fernet.generate_key().decode()


@pytest.fixture
def keys(settings: Any) -> Any:
    def use(*configured: str) -> None:
        settings.VNEXT = {**settings.VNEXT, "ENCRYPTION_KEYS": list(configured)}

    return use


@pytest.fixture
def master(corpus_doc: Any) -> dict[str, Any]:
    document: dict[str, Any] = corpus_doc(MASTER)
    return document


def test_with_a_key_the_master_schema_is_valid(master, keys):
    keys(A_KEY)
    assert validate_component(copy.deepcopy(master), DictResolver([])) == []


def test_without_a_key_each_field_encrypted_at_rest_is_refused(master, keys):
    keys()
    violations = validate_component(copy.deepcopy(master), DictResolver([]))

    assert [(v.pointer, v.message) for v in violations] == [
        (f"{VAULT}/email/x-encryption/type", NOT_CONFIGURED),
        (f"{VAULT}/pin/x-encryption/type", NOT_CONFIGURED),
    ]


@pytest.mark.django_db
def test_publishing_it_without_a_key_is_400_with_the_pointers(operator_client, master, keys):
    keys()
    response = operator_client.post(PUBLISH, master, format="json")

    assert response.status_code == 400, response.content
    body = response.json()
    assert body["errorCode"] == "App:900006"
    assert body["errors"] == [
        {"pointer": f"{VAULT}/email/x-encryption/type", "message": NOT_CONFIGURED},
        {"pointer": f"{VAULT}/pin/x-encryption/type", "message": NOT_CONFIGURED},
    ]
    keys(A_KEY)
    assert operator_client.post(PUBLISH, master, format="json").status_code == 200


def test_every_masking_and_hash_shape_the_reads_apply_is_accepted(master):
    fields = master["attributes"]["schema"]["properties"]
    fields["maskedForAll"]["x-masking"]["params"] = {"maskingChar": "#", "keepFirst": 0}
    fields["hashedCustomerNo"]["x-encryption"]["params"] = {"algorithm": "sha512"}
    fields["plainNote"] = {"type": "string", "x-encryption": {"type": "none"}}
    fields["accounts"]["items"]["properties"]["iban"]["x-masking"] = {
        "operator": "mask",
        "params": {"keepLast": 2},
    }
    assert validate_component(master, DictResolver([])) == []


@pytest.mark.parametrize(
    ("keys", "problem"),
    [
        ([A_KEY], None),
        ([A_KEY, B_KEY], None),
        ([], None),
        (["not-a-key"], "VNEXT_ENCRYPTION_KEYS key #1 is not a Fernet key"),
        ([A_KEY, "c2hvcnQ="], "VNEXT_ENCRYPTION_KEYS key #2 is not a Fernet key"),
        ("one-string", "VNEXT_ENCRYPTION_KEYS must be a list of keys"),
    ],
)
def test_keys_are_checked(keys, problem):
    found = key_problem(keys)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert found.startswith(problem)


def test_a_malformed_key_refuses_to_boot(settings):
    settings.VNEXT = {**settings.VNEXT, "ENCRYPTION_KEYS": ["not-a-key"]}

    with pytest.raises(ImproperlyConfigured, match="key #1 is not a Fernet key"):
        apps.get_app_config("instances").ready()


def test_check_deploy_warns_about_a_derived_key(settings):
    settings.ENCRYPTION_KEYS_DERIVED = True
    out = StringIO()
    call_command("check", "--deploy", stdout=out, stderr=out, fail_level="CRITICAL")
    assert "vnext.W002" in out.getvalue()
