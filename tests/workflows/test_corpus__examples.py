"""Every definition of the vnext-example corpus (tests/conformance) publishes with its scripts
re-authored in Python: `examples/` holds one component of the same kind, domain and key for each
corpus file (the C# scripts rewritten in `src/*.py`), and importing `examples/` publishes all of
them. The corpus's own deviations are listed in examples/README.md."""

from __future__ import annotations

import json

import pytest

from tests.conftest import CORPUS_DIR, EXAMPLES_DIR, corpus_files
from tests.instances.scenario_api import import_examples
from workflows.documents import detect_kind
from workflows.models import Component


def identity(path) -> tuple[str, str, str]:
    document = json.loads(path.read_text())
    kind = detect_kind(document)
    assert kind is not None, path
    return str(kind), str(document["domain"]), str(document["key"])


CORPUS = {identity(path): path for path in corpus_files()}


def test_every_corpus_component_has_a_python_twin_in_examples():
    examples = {identity(path) for path in EXAMPLES_DIR.rglob("*.json")}

    missing = {
        str(path.relative_to(CORPUS_DIR)) for key, path in CORPUS.items() if key not in examples
    }
    assert len(CORPUS) == 72
    assert missing == set()


def test_no_twin_keeps_csharp_code():
    for path in EXAMPLES_DIR.rglob("*"):
        assert path.suffix != ".csx", path


@pytest.mark.django_db
def test_importing_the_examples_publishes_every_corpus_component():
    import_examples()

    published = set(Component.objects.values_list("kind", "domain", "key"))
    unpublished = {str(path.relative_to(CORPUS_DIR)) for key, path in CORPUS.items()
                   if key not in published}  # fmt: skip
    assert unpublished == set()
