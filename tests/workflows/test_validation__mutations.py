"""A corpus of invalid definitions: each mutation of a valid document is rejected with the right
JSON pointer, and nothing crashes. The base documents come from the conformance corpus with Python
scripts supplied, so each mutation's violations are exactly the ones it introduced (beside the uses
of features this version does not execute, which some bases carry)."""

from __future__ import annotations

import base64
import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import DictResolver, load_corpus
from tests.workflows.helpers import with_scripts
from workflows.validation import validate_component

DOCS = {
    str(path).split("/core/", 1)[1]: with_scripts(copy.deepcopy(document))
    for path, document in load_corpus().items()
}
SCHEDULE = "Workflows/schedule-after-auto/schedule-after-auto.json"
LIFECYCLE = "Workflows/lifecycle-transitions/lifecycle-transitions-test-workflow.json"
ROLES = "Workflows/role-matrix-lab/role-matrix-lab.json"
EVENTS = "Workflows/event-driven-lab/event-driven-lab.json"
PARENT = "Workflows/timeout-lab/timeout-lab-parent.json"
PAYLOAD = "Workflows/payload-modes/payload-modes.json"
MANAGEMENT = "Workflows/instance-management/instance-management-test-workflow.json"
FAN_OUT = "Tasks/fan-out-config-matrix/fanout-case-join-quorum-task.json"
FAN_OUT_RETRY = "Tasks/fan-out-config-matrix/fanout-case-item-boundary-retry-task.json"
FAN_OUT_FLOW = "Workflows/fan-out-documents/fan-out-documents.json"
FAN_OUT_MAPPING = ("attributes", "states", 1, "onEntries", 1, "mapping")  # the batch's mapping
SELECTING_MAPPING = (
    "def item_selector(context):\n    return []\n\n"
    "def item_input_handler(task, context, item):\n    return ScriptResponse()\n"
)
SCHEMA = "Schemas/payload-modes/payload-modes-input.json"
MASTER = "Schemas/role-matrix-lab/role-matrix-master.json"  # x-roles, x-masking, x-encryption
FIELDS = ("attributes", "schema", "properties")
VAULT = (*FIELDS, "vault", "properties")
EB_LAB = "Workflows/error-boundary-lab/error-boundary-lab.json"

AUTO_ADVANCE = ("attributes", "states", 0, "transitions", 0)  # in schedule-after-auto
GATE_TIMEOUT = ("attributes", "states", 0, "transitions", 1)


def task_rule(transition: int) -> tuple[Any, ...]:
    """The first onError rule of the first task of `ready`'s transition number `transition`
    (error-boundary-lab: 0 abort, 1 rollback, 4 retry then abort, 6 ignore)."""
    task = ("attributes", "states", 0, "transitions", transition, "onExecutionTasks", 0)
    return (*task, "errorBoundary", "onError", 0)


def pointer(path: tuple[Any, ...]) -> str:
    return "/" + "/".join(str(part) for part in path)


def at(document: dict[str, Any], path: tuple[Any, ...]) -> Any:
    node: Any = document
    for part in path:
        node = node[part]
    return node


@dataclass
class Mutation:
    name: str
    base: str
    mutate: Callable[[dict[str, Any]], Any]
    pointer: str
    message: str  # a regular expression the violation's message matches


def script(source: str) -> dict[str, str]:
    return {"location": "./src/Probe.py", "code": source, "encoding": "NAT"}


def set_field(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(document: dict[str, Any]) -> None:
        at(document, path[:-1])[path[-1]] = value

    return apply


def delete(path: tuple[Any, ...]) -> Callable[[dict[str, Any]], None]:
    def apply(document: dict[str, Any]) -> None:
        del at(document, path[:-1])[path[-1]]

    return apply


def wizard_with_two_manual(document: dict[str, Any]) -> None:
    review = document["attributes"]["states"][1]  # role-matrix-lab "review": 4 manual transitions
    review["stateType"] = 5


def add_transition_to_final(document: dict[str, Any]) -> None:
    final = document["attributes"]["states"][1]  # event-driven-lab "approved"
    final["transitions"] = [
        {
            "key": "reopen",
            "target": "awaiting-approval",
            "triggerType": 0,
            "versionStrategy": "None",
            "labels": [{"label": "Reopen", "language": "en-US"}],
        }
    ]


def duplicate_state(document: dict[str, Any]) -> None:
    states = document["attributes"]["states"]
    states.append(copy.deepcopy(states[-1]))


def nested_fan_out(document: dict[str, Any]) -> None:
    document["attributes"]["config"]["task"]["key"] = "fan-out-documents-task"


def b64(source: str) -> str:
    return base64.b64encode(source.encode()).decode()


MUTATIONS = [
    Mutation(
        "no initial state",
        SCHEDULE,
        set_field(("attributes", "states", 0, "stateType"), 2),
        "/attributes/states",
        "no Initial state",
    ),
    Mutation(
        "two initial states",
        SCHEDULE,
        set_field(("attributes", "states", 1, "stateType"), 1),
        "/attributes/states/1/stateType",
        "second Initial state",
    ),
    Mutation(
        "unknown target",
        SCHEDULE,
        set_field((*AUTO_ADVANCE, "target"), "nowhere"),
        "/attributes/states/0/transitions/0/target",
        "'nowhere' does not exist",
    ),
    Mutation(
        "auto without rule",
        SCHEDULE,
        delete((*AUTO_ADVANCE, "rule")),
        "/attributes/states/0/transitions/0/rule",
        "needs a rule unless triggerKind is 10",
    ),
    Mutation(
        "auto with triggerKind 0 and no rule",
        SCHEDULE,
        lambda d: (at(d, AUTO_ADVANCE).pop("rule"), at(d, AUTO_ADVANCE).update(triggerKind=0)),
        "/attributes/states/0/transitions/0/rule",
        "needs a rule",
    ),
    Mutation(
        "scheduled without timer",
        SCHEDULE,
        delete((*GATE_TIMEOUT, "timer")),
        "/attributes/states/0/transitions/1/timer",
        "needs a timer",
    ),
    Mutation(
        "event without event",
        EVENTS,
        delete(("attributes", "states", 0, "transitions", 0, "event")),
        "/attributes/states/0/transitions/0/event",
        "needs an event",
    ),
    Mutation(
        "start transition not manual",
        SCHEDULE,
        set_field(("attributes", "startTransition", "triggerType"), 2),
        "/attributes/startTransition/triggerType",
        "startTransition is manual only",
    ),
    Mutation(
        "start transition targets a non-initial state",
        SCHEDULE,
        set_field(("attributes", "startTransition", "target"), "advanced"),
        "/attributes/startTransition/target",
        "must target the Initial state",
    ),
    Mutation(
        "wizard with several manual transitions",
        ROLES,
        wizard_with_two_manual,
        "/attributes/states/1/transitions",
        "exactly one manual transition, found 4",
    ),
    Mutation(
        "final state with transitions",
        EVENTS,
        add_transition_to_final,
        "/attributes/states/1/transitions",
        "final state .* has no transitions",
    ),
    Mutation(
        "duplicate state key",
        EVENTS,
        duplicate_state,
        "/attributes/states/2/key",
        "duplicate state key 'approved'",
    ),
    Mutation(
        "cancel not manual",
        SCHEDULE,
        set_field(("attributes", "cancel", "triggerType"), 1),
        "/attributes/cancel/triggerType",
        "cancel is manual only",
    ),
    Mutation(
        "updateData target not $self",
        ROLES,
        set_field(("attributes", "updateData", "target"), "review"),
        "/attributes/updateData/target",
        r"always '\$self'",
    ),
    Mutation(
        "shared transition automatic",
        ROLES,
        set_field(("attributes", "sharedTransitions", 1, "triggerType"), 1),
        "/attributes/sharedTransitions/1/triggerType",
        "no automatic",
    ),
    Mutation(
        "availableIn names an unknown state",
        ROLES,
        set_field(("attributes", "sharedTransitions", 1, "availableIn"), ["intake", "ghost"]),
        "/attributes/sharedTransitions/1/availableIn/1",
        "'ghost' does not exist",
    ),
    Mutation(
        "exit targets $self",
        LIFECYCLE,
        set_field(("attributes", "exit", "target"), "$self"),
        "/attributes/exit/target",
        r"'\$self' is not allowed",
    ),
    Mutation(
        "unknown task reference",
        SCHEDULE,
        set_field((*AUTO_ADVANCE, "onExecutionTasks", 0, "task", "key"), "no-such-task"),
        "/attributes/states/0/transitions/0/onExecutionTasks/0/task",
        "task:core/no-such-task@1.0.0 does not exist",
    ),
    Mutation(
        "unknown schema version",
        PAYLOAD,
        set_field(("attributes", "startTransition", "schema", "version"), "9.9.9"),
        "/attributes/startTransition/schema",
        "schema:core/payload-modes-input@9.9.9 does not exist",
    ),
    Mutation(
        "unknown subflow workflow",
        PARENT,
        set_field(("attributes", "states", 1, "subFlow", "process", "key"), "ghost-flow"),
        "/attributes/states/1/subFlow/process",
        "workflow:core/ghost-flow@1.0.0 does not exist",
    ),
    Mutation(
        "subflow state without subFlow",
        PARENT,
        delete(("attributes", "states", 1, "subFlow")),
        "/attributes/states/1/subFlow",
        "needs subFlow",
    ),
    Mutation(
        "bad semver",
        SCHEDULE,
        set_field(("version",), "1.0"),
        "/version",
        "does not match",
    ),
    Mutation(
        "bad key pattern",
        SCHEDULE,
        set_field(("key",), "Schedule_After_Auto"),
        "/key",
        "does not match",
    ),
    Mutation(
        "missing labels",
        SCHEDULE,
        delete(("attributes", "states", 1, "labels")),
        "/attributes/states/1/labels",
        "is required",
    ),
    Mutation(
        "unknown triggerType",
        SCHEDULE,
        set_field((*GATE_TIMEOUT, "triggerType"), 7),
        "/attributes/states/0/transitions/1/triggerType",
        "triggerType must be 0, 1, 2 or 3, got 7",
    ),
    Mutation(
        "script that does not compile",
        SCHEDULE,
        set_field((*AUTO_ADVANCE, "rule"), script("def handler(context):\n    return (\n")),
        "/attributes/states/0/transitions/0/rule/code",
        "SyntaxError",
    ),
    Mutation(
        "script importing os",
        SCHEDULE,
        set_field(
            (*AUTO_ADVANCE, "rule"),
            script("import os\n\ndef handler(context):\n    return True\n"),
        ),
        "/attributes/states/0/transitions/0/rule/code",
        "line 1: module 'os' is not one scripts may import",
    ),
    Mutation(
        "script using a dunder attribute",
        SCHEDULE,
        set_field(
            (*GATE_TIMEOUT, "timer"),
            script("def handler(context):\n    return context.__class__\n"),
        ),
        "/attributes/states/0/transitions/1/timer/code",
        'line 2: "__class__" is an invalid attribute name',
    ),
    Mutation(
        "rule without a handler",
        SCHEDULE,
        set_field((*AUTO_ADVANCE, "rule"), script("def check(context):\n    return True\n")),
        "/attributes/states/0/transitions/0/rule/code",
        r"must define handler\(\)",
    ),
    Mutation(
        "task mapping without handlers",
        SCHEDULE,
        set_field(
            (*AUTO_ADVANCE, "onExecutionTasks", 0, "mapping"),
            script("def handler(context):\n    return {}\n"),
        ),
        "/attributes/states/0/transitions/0/onExecutionTasks/0/mapping/code",
        r"must define input_handler\(\) or output_handler\(\)",
    ),
    Mutation(
        "invalid base64 script",
        SCHEDULE,
        set_field((*AUTO_ADVANCE, "rule"), {"code": "@@not-base64@@", "encoding": "B64"}),
        "/attributes/states/0/transitions/0/rule/code",
        "not valid base64",
    ),
    Mutation(
        "empty script",
        SCHEDULE,
        set_field((*AUTO_ADVANCE, "rule"), {"location": "./src/AutoGateRule.py", "code": ""}),
        "/attributes/states/0/transitions/0/rule/code",
        r"script missing \(./src/AutoGateRule.py has no code\)",
    ),
    Mutation(
        "REF to a missing mapping",
        SCHEDULE,
        set_field(
            (*AUTO_ADVANCE, "rule"),
            {
                "encoding": "REF",
                "code": {
                    "key": "nope",
                    "version": "1.0.0",
                    "domain": "core",
                    "flow": "sys-mappings",
                },
            },
        ),
        "/attributes/states/0/transitions/0/rule/code",
        "mapping:core/nope@1.0.0 does not exist",
    ),
    Mutation(
        "allowedModules lists os",
        SCHEDULE,
        set_field(("attributes", "scripts"), {"allowedModules": ["statistics", "os"]}),
        "/attributes/scripts/allowedModules/1",
        "'os' is not one scripts may import",
    ),
    Mutation(
        "allowedModules lists a module off the platform's closed list",
        SCHEDULE,
        set_field(("attributes", "scripts"), {"allowedModules": ["time", "random"]}),
        "/attributes/scripts/allowedModules/0",
        "'time' is not one scripts may import",
    ),
    Mutation(
        "a script's own allowedModules lists pydoc",
        SCHEDULE,
        set_field((*AUTO_ADVANCE, "rule", "scripts"), {"allowedModules": ["pydoc"]}),
        "/attributes/states/0/transitions/0/rule/scripts/allowedModules/0",
        "'pydoc' is not one scripts may import",
    ),
    Mutation(
        "timeout targets an unknown state",
        MANAGEMENT,
        set_field(("attributes", "timeout", "target"), "ghost-state"),
        "/attributes/timeout/target",
        "'ghost-state' does not exist",
    ),
    Mutation(
        "fan-out mode durable",
        FAN_OUT,
        set_field(("attributes", "config", "mode"), "durable"),
        "/attributes/config/mode",
        "only 'inline'",
    ),
    Mutation(
        "fan-out itemTimeoutSeconds > batchTimeoutSeconds",
        FAN_OUT,
        set_field(("attributes", "config", "execution", "itemTimeoutSeconds"), 90),
        "/attributes/config/execution/itemTimeoutSeconds",
        r"itemTimeoutSeconds \(90\) exceeds batchTimeoutSeconds \(60\)",
    ),
    Mutation(
        "fan-out quorum without minSuccess",
        FAN_OUT,
        delete(("attributes", "config", "join", "minSuccess")),
        "/attributes/config/join/minSuccess",
        "quorum policy needs minSuccess >= 1",
    ),
    Mutation(
        "fan-out quorum with minSuccess 0",
        FAN_OUT,
        set_field(("attributes", "config", "join", "minSuccess"), 0),
        "/attributes/config/join/minSuccess",
        "minSuccess >= 1",
    ),
    Mutation(
        "nested fan-out",
        FAN_OUT,
        nested_fan_out,
        "/attributes/config/task",
        "nested fan-out",
    ),
    Mutation(
        "fan-out itemsPath without $.",
        FAN_OUT,
        set_field(("attributes", "config", "itemsPath"), "documents"),
        "/attributes/config/itemsPath",
        r"must start with '\$\.'",
    ),
    Mutation(
        "fan-out maxDegreeOfParallelism 0",
        FAN_OUT,
        set_field(("attributes", "config", "execution", "maxDegreeOfParallelism"), 0),
        "/attributes/config/execution/maxDegreeOfParallelism",
        "must be at least 1, not 0",
    ),
    Mutation(
        "fan-out unknown join policy",
        FAN_OUT,
        set_field(("attributes", "config", "join", "policy"), "most"),
        "/attributes/config/join/policy",
        'must be one of "all", "allSettled", "quorum", "firstSuccess"',
    ),
    Mutation(
        "fan-out inner task reference without its version",
        FAN_OUT,
        delete(("attributes", "config", "task", "version")),
        "/attributes/config/task/version",
        "is required",
    ),
    Mutation(
        "fan-out batchTimeoutSeconds 0",
        FAN_OUT,
        set_field(("attributes", "config", "execution", "batchTimeoutSeconds"), 0),
        "/attributes/config/execution/batchTimeoutSeconds",
        "must be at least 1, not 0",
    ),
    Mutation(
        "fan-out item boundary that rolls back",
        FAN_OUT_RETRY,
        set_field(("attributes", "config", "errorBoundary", "onError", 0, "action"), "rollback"),
        "/attributes/config/errorBoundary/onError/0/action",
        "an item error boundary cannot rollback",
    ),
    Mutation(
        "fan-out item boundary with an unknown action",
        FAN_OUT_RETRY,
        set_field(("attributes", "config", "errorBoundary", "onError", 0, "action"), "explode"),
        "/attributes/config/errorBoundary/onError/0/action",
        "matches none of the shapes allowed here|does not match the pattern",
    ),
    Mutation(
        "fan-out item retry whose maxDelay is shorter than its initialDelay",
        FAN_OUT_RETRY,
        set_field(
            ("attributes", "config", "errorBoundary", "onError", 0, "retryPolicy", "maxDelay"),
            "PT0.1S",
        ),
        "/attributes/config/errorBoundary/onError/0/retryPolicy/maxDelay",
        "must not be shorter than initialDelay",
    ),
    Mutation(
        "fan-out mapping with an item_selector beside the task's itemsPath",
        FAN_OUT_FLOW,
        set_field((*FAN_OUT_MAPPING, "code"), SELECTING_MAPPING),
        pointer((*FAN_OUT_MAPPING, "code")),
        "exactly one of the task's itemsPath and the mapping's item_selector.*both are given",
    ),
    Mutation(
        "fan-out mapping without item_input_handler",
        FAN_OUT_FLOW,
        set_field((*FAN_OUT_MAPPING, "code"), "def output_handler(context, result):\n    pass\n"),
        pointer((*FAN_OUT_MAPPING, "code")),
        r"must define item_input_handler\(\)",
    ),
    Mutation(
        "executionType on an automatic transition (no client request to shape)",
        SCHEDULE,
        set_field((*AUTO_ADVANCE, "executionType"), "S"),
        pointer((*AUTO_ADVANCE, "executionType")),
        "only a manual transition",
    ),
    Mutation(
        "fan-out item rule naming a transition (an item has none to divert to)",
        FAN_OUT_RETRY,
        set_field(("attributes", "config", "errorBoundary", "onError", 0, "transition"), "x"),
        "/attributes/config/errorBoundary/onError/0",
        "unknown field\\(s\\) 'transition'",
    ),
    Mutation(
        "start event mapping without handler()",
        EVENTS,
        set_field(
            ("attributes", "event", "mapping", "code"),
            "def input_handler(task, context):\n    return ScriptResponse()\n",
        ),
        "/attributes/event/mapping/code",
        r"must define handler\(\)",
    ),
    Mutation(
        "rollback to a transition the workflow does not have",
        EB_LAB,
        set_field((*task_rule(1), "transition"), "nowhere"),
        pointer((*task_rule(1), "transition")),
        "'nowhere' does not exist",
    ),
    Mutation(
        "rollback naming no transition",
        EB_LAB,
        delete((*task_rule(1), "transition")),
        pointer((*task_rule(1), "transition")),
        "name the transition",
    ),
    Mutation(
        "state-level notify to a transition the workflow does not have",
        EB_LAB,
        set_field(("attributes", "states", 1, "errorBoundary", "onError", 0, "transition"), "x"),
        "/attributes/states/1/errorBoundary/onError/0/transition",
        "'x' does not exist",
    ),
    Mutation(
        "an ignore rule naming a transition it would not run",
        EB_LAB,
        set_field((*task_rule(6), "transition"), "to-rolled-back"),
        pointer((*task_rule(6), "transition")),
        "only Rollback and Notify",
    ),
    Mutation(
        "an abort rule with a retry policy it would not use",
        EB_LAB,
        set_field((*task_rule(0), "retryPolicy"), {"initialDelay": "PT1S"}),
        pointer((*task_rule(0), "retryPolicy")),
        "only a Retry rule",
    ),
    Mutation(
        "a retry with no initial delay",
        EB_LAB,
        set_field((*task_rule(4), "retryPolicy", "initialDelay"), "PT0S"),
        pointer((*task_rule(4), "retryPolicy", "initialDelay")),
        "longer than zero",
    ),
    Mutation(
        "a retry whose max delay is shorter than its initial delay",
        EB_LAB,
        set_field((*task_rule(4), "retryPolicy", "maxDelay"), "PT0.1S"),
        pointer((*task_rule(4), "retryPolicy", "maxDelay")),
        "not be shorter",
    ),
    Mutation(
        "a field encrypted at rest that is not a string",
        MASTER,
        set_field((*FIELDS, "riskScore", "x-encryption"), {"type": "encrypt"}),
        pointer((*FIELDS, "riskScore", "x-encryption", "type")),
        'declare type "string"',
    ),
    Mutation(
        "a field encrypted at rest inside an array's items",
        MASTER,
        set_field(
            (*FIELDS, "accounts", "items", "properties", "iban", "x-encryption"),
            {"type": "encrypt"},
        ),
        pointer((*FIELDS, "accounts", "items", "properties", "iban", "x-encryption", "type")),
        "nested properties",
    ),
    Mutation(
        "a filterable field encrypted at rest",
        MASTER,
        set_field((*VAULT, "email", "x-filterOperators"), ["eq"]),
        pointer((*VAULT, "email", "x-filterOperators")),
        "cannot be filterable",
    ),
    Mutation(
        "encryption at rest with a schema-chosen algorithm",
        MASTER,
        set_field((*VAULT, "pin", "x-encryption", "params"), {"algorithm": "aes-128-ecb"}),
        pointer((*VAULT, "pin", "x-encryption", "params")),
        "takes no params",
    ),
    Mutation(
        "an encryption exemption with a deny grant",
        MASTER,
        set_field((*VAULT, "email", "x-encryption", "roles", 0, "grant"), "deny"),
        pointer((*VAULT, "email", "x-encryption", "roles", 0, "grant")),
        "only grant 'allow'",
    ),
    Mutation(
        "a field encrypted at rest and masked",
        MASTER,
        set_field((*VAULT, "pin", "x-masking"), {"operator": "mask"}),
        pointer((*VAULT, "pin", "x-masking")),
        "one transform",
    ),
    Mutation(
        "transport encryption on a field",
        MASTER,
        set_field((*VAULT, "pin", "x-encryption", "type"), "transport"),
        pointer((*VAULT, "pin", "x-encryption", "type")),
        "connection's",
    ),
    Mutation(
        "an unknown encryption type",
        MASTER,
        set_field((*VAULT, "pin", "x-encryption", "type"), "aes"),
        pointer((*VAULT, "pin", "x-encryption", "type")),
        "unknown x-encryption type 'aes'",
    ),
    Mutation(
        "a hash algorithm the reads do not know",
        MASTER,
        set_field((*FIELDS, "hashedCustomerNo", "x-encryption", "params", "algorithm"), "md5"),
        pointer((*FIELDS, "hashedCustomerNo", "x-encryption", "params", "algorithm")),
        "sha256, sha512",
    ),
    Mutation(
        "an encryption retention of zero days",
        MASTER,
        set_field((*FIELDS, "hashedCustomerNo", "x-encryption", "retentionDays"), 0),
        pointer((*FIELDS, "hashedCustomerNo", "x-encryption", "retentionDays")),
        "positive integer",
    ),
    Mutation(
        "a masking operator the runtime does not have",
        MASTER,
        set_field((*FIELDS, "maskedForAll", "x-masking", "operator"), "tokenize"),
        pointer((*FIELDS, "maskedForAll", "x-masking", "operator")),
        "unknown x-masking operator 'tokenize'",
    ),
    Mutation(
        "a replace mask without its value",
        MASTER,
        set_field((*FIELDS, "replacedNote", "x-masking", "params"), {}),
        pointer((*FIELDS, "replacedNote", "x-masking", "params")),
        "needs params.value",
    ),
    Mutation(
        "a masking character of two characters",
        MASTER,
        set_field((*FIELDS, "maskedForAll", "x-masking", "params", "maskingChar"), "##"),
        pointer((*FIELDS, "maskedForAll", "x-masking", "params", "maskingChar")),
        "single character",
    ),
    Mutation(
        "a mask keeping a negative number of characters",
        MASTER,
        set_field((*FIELDS, "maskedForAll", "x-masking", "params", "keepLast"), -1),
        pointer((*FIELDS, "maskedForAll", "x-masking", "params", "keepLast")),
        "non-negative integer",
    ),
    Mutation(
        "a parameter of the other masking operator",
        MASTER,
        set_field((*FIELDS, "replacedNote", "x-masking", "params", "keepLast"), 2),
        pointer((*FIELDS, "replacedNote", "x-masking", "params", "keepLast")),
        "not a parameter of operator replace",
    ),
    Mutation(
        "a sortable masked field",
        MASTER,
        set_field((*FIELDS, "maskedForAll", "x-sortable"), True),
        pointer((*FIELDS, "maskedForAll", "x-sortable")),
        "cannot be sortable",
    ),
    Mutation(
        "schema component with a bad version",
        SCHEMA,
        set_field(("version",), "v1"),
        "/version",
        "does not match",
    ),
]


def resolver() -> DictResolver:
    return DictResolver([copy.deepcopy(document) for document in DOCS.values()])


@pytest.mark.parametrize("base", sorted({m.base for m in MUTATIONS}))
def test_every_base_document_is_valid(base):
    # Each mutation's violations are then its own.
    assert validate_component(copy.deepcopy(DOCS[base]), resolver()) == []


def test_the_mutation_corpus_is_large_enough():
    assert len(MUTATIONS) >= 25


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_mutation_is_rejected_with_the_right_pointer(mutation):
    document = copy.deepcopy(DOCS[mutation.base])
    mutation.mutate(document)
    violations = validate_component(document, resolver())
    at_pointer = [v for v in violations if v.pointer == mutation.pointer]
    assert at_pointer, f"no violation at {mutation.pointer}; got {violations}"
    assert any(re.search(mutation.message, v.message) for v in at_pointer), at_pointer


@pytest.mark.parametrize(
    "document", [None, [], "text", 42, {}, {"key": "x"}, {"attributes": []}], ids=repr
)
def test_non_components_are_rejected_without_crashing(document):
    violations = validate_component(document, resolver())
    assert [v.pointer for v in violations] == [""]
    assert "not a vNext component" in violations[0].message


def test_a_bare_workflow_header_lists_every_missing_field():
    violations = validate_component({"flow": "sys-flows"}, resolver())
    assert {v.pointer for v in violations} >= {"/key", "/version", "/domain", "/attributes"}


def test_garbage_inside_a_workflow_never_crashes():
    document = copy.deepcopy(DOCS[SCHEDULE])
    document["attributes"]["states"] = [None, 3, "x", {"transitions": "no"}, {"stateType": "1"}]
    document["attributes"]["startTransition"] = ["not", "an", "object"]
    document["attributes"]["sharedTransitions"] = {"oops": True}
    violations = validate_component(document, resolver())
    assert violations
    assert all(v.pointer.startswith("/attributes") for v in violations)


@pytest.mark.parametrize(
    ("mutate", "pointer", "message"),
    [
        (
            set_field(("attributes", "config", "execution", "maxDegreeOfParallelism"), "four"),
            "/attributes/config/execution/maxDegreeOfParallelism",
            "must be a whole number, not a string",
        ),
        (
            set_field(("attributes", "config", "join", "ordered"), None),
            "/attributes/config/join/ordered",
            "must be true or false, not null",
        ),
        (
            set_field(("attributes", "config", "join", "extra"), 1),
            "/attributes/config/join",
            "unknown field(s) 'extra'",
        ),
    ],
)
def test_schema_errors_read_as_plain_words(mutate, pointer, message):
    document = copy.deepcopy(DOCS[FAN_OUT])
    mutate(document)

    violations = validate_component(document, resolver())

    assert (pointer, message) in [(v.pointer, v.message) for v in violations]
    assert not any("given schema" in v.message or "is not of type" in v.message for v in violations)
