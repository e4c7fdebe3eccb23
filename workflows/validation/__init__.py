"""Validation of component documents: JSON Schema (structural), then semantic and script checks,
then the features this version does not execute (`unsupported.UNSUPPORTED`, one table)."""

from __future__ import annotations

from typing import Any

from instances.engine.errors import Violation
from workflows.documents import detect_kind
from workflows.validation.scripts import Resolver, script_violations
from workflows.validation.semantic import semantic_violations
from workflows.validation.structural import structural_violations
from workflows.validation.triggers import trigger_violations
from workflows.validation.unsupported import unsupported_violations


def validate_component(document: Any, resolver: Resolver) -> list[Violation]:
    """Every violation of a component document: structural, semantic and script checks, and
    every use of a feature this version does not execute, at once.

    A semantic finding replaces a structural one at the same pointer (it says more); an
    unsupported feature is reported beside whatever else is wrong there.
    """
    kind = detect_kind(document)
    if kind is None:
        return [
            Violation(
                "",
                "not a vNext component: expected an object with key, domain, version, flow "
                "(sys-flows, sys-tasks, sys-schemas, ...) and attributes",
            )
        ]
    structural = structural_violations(document, kind)
    specific = semantic_violations(document, kind, resolver)
    specific += script_violations(document, kind, resolver)
    specific += trigger_violations(document, kind, resolver)
    pointers = {violation.pointer for violation in specific}
    merged = [v for v in structural if v.pointer not in pointers] + specific
    merged += unsupported_violations(document, kind, resolver)
    unique = dict.fromkeys(merged)
    return sorted(unique, key=lambda violation: violation.pointer)
