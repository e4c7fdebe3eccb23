"""Publish-time checks of helper libraries (`scripts.helpers`): every helper a workflow or a
script declares exists, has a key that makes a module name (`rsa-crypto` is `rsa_crypto`) no
other helper of the script takes, compiles under the scripts' policy and imports only what the
scripts that may import it may; a script imports only the helpers declared for it. Each problem
is reported at the pointer of the helper entry, or of the importing script's `code`.
`allowedAssemblies` (.NET) is accepted and has no effect."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.conftest import DictResolver
from tests.engine.builders import script, state, transition, workflow
from workflows.validation import validate_component

HELPERS = "/attributes/scripts/helpers"
MAPPING = "/attributes/states/0/transitions/0/mapping"
RULE = "/attributes/states/1/transitions/0/rule"
LIMITS = "def over(amount, limit=1000):\n    return amount > limit\n"
USES_LIMITS = "import limits\n\ndef handler(context):\n    return limits.over(1)\n"
PLAIN = "def handler(context):\n    return {}\n"


def mapping_component(key: str, source: str, version: str = "1.0.0") -> dict[str, Any]:
    return {
        "key": key,
        "domain": "core",
        "version": version,
        "flow": "sys-mappings",
        "flowVersion": "1.0.0",
        "tags": ["test"],
        "attributes": {"name": "Helper", "code": source, "encoding": "NAT"},
    }


def ref(key: str, version: str = "1.0.0") -> dict[str, str]:
    return {"key": key, "domain": "core", "version": version, "flow": "sys-mappings"}


def flow(
    mapping: str = PLAIN,
    rule: str = USES_LIMITS,
    *,
    helpers: list[dict[str, str]] | None = None,
    mapping_helpers: list[dict[str, str]] | None = None,
    **scripts: Any,
) -> dict[str, Any]:
    """draft -submit (mapping)-> check -auto (rule)-> done; the workflow declares `helpers`
    (default: limits) and `scripts` settings, the mapping `mapping_helpers`."""
    mapping_node: dict[str, Any] = script(mapping)
    if mapping_helpers is not None:
        mapping_node["scripts"] = {"helpers": mapping_helpers}
    return workflow(
        [
            state("draft", 1, [transition("submit", "check", mapping=mapping_node)]),
            state("check", 2, [transition("auto", "done", 1, rule=script(rule))]),
            state("done", 3),
        ],
        scripts={"helpers": [ref("limits")] if helpers is None else helpers, **scripts},
    )


COMPONENTS = [
    mapping_component("limits", LIMITS),
    mapping_component("limits", "def over(amount):\n    return amount > 5\n", version="2.0.0"),
    mapping_component(
        "rsa-crypto", "import json\n\ndef wrap(text):\n    return json.dumps(text)\n"
    ),
    mapping_component("rsa_crypto", "def wrap(text):\n    return text\n"),
    mapping_component(
        "stats", "import statistics\n\ndef mean(xs):\n    return statistics.mean(xs)\n"
    ),
    mapping_component(
        "uses-limits", "import limits\n\ndef twice(x):\n    return limits.over(2 * x)\n"
    ),
    mapping_component("escapes", "import os\n\ndef cwd():\n    return os.getcwd()\n"),
    mapping_component("dunder", "def f():\n    return ().__class__\n"),
    mapping_component("broken", "def f(:\n"),
    mapping_component("empty", "   "),
    mapping_component("json", "def f():\n    return 1\n"),
    mapping_component("2fa", "def f():\n    return 1\n"),
    mapping_component("ping", "import pong\n\ndef f():\n    return 1\n"),
    mapping_component("pong", "import ping\n\ndef g():\n    return 2\n"),
]


def violations(document: dict[str, Any]) -> list[tuple[str, str]]:
    resolver = DictResolver(copy.deepcopy(COMPONENTS))
    return [(v.pointer, v.message) for v in validate_component(document, resolver)]


def test_a_workflow_whose_scripts_import_its_helpers_is_valid():
    assert violations(flow()) == []


@pytest.mark.parametrize(
    ("mapping", "helpers", "mapping_helpers"),
    [
        pytest.param(
            "from helpers import rsa_crypto\n\ndef handler(context):\n    return {}\n",
            [ref("limits"), ref("rsa-crypto")],
            None,
            id="two workflow helpers, one with a dashed key",
        ),
        pytest.param(
            "import rsa_crypto\n\ndef handler(context):\n    return {}\n",
            None,
            [ref("rsa-crypto")],
            id="a script's own helper",
        ),
        pytest.param(
            "import limits\n\ndef handler(context):\n    return {}\n",
            None,
            [ref("limits")],
            id="a script declaring its workflow's helper again",
        ),
        pytest.param(
            "import uses_limits\n\ndef handler(context):\n    return {}\n",
            None,
            [ref("uses-limits")],
            id="a script's helper importing the workflow's helper",
        ),
    ],
)
def test_declared_helpers_may_be_imported(mapping, helpers, mapping_helpers):
    document = flow(mapping, helpers=helpers, mapping_helpers=mapping_helpers)
    assert violations(document) == []


def test_allowed_assemblies_are_accepted_and_do_nothing():
    document = flow(allowedAssemblies=["System.Security.Cryptography"])
    assert violations(document) == []


@pytest.mark.parametrize(
    ("helpers", "pointer", "words"),
    [
        pytest.param([ref("json")], f"{HELPERS}/0", "standard library module", id="stdlib name"),
        pytest.param([ref("2fa")], f"{HELPERS}/0", "not a Python module name", id="digit first"),
        pytest.param(
            [ref("limits"), ref("limits", "2.0.0")],
            f"{HELPERS}/1",
            "would be imported as 'limits', the name of helper mapping:core/limits@1.0.0 "
            "declared at /attributes/scripts/helpers/0",
            id="two versions",
        ),
        pytest.param(
            [ref("limits"), ref("limits")], f"{HELPERS}/1", "would be imported as", id="twice"
        ),
        pytest.param(
            [ref("limits"), ref("rsa-crypto"), ref("rsa_crypto")],
            f"{HELPERS}/2",
            "would be imported as 'rsa_crypto'",
            id="keys with the same module name",
        ),
        pytest.param(
            [ref("limits"), ref("missing")],
            f"{HELPERS}/1",
            "referenced mapping:core/missing@1.0.0 does not exist",
            id="missing (the reference check's words)",
        ),
        pytest.param([ref("limits"), ref("empty")], f"{HELPERS}/1", "script missing", id="no code"),
        pytest.param(
            [ref("limits"), ref("broken")],
            f"{HELPERS}/1",
            "helper mapping:core/broken@1.0.0: line 1:",
            id="syntax error",
        ),
        pytest.param(
            [ref("limits"), ref("dunder")],
            f"{HELPERS}/1",
            'line 2: "__class__" is an invalid attribute name',
            id="dunder attribute",
        ),
        pytest.param(
            [ref("limits"), ref("escapes")],
            f"{HELPERS}/1",
            "helper mapping:core/escapes@1.0.0: line 1: module 'os' is not one scripts may import",
            id="import os",
        ),
        pytest.param(
            [ref("limits"), ref("stats")],
            f"{HELPERS}/1",
            "helper mapping:core/stats@1.0.0: line 1: import of 'statistics' is not allowed",
            id="a module the workflow does not allow",
        ),
        pytest.param(
            [ref("uses-limits")],
            f"{HELPERS}/0",
            "no helper 'limits' is declared",
            id="a helper importing an undeclared helper",
        ),
    ],
)
def test_a_workflow_helper_that_cannot_be_imported_is_refused_at_its_entry(helpers, pointer, words):
    # The rule still imports limits: when the entry refused is limits, it is refused too.
    found = violations(flow(helpers=helpers, rule=PLAIN))
    assert [p for p, _ in found] == [pointer], found
    assert words in found[0][1]


def test_a_helper_may_use_the_modules_the_workflow_allows():
    document = flow(helpers=[ref("limits"), ref("stats")], allowedModules=["statistics"])
    assert violations(document) == []


def test_a_circular_import_of_helpers_is_accepted_at_publish_and_refused_at_run_time():
    # Both are declared, so each import is admitted; the worker refuses the cycle when run
    # (tests/engine/test_scripts__helpers.py).
    assert violations(flow(helpers=[ref("limits"), ref("ping"), ref("pong")])) == []


def test_a_script_helper_clashing_with_a_workflow_helper_is_refused_at_the_script_entry():
    document = flow(mapping_helpers=[ref("limits", "2.0.0")])
    assert violations(document) == [
        (
            f"{MAPPING}/scripts/helpers/0",
            "helper mapping:core/limits@2.0.0 would be imported as 'limits', the name of helper "
            "mapping:core/limits@1.0.0 declared at /attributes/scripts/helpers/0",
        )
    ]


@pytest.mark.parametrize(
    "imports",
    ["import limits", "from helpers import limits", "import helpers.limits", "import helpers"],
)
def test_a_script_importing_an_undeclared_helper_is_refused_at_its_code(imports):
    # limits is the rule's own helper: the mapping does not get it.
    document = flow(
        f"{imports}\n\ndef handler(context):\n    return {{}}\n",
        helpers=[],
        rule=USES_LIMITS,
    )
    document["attributes"]["states"][1]["transitions"][0]["rule"]["scripts"] = {
        "helpers": [ref("limits")]
    }
    found = violations(document)
    assert [pointer for pointer, _ in found] == [f"{MAPPING}/code"], found
    assert found[0][1].startswith("line 1: ")
    assert "no helper" in found[0][1]


def test_a_helper_component_is_checked_for_what_no_workflow_could_allow():
    # Modules of the platform's list and other helpers are for the using workflow to allow.
    allowed = mapping_component(
        "numbers", "import statistics\nimport limits\n\ndef f():\n    return 1\n"
    )
    assert violations(allowed) == []
    forbidden = mapping_component("sneaky", "import os\nimport json\n\ndef f():\n    return 1\n")
    assert violations(forbidden) == [
        (
            "/attributes/code",
            "line 1: module 'os' is not one scripts may import (the platform's list: base64, "
            "bisect, cmath, collections, datetime, decimal, fractions, functools, hashlib, heapq, "
            "hmac, itertools, json, math, re, statistics, string, unicodedata, uuid)",
        )
    ]


# --- through the API ----------------------------------------------------------------------------

PUBLISH = "/api/v1/definitions/publish"


@pytest.mark.django_db
def test_publishing_a_helper_and_its_workflow_in_one_batch(operator_client):
    batch = [mapping_component("limits", LIMITS), flow()]
    response = operator_client.post(PUBLISH, batch, format="json")
    assert response.status_code == 200, response.json()

    refused = flow(helpers=[ref("limits"), ref("missing")])
    refused["key"] = "refused"
    response = operator_client.post(PUBLISH, refused, format="json")
    assert response.status_code == 400
    assert response.json()["errorCode"] == "App:900006"
    assert response.json()["errors"] == [
        {
            "pointer": f"{HELPERS}/1",
            "message": "referenced mapping:core/missing@1.0.0 does not exist",
        }
    ]
