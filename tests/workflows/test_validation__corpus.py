"""Every file of the vnext-example conformance corpus validates structurally; emptied scripts are
reported as "script missing" at their pointer; with scripts supplied, every file is valid (but for
one known deviation of the corpus itself)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from tests.conftest import CORPUS_DIR, DictResolver, corpus_files, load_corpus
from tests.workflows.helpers import with_scripts
from workflows.documents import ComponentKind, detect_kind
from workflows.validation import validate_component
from workflows.validation.scripts import iter_script_sites
from workflows.validation.structural import structural_violations

CORPUS = load_corpus()
FILES = corpus_files()
IDS = [str(path.relative_to(CORPUS_DIR)) for path in FILES]

# fan-out-config-matrix 1.0.0 has automatic transitions with neither a rule nor triggerKind 10.
# The JSON Schema lets that through (an absent triggerKind satisfies its "triggerKind 10" branch),
# but API.md section 4 requires a rule unless triggerKind is 10, so the platform rejects it; the
# re-authored example sets triggerKind 10 explicitly.
RULELESS_AUTO = re.compile(r"^/attributes/states/\d+/transitions/\d+/rule$")
KNOWN_DEVIATIONS = {"Workflows/fan-out-config-matrix/fan-out-config-matrix.json": RULELESS_AUTO}


def _relative(path: Path) -> str:
    return str(path.relative_to(CORPUS_DIR / "core"))


def test_the_corpus_is_all_there():
    kinds = [detect_kind(document) for document in CORPUS.values()]
    assert len(FILES) == 72
    assert kinds.count(ComponentKind.WORKFLOW) == 21
    assert kinds.count(ComponentKind.TASK) == 42
    assert None not in kinds


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_every_corpus_file_validates_structurally(path):
    document = CORPUS[path]
    kind = detect_kind(document)
    assert kind is not None
    assert structural_violations(document, kind) == []


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_empty_scripts_are_reported_as_missing_at_their_pointer(path, corpus_resolver):
    document = copy.deepcopy(CORPUS[path])
    kind = detect_kind(document)
    assert kind is not None
    violations = validate_component(document, corpus_resolver)
    expected_missing = {
        site.pointer + "/code"
        for site in iter_script_sites(document, kind)
        if not site.node["code"]
    }
    missing = {v.pointer for v in violations if v.message.startswith("script missing")}
    assert missing == expected_missing
    deviation = KNOWN_DEVIATIONS.get(_relative(path))
    others = [
        v
        for v in violations
        if not v.message.startswith("script missing")
        and not (deviation and deviation.match(v.pointer))
    ]
    assert others == []


def test_missing_script_message_names_the_csx_file(corpus_resolver, corpus_doc):
    document = corpus_doc("Workflows/schedule-after-auto/schedule-after-auto.json")
    violations = validate_component(document, corpus_resolver)
    rule = [v for v in violations if v.pointer == "/attributes/states/0/transitions/0/rule/code"]
    assert [v.message for v in rule] == [
        "script missing (./src/AutoGateRule.csx has no code): give `code`, or import the folder "
        "with `manage.py import_components`, which reads ./src/AutoGateRule.py beside the JSON file"
    ]


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_with_python_scripts_supplied_every_corpus_file_is_valid(path):
    documents = {p: with_scripts(copy.deepcopy(doc)) for p, doc in CORPUS.items()}
    violations = validate_component(documents[path], DictResolver(list(documents.values())))
    deviation = KNOWN_DEVIATIONS.get(_relative(path))
    if deviation:
        assert [v for v in violations if deviation.match(v.pointer)], "the deviation is detected"
    others = [v for v in violations if not (deviation and deviation.match(v.pointer))]
    assert others == []
