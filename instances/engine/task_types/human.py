"""Task type 5: a human task. Running it opens an inbox entry (a `HumanTask` row, committed with
the hop) assigned to roles and users, and answers at once: the instance rests in its state, as
a state waiting for a manual transition does. A person holding one of the roles (or named)
claims the entry, then completes it with the form data: that runs one of the state's manual
transitions with the data as its body (instances/human_tasks.py). Leaving the state another way,
or the instance ending, cancels its open entries.

Configuration (task-definition.schema.json, type 5), after the input handler, whose returned
object may override any of `title`, `instructions`, `assignedTo`, `dueDate`, `form` and add a
`context` object shown with the entry:

- `assignedTo`: who may claim it: names separated by commas, each `role:<name>` (a group or a
  token role), `user:<name>` (a username), or a bare name (a role); a list of such names is
  read the same way. Resolving to nobody fails the task with `Task:Human:Unassigned`.
- `title`, `instructions`: shown in the inbox.
- `dueDate`: an ISO 8601 date-time (a zone, else UTC): shown, sorted and filtered on
  (`overdue`); nothing happens by itself when it passes. An unreadable one fails the task
  with `Task:Human:Config`.
- `form`: shown with the entry; when it is a JSON Schema (an object with `type` or
  `properties`), the completion's data must match it (`HumanTask:InvalidForm`, 400).

`reminderIntervalMinutes`, `escalationTimeoutMinutes` and `escalationAssignee` are refused at
publish (nothing here would act on them).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from instances.engine.errors import Codes
from instances.engine.task_types.base import HumanTaskOpen, StandardResponse, TaskCall, TaskFailure

# Config fields nothing here acts on: refused at publish (workflows/validation).
UNSUPPORTED_FIELDS = {
    "reminderIntervalMinutes": "reminders need a delivery channel this runtime does not have "
    "for human tasks; remind from a scheduled transition with a notification task",
    "escalationTimeoutMinutes": "escalation is not run here; model it as a scheduled "
    "transition out of the state (its open human task is cancelled when the state is left)",
    "escalationAssignee": "escalation is not run here; model it as a scheduled transition to a "
    "state whose human task names the escalation assignee",
}
_OVERRIDABLE = ("title", "instructions", "assignedTo", "dueDate", "form", "context")


def execute_human(call: TaskCall) -> StandardResponse:
    """Open the human task the (input-handled) config describes; 202 with its inbox entry."""
    task = call.task
    config = dict(task.get("config") or {})
    if isinstance(call.input_data, dict):
        config.update({k: v for k, v in call.input_data.items() if k in _OVERRIDABLE})
    key = str(task.get("task_key") or "")
    roles, users = assignment(config.get("assignedTo"))
    if not roles and not users:
        raise TaskFailure(
            Codes.TASK_HUMAN_UNASSIGNED,
            f"human task {key}: assignedTo {config.get('assignedTo')!r} names no role and no user",
        )
    due_at = _due(config.get("dueDate"), key)
    opened = HumanTaskOpen(
        id=uuid.uuid4(),
        task_key=key,
        title=str(config.get("title") or key),
        instructions=str(config.get("instructions") or ""),
        roles=roles,
        users=users,
        form=config.get("form"),
        context=config.get("context") if isinstance(config.get("context"), dict) else None,
        due_at=due_at,
    )
    call.human_tasks.append(opened)
    return StandardResponse(
        status_code=202,
        data={
            "humanTaskId": str(opened.id),
            "status": "open",
            "title": opened.title,
            "roles": roles,
            "users": users,
            "dueDate": due_at.isoformat() if due_at else None,
        },
    )


def assignment(value: Any) -> tuple[list[str], list[str]]:
    """The (roles, users) an `assignedTo` value names, each sorted, without duplicates."""
    names: Iterable[Any]
    if isinstance(value, str):
        names = value.split(",")
    elif isinstance(value, list | tuple):
        names = [part for item in value if isinstance(item, str) for part in item.split(",")]
    else:
        names = []
    roles, users = set(), set()
    for raw in names:
        name = str(raw).strip()
        kind, _, rest = name.partition(":")
        if rest and kind.strip().lower() == "user":
            users.add(rest.strip())
        elif rest and kind.strip().lower() == "role":
            roles.add(rest.strip())
        elif name:
            roles.add(name)
    return sorted(r for r in roles if r), sorted(u for u in users if u)


def _due(value: Any, key: str) -> datetime | None:
    if value is None or value == "":
        return None
    try:
        due = datetime.fromisoformat(str(value))
    except ValueError as exc:
        raise TaskFailure(
            Codes.TASK_HUMAN_CONFIG,
            f"human task {key}: dueDate {value!r} is not an ISO 8601 date-time",
        ) from exc
    return due if due.tzinfo is not None else due.replace(tzinfo=UTC)


def _reference_type(components: Any, reference: dict[str, Any]) -> str | None:
    # The referenced task's type, or None when it is not published (yet).
    if not isinstance(reference.get("task"), dict):
        return ""
    document = components.component("task", reference["task"])
    if document is None:
        return None
    return str((document.get("attributes") or {}).get("type"))


def is_human_reference(components: Any, reference: dict[str, Any]) -> bool:
    """The task reference names a published human task (type 5)."""
    return _reference_type(components, reference) == "5"


def human_states(components: Any, definition: Any) -> frozenset[str]:
    """The states of `definition` whose onEntries open a human task (kept in its memo once
    every reference resolved: a task published later may still be a human one)."""
    cached: frozenset[str] | None = definition.memo.get("human_states")
    if cached is not None:
        return cached
    types = {
        key: [_reference_type(components, ref) for ref in state.on_entries]
        for key, state in definition.states.items()
    }
    found = frozenset(key for key, kinds in types.items() if "5" in kinds)
    if all(kind is not None for kinds in types.values() for kind in kinds):
        definition.memo["human_states"] = found
    return found
