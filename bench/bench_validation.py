"""Definition validation cost: full validation of a corpus workflow vs parsing its JSON."""

from __future__ import annotations

import json
from pathlib import Path

from bench.timing import per_call_seconds, report
from workflows.documents import ComponentRef, detect_kind
from workflows.validation import validate_component

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


class _Resolver:
    def __init__(self, documents: list[dict]) -> None:
        self.documents = {ComponentRef.of(d, detect_kind(d)): d for d in documents}

    def resolve(self, ref: ComponentRef) -> dict | None:
        return self.documents.get(ref)


def main() -> None:
    """Print the time to validate one workflow, beside json.loads of the same file."""
    from workflows.loader import load_file

    items = [load_file(path) for path in sorted(EXAMPLES.rglob("*.json"))]
    documents = [item.document for item in items if item.document]
    resolver = _Resolver(documents)
    path = EXAMPLES / "core/Workflows/instance-management/instance-management-test-workflow.json"
    text = path.read_text()
    workflow = load_file(path).document
    assert validate_component(workflow, resolver) == []
    baseline = per_call_seconds(lambda: json.loads(text), number=200)
    report(
        "validate workflow (schema+semantic+scripts)",
        per_call_seconds(lambda: validate_component(workflow, resolver), number=200),
        "json.loads",
        baseline,
    )
