"""Publish-time rules of human tasks (task type 5, instances/engine/task_types/human.py): the
config fields nothing here acts on (`reminderIntervalMinutes`, `escalationTimeoutMinutes`,
`escalationAssignee`) are refused at their pointer, with what to do instead; a `dueDate` must
be an ISO 8601 date-time (the schema's `format` is not asserted by the JSON Schema check)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from instances.engine.errors import Violation
from instances.engine.task_types.human import UNSUPPORTED_FIELDS
from instances.status import TaskType
from workflows.documents import ComponentKind, json_pointer


def human_task_violations(document: Any, kind: str) -> Iterator[Violation]:
    """The refusals of a human task component's config."""
    if kind != ComponentKind.TASK or not isinstance(document, dict):
        return
    attributes = document.get("attributes")
    if not isinstance(attributes, dict) or str(attributes.get("type")) != TaskType.HUMAN:
        return
    config = attributes.get("config")
    if not isinstance(config, dict):
        return
    for name, instead in UNSUPPORTED_FIELDS.items():
        if name in config:
            yield Violation(
                json_pointer("attributes", "config", name),
                f"{name} is not run by this runtime: {instead}",
            )
    due = config.get("dueDate")
    if isinstance(due, str) and due:
        try:
            datetime.fromisoformat(due)
        except ValueError:
            yield Violation(
                json_pointer("attributes", "config", "dueDate"),
                f"dueDate {due!r} is not an ISO 8601 date-time",
            )
