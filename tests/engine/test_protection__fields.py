"""The pure side of the master schema's field transforms: where fields encrypted at rest are,
sealing a patch and opening stored data (a token kept for an unchanged value), the redaction of
write-only records, and what each caller is shown (`x-masking` operators, `x-encryption` hash,
encrypt) by `shown_data`. No database."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from instances.engine.protection import (
    HIDDEN,
    REDACTED,
    TOKEN_PREFIX,
    Opened,
    as_stored,
    encrypted_paths,
    is_token,
    open_data,
    redacted,
    redacted_text,
    seal_patch,
    stored_form,
)
from instances.engine.visibility import masked, shown_data


class CountingCipher:
    """A reversible stand-in cipher that numbers its tokens (so a reused token is visible)."""

    def __init__(self) -> None:
        self.sealed = 0

    def seal(self, value: Any) -> str:
        self.sealed += 1
        return f"{self.sealed}:{json.dumps(value)}"

    def open(self, token: str) -> Any:
        return json.loads(token.split(":", 1)[1])


ALLOW_AUDITOR = [{"role": "auditor", "grant": "allow"}]
SCHEMA = {
    "type": "object",
    "properties": {
        "email": {"type": "string", "x-encryption": {"type": "encrypt", "roles": ALLOW_AUDITOR}},
        "pin": {"type": "string", "x-encryption": {"type": "persisted"}},
        "vault": {
            "type": "object",
            "properties": {"iban": {"type": "string", "x-encryption": {"type": "encrypt"}}},
        },
        "items": {
            "type": "array",
            "items": {"type": "object", "properties": {"n": {"type": "string"}}},
        },
        "phone": {"type": "string", "x-encryption": {"type": "hash"}},
        "tckn": {
            "type": "string",
            "x-encryption": {"type": "hash", "params": {"algorithm": "sha512"}},
        },
        "plain": {"type": "string", "x-encryption": {"type": "none"}},
    },
}


def test_encrypted_paths_follow_nested_properties_and_both_type_names():
    assert encrypted_paths(SCHEMA) == {("email",), ("pin",), ("vault", "iban")}
    assert encrypted_paths({"type": "object"}) == frozenset()
    assert encrypted_paths(None) == frozenset()


def test_a_patch_is_sealed_at_its_paths_and_opens_back():
    cipher = CountingCipher()
    paths = encrypted_paths(SCHEMA)
    patch = {"email": "a@b.c", "vault": {"iban": "TR01"}, "note": "x", "pin": None}

    sealed = seal_patch(patch, paths, cipher, {})
    assert is_token(sealed["email"])
    assert is_token(sealed["vault"]["iban"])
    assert sealed["note"] == "x"
    assert sealed["pin"] is None  # no value: nothing to hide
    assert patch["email"] == "a@b.c"  # the engine's patch is left as it was
    clear, opened = open_data(sealed, paths, cipher)
    assert clear == patch
    assert opened[("email",)] == Opened(sealed["email"], "a@b.c")


def test_an_unchanged_value_keeps_its_token_a_changed_one_gets_a_new_one():
    cipher = CountingCipher()
    paths = encrypted_paths(SCHEMA)
    first = seal_patch({"email": "a@b.c"}, paths, cipher, {})
    _, kept = open_data(first, paths, cipher)

    assert seal_patch({"email": "a@b.c"}, paths, cipher, kept) == first
    assert seal_patch({"email": "x@y.z"}, paths, cipher, kept)["email"] != first["email"]
    assert cipher.sealed == 2


def test_only_the_schema_paths_are_opened_never_a_look_alike_string():
    cipher = CountingCipher()
    look_alike = TOKEN_PREFIX + cipher.seal("secret")
    data = {"note": look_alike, "email": "written before the rule"}

    clear, opened = open_data(data, encrypted_paths(SCHEMA), cipher)
    assert clear == data  # a client-sent token in a plain field stays text; a clear value stays
    assert opened == {}


def test_the_stored_form_shows_tokens_and_hides_a_value_without_one():
    token = TOKEN_PREFIX + "1:x"
    opened: dict[tuple[str, ...], Opened] = {("email",): Opened(token, "a@b.c")}
    data = {"email": "a@b.c", "pin": "1234", "note": "n"}

    assert stored_form(data, encrypted_paths(SCHEMA), opened) == {
        "email": token,
        "pin": HIDDEN,
        "note": "n",
    }


def test_another_instance_sees_the_tokens_and_never_a_clear_value():
    data = {"email": TOKEN_PREFIX + "1:x", "pin": "1234", "vault": {"iban": None}, "note": "n"}

    assert as_stored(data, encrypted_paths(SCHEMA)) == {
        "email": TOKEN_PREFIX + "1:x",
        "pin": HIDDEN,
        "vault": {"iban": None},
        "note": "n",
    }


def test_records_lose_the_secrets_wherever_they_sit():
    tokens = {"a@b.c": "enc:v1:T", "1234": REDACTED}
    record = {"body": {"attributes": {"mail": "a@b.c"}, "list": ["1234", 1234, "12345"]}}

    assert redacted(record, tokens) == {
        "body": {"attributes": {"mail": "enc:v1:T"}, "list": [REDACTED, 1234, "12345"]}
    }
    assert redacted_text("bad address a@b.c (pin 1234)", tokens) == (
        f"bad address {REDACTED} (pin {REDACTED})"
    )
    assert redacted_text("pin 12", ["12"]) == "pin 12"  # too short to search text for


# --- what a caller is shown ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "value", "shown"),
    [
        ({"operator": "mask"}, "secret", "******"),
        ({"operator": "mask", "params": {"keepLast": 4}}, "4111111111111111", "************1111"),
        ({"operator": "mask", "params": {"keepFirst": 2, "keepLast": 4}}, "ada@x.com", "ad***.com"),
        ({"operator": "mask", "params": {"keepFirst": 3, "keepLast": 3}}, "short", "*****"),
        ({"operator": "mask", "params": {"maskingChar": "#", "keepLast": 2}}, "12345", "###45"),
        ({"operator": "mask", "params": {"keepLast": 2}}, 123456, "****56"),
        ({"operator": "mask"}, None, None),
        ({"operator": "replace", "params": {"value": "[gizli]"}}, "anything", "[gizli]"),
        ({"operator": "replace", "params": {"value": "[gizli]"}}, None, "[gizli]"),
        ({}, "abc", "***"),  # the operator defaults to mask
    ],
    ids=lambda value: json.dumps(value),
)
def test_each_masking_operator(rule, value, shown):
    assert masked(value, rule) == shown


def test_each_encryption_type_as_shown_to_a_caller_outside_the_exemption():
    token = TOKEN_PREFIX + "1:x"
    data = {
        "email": "a@b.c",
        "pin": "1234",
        "vault": {"iban": "TR01"},
        "phone": "555",
        "tckn": "123",
        "plain": "as is",
    }
    tokens = {("email",): Opened(token, "a@b.c"), ("vault", "iban"): Opened("enc:v1:2", "TR01")}

    shown = shown_data(SCHEMA, data, frozenset({"clerk"}), salt="s", tokens=tokens)
    assert shown == {
        "email": token,
        "pin": HIDDEN,  # no token known for it: never the value
        "vault": {"iban": "enc:v1:2"},
        "phone": hashlib.sha256(b"s555").hexdigest(),
        "tckn": hashlib.sha512(b"s123").hexdigest(),
        "plain": "as is",
    }
    auditor = shown_data(SCHEMA, data, frozenset({"auditor"}), salt="s", tokens=tokens)
    assert auditor["email"] == "a@b.c"
    assert auditor["vault"] == {"iban": "enc:v1:2"}  # no exemption roles: the token for all


def test_an_exemption_is_allow_only_and_fails_closed():
    rule = {"type": "string", "x-masking": {"operator": "mask", "roles": ALLOW_AUDITOR}}
    schema: dict[str, Any] = {"type": "object", "properties": {"v": rule}}

    assert shown_data(schema, {"v": "abc"}, frozenset({"auditor"})) == {"v": "abc"}
    for roles in (frozenset(), frozenset({"auditr"}), frozenset({"clerk"})):
        assert shown_data(schema, {"v": "abc"}, roles) == {"v": "***"}
    denying = {"operator": "mask", "roles": [{"role": "maker", "grant": "deny"}]}
    schema["properties"]["v"] = {"type": "string", "x-masking": denying}
    assert shown_data(schema, {"v": "abc"}, frozenset({"clerk"})) == {"v": "***"}


def test_a_platform_read_sees_the_data_as_the_engine_has_it():
    data = {"email": "a@b.c", "phone": "555"}
    assert shown_data(SCHEMA, data, None) is data
