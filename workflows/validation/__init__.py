"""Validation of component documents: JSON Schema (structural), then the semantic, script and
trigger-target checks. Every field of the format is executed: nothing is accepted and then
ignored."""

from __future__ import annotations

from typing import Any

from instances.engine.errors import Violation
from workflows.documents import detect_kind
from workflows.validation.human_tasks import human_task_violations
from workflows.validation.named_stores import named_store_violations
from workflows.validation.scripts import SCRIPT_MISSING, Resolver, script_violations
from workflows.validation.semantic import semantic_violations
from workflows.validation.structural import structural_violations
from workflows.validation.task_types import task_type_violations
from workflows.validation.triggers import trigger_violations


def validate_component(document: Any, resolver: Resolver) -> list[Violation]:
    """Every violation of a component document at once: structural, semantic, script and
    trigger-target checks. A semantic finding replaces a structural one at the same pointer (it
    says more), but for "script missing"."""
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
    specific += task_type_violations(document, kind, resolver)
    specific += named_store_violations(document, kind, resolver)
    specific += list(human_task_violations(document, kind))
    # "script missing" says nothing of the object's shape: what the schema says of it stays.
    pointers = {v.pointer for v in specific if not v.message.startswith(SCRIPT_MISSING)}
    merged = [v for v in structural if v.pointer not in pointers] + specific
    unique = dict.fromkeys(merged)
    return sorted(unique, key=lambda violation: violation.pointer)
