"""The human-task inbox (task type 5; `GET /api/v1/{domain}/functions/human-task`): the open
work assigned to a caller's roles or to the caller by name, across root and sub instances, and
claim / release / complete.

- claim: `open -> claimed` by compare-and-set (one winner; the others get 409
  `HumanTask:AlreadyClaimed`);
- release: `claimed -> open`, by the claimer or an operator (`operate_instances` on the
  workflow);
- complete: by the claimer, with the form data (checked against the task's `form` when it is a
  JSON Schema): the entry is marked completed by compare-and-set, then one of its state's manual
  transitions runs with the data as its body (`transition` in the request, or the state's only
  manual transition), as a sync transition the caller asked for. When the transition is refused
  (400, 403, 409 ...), the entry is claimed again (cancelled if its state was left meanwhile)
  and the refusal is the answer.

Each action writes a completed history row on the instance (`human-task:claim`,
`human-task:release`, `human-task:complete`), as operators' actions do (`operator:...`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection
from django.utils import timezone

from instances.answers import RunAnswer, instance_transition_answer
from instances.engine.errors import Codes, Violation, VNextError
from instances.engine.payload import schema_violations
from instances.engine.roles import Caller
from instances.human_task_rows import assignee_names, human_tasks_close
from instances.human_task_table import OPEN_STATUSES, HumanTask, HumanTaskAssignee
from instances.orm_store import OrmStore
from instances.services import RequestInfo, workflow_definition
from instances.snapshots import snapshot_of
from instances.status import HumanTaskStatus, InstanceStatus, Trigger

# How deep an inbox pages (every assignee range is read to the page's end): 10 pages of at
# most 100 tasks.
MAX_INBOX_PAGE = 10


@dataclass(frozen=True)
class InboxFilter:
    """What the inbox narrows to: a workflow, a state, claimed or not, only the caller's."""

    workflow: str | None = None
    state: str | None = None
    claimed: bool | None = None
    mine: bool = False


def caller_assignees(caller: Caller) -> list[str]:
    """The assignee names a caller answers to: each of their roles, and their username."""
    return assignee_names(sorted(caller.roles), [caller.actor] if caller.actor else [])


def is_assigned(task: HumanTask, caller: Caller) -> bool:
    """The task is assigned to one of the caller's roles or to the caller."""
    return bool(set(caller.roles) & set(task.roles or [])) or (
        bool(caller.actor) and caller.actor in (task.users or [])
    )


def inbox_page(
    *, domain: str, caller: Caller, where: InboxFilter, page: int, page_size: int
) -> tuple[list[HumanTask], bool]:
    """The caller's open tasks of `domain`, oldest first (ties by id), one page of them, and
    whether another follows; pages past `MAX_INBOX_PAGE` are refused (400)."""
    if page > MAX_INBOX_PAGE:
        # Each of the caller's roles reads its range up to the page's end: a deep page would
        # read (roles x page x pageSize) rows for one answer.
        raise VNextError(
            Codes.APP_INVALID_QUERY,
            f"page {page}: an inbox has {MAX_INBOX_PAGE} pages at most; narrow it (workflow, "
            "state, claimed)",
            [Violation("/page", f"1 to {MAX_INBOX_PAGE}")],
        )
    wanted = page * page_size + 1
    if where.mine:
        if not caller.actor:
            return [], False
        found = HumanTask.objects.filter(
            domain=domain, status=HumanTaskStatus.CLAIMED, claimed_by=caller.actor
        )
        if where.workflow:
            found = found.filter(workflow_key=where.workflow)
        if where.state:
            found = found.filter(state=where.state)
        rows = list(found.order_by("created_at", "id")[(page - 1) * page_size : wanted])
        return rows[:page_size], len(rows) > page_size
    keys = _inbox_keys(domain, caller_assignees(caller), where, wanted)
    chosen = keys[(page - 1) * page_size : wanted]
    by_id = HumanTask.objects.in_bulk([task_id for _, task_id in chosen])
    rows = [by_id[task_id] for _, task_id in chosen if task_id in by_id]
    return rows[:page_size], len(chosen) > page_size


def _inbox_keys(
    domain: str, names: list[str], where: InboxFilter, wanted: int
) -> list[tuple[datetime, uuid.UUID]]:
    # The first `wanted` distinct tasks overall are among the first `wanted` of some range.
    if not names:
        return []
    return sorted(set(inbox_query(domain, names, where, wanted)))[:wanted]


def inbox_query(domain: str, names: list[str], where: InboxFilter, wanted: int) -> Any:
    """The inbox's read: `(created_at, task id)` of the first `wanted` assignee rows of each
    name in `names`, each an ordered range of the `human_task_inbox` index, merged with
    UNION ALL (one `IN` query where the database cannot limit the parts of a union)."""

    def one(assignees: list[str]) -> Any:
        found = HumanTaskAssignee.objects.filter(domain=domain, assignee__in=assignees)
        if where.workflow:
            found = found.filter(task__workflow_key=where.workflow)
        if where.state:
            found = found.filter(task__state=where.state)
        if where.claimed is not None:
            found = found.filter(
                task__status=HumanTaskStatus.CLAIMED if where.claimed else HumanTaskStatus.OPEN
            )
        return found.order_by("created_at", "task_id").values_list("created_at", "task_id")

    if len(names) == 1 or not connection.features.supports_slicing_ordering_in_compound:
        return one(names)[: wanted * len(names)]
    first, *rest = (one([name])[:wanted] for name in names)
    return first.union(*rest, all=True)


def human_task_get(
    *, domain: str, task_id: str, caller: Caller, operator: bool = False
) -> HumanTask:
    """The task `task_id` of `domain` as the caller may see it: assigned to them, claimed by
    them, or any to an operator; 404 `HumanTask:NotFound` otherwise."""
    try:
        key = uuid.UUID(str(task_id))
    except ValueError:
        key = None
    task = HumanTask.objects.filter(pk=key, domain=domain).first() if key else None
    if task is None or not (
        operator or is_assigned(task, caller) or (caller.actor and task.claimed_by == caller.actor)
    ):
        raise VNextError(Codes.HUMAN_TASK_NOT_FOUND, f"no human task {task_id} of yours")
    return task


def human_task_claim(*, task: HumanTask, caller: Caller) -> HumanTask:
    """Claim `task` for the caller: one compare-and-set `open -> claimed`; 409 when it is
    claimed already (by someone else) or closed."""
    now = timezone.now()
    won = HumanTask.objects.filter(pk=task.pk, status=HumanTaskStatus.OPEN).update(
        status=HumanTaskStatus.CLAIMED, claimed_by=caller.actor, claimed_at=now
    )
    task.refresh_from_db()
    if not won:
        if task.status == HumanTaskStatus.CLAIMED and task.claimed_by == caller.actor:
            return task  # claimed by them already: the same answer again
        _refuse_closed(task)
        raise VNextError(
            Codes.HUMAN_TASK_CLAIMED,
            f"human task {task.pk} is claimed by {task.claimed_by}",
            extra={"claimedBy": task.claimed_by},
        )
    _history(task, "human-task:claim", caller.actor, {"humanTaskId": str(task.pk)}, now)
    return task


def human_task_release(*, task: HumanTask, caller: Caller, operator: bool) -> HumanTask:
    """Put a claimed task back in the inbox (`claimed -> open`): its claimer, or an operator."""
    _refuse_closed(task)
    if task.status != HumanTaskStatus.CLAIMED:
        return task  # open already
    if task.claimed_by != caller.actor and not operator:
        raise VNextError(
            Codes.HUMAN_TASK_NOT_CLAIMER, f"human task {task.pk} is claimed by {task.claimed_by}"
        )
    now = timezone.now()
    released = HumanTask.objects.filter(
        pk=task.pk, status=HumanTaskStatus.CLAIMED, claimed_by=task.claimed_by
    ).update(status=HumanTaskStatus.OPEN, claimed_by="", claimed_at=None)
    previous = task.claimed_by
    task.refresh_from_db()
    if not released:
        _refuse_closed(task)
        return task
    body = {"humanTaskId": str(task.pk), "claimedBy": previous}
    _history(task, "human-task:release", caller.actor, body, now)
    return task


def human_task_complete(
    *,
    task: HumanTask,
    caller: Caller,
    transition: str | None,
    data: Any,
    info: RequestInfo,
) -> tuple[HumanTask, RunAnswer]:
    """Complete the caller's claimed `task` with `data`: the transition it runs, and its answer
    (see the module docstring)."""
    _refuse_closed(task)
    if task.status != HumanTaskStatus.CLAIMED or task.claimed_by != caller.actor:
        raise VNextError(
            Codes.HUMAN_TASK_NOT_CLAIMER,
            f"claim human task {task.pk} before completing it"
            if task.status == HumanTaskStatus.OPEN
            else f"human task {task.pk} is claimed by {task.claimed_by}",
        )
    if not isinstance(data, dict):
        raise VNextError(
            Codes.HUMAN_TASK_INVALID_FORM,
            "the form data is an object",
            [Violation("/data", "an object")],
        )
    form = task.form
    if isinstance(form, dict) and ("type" in form or "properties" in form):
        violations = schema_violations(form, data, prefix="/data")
        if violations:
            raise VNextError(
                Codes.HUMAN_TASK_INVALID_FORM,
                f"the form data does not match human task {task.pk}'s form "
                f"({len(violations)} problem(s))",
                violations,
            )
    key = _transition_key(task, transition)
    now = timezone.now()
    result = {"transition": key, "data": data}
    won = HumanTask.objects.filter(
        pk=task.pk, status=HumanTaskStatus.CLAIMED, claimed_by=caller.actor
    ).update(
        status=HumanTaskStatus.COMPLETED,
        completed_by=caller.actor,
        completed_at=now,
        closed_at=now,
        result=result,
    )
    if not won:
        task.refresh_from_db()
        _refuse_closed(task)
        raise VNextError(Codes.HUMAN_TASK_NOT_CLAIMER, f"human task {task.pk} changed hands")
    HumanTaskAssignee.objects.filter(task_id=task.pk).delete()
    try:
        answer = instance_transition_answer(
            domain=task.domain,
            workflow=task.workflow_key,
            ref=str(task.instance_id),
            transition_key=key,
            body=lambda: {"attributes": data},
            info=info,
            sync_requested=True,
        )
    except VNextError:
        _reopen(task, caller.actor)
        raise
    # Timed when it was marked completed: before the history row of the transition it ran.
    body = {"humanTaskId": str(task.pk), **result}
    _history(task, "human-task:complete", caller.actor, body, now)
    task.refresh_from_db()
    return task, answer


def _transition_key(task: HumanTask, asked: str | None) -> str:
    # The manual transition of the task's state that completes it: the one asked for, or the
    # state's only one.
    instance = task.instance
    definition = workflow_definition(task.domain, task.workflow_key, instance.workflow_version)
    manual = [
        t.key
        for t in definition.available_transitions(task.state)
        if t.trigger_type == Trigger.MANUAL
    ]
    if asked:
        if asked not in manual:
            raise VNextError(
                Codes.HUMAN_TASK_NO_TRANSITION,
                f"{asked!r} is not a manual transition of state {task.state!r} "
                f"(one of: {', '.join(manual) or 'none'})",
                [Violation("/transition", f"one of {manual}")],
            )
        return asked
    if len(manual) != 1:
        raise VNextError(
            Codes.HUMAN_TASK_NO_TRANSITION,
            f"state {task.state!r} has {len(manual)} manual transitions: name one "
            f"({', '.join(manual) or 'none'})",
            [Violation("/transition", f"one of {manual}")],
        )
    return manual[0]


def _reopen(task: HumanTask, actor: str) -> None:
    # The transition was refused: the entry is the claimer's again, unless its state is gone.
    instance = task.instance
    instance.refresh_from_db()
    if instance.current_state != task.state or instance.status == InstanceStatus.COMPLETED:
        HumanTask.objects.filter(pk=task.pk).update(
            status=HumanTaskStatus.CANCELLED, result={"cancelled": "state left"}
        )
        return
    HumanTask.objects.filter(pk=task.pk, status=HumanTaskStatus.COMPLETED).update(
        status=HumanTaskStatus.CLAIMED,
        claimed_by=actor,
        completed_by="",
        completed_at=None,
        closed_at=None,
        result=None,
    )
    HumanTaskAssignee.objects.bulk_create(
        HumanTaskAssignee(
            task_id=task.pk, domain=task.domain, assignee=name, created_at=task.created_at
        )
        for name in assignee_names(task.roles or [], task.users or [])
    )


def _refuse_closed(task: HumanTask) -> None:
    if task.status not in OPEN_STATUSES:
        raise VNextError(
            Codes.HUMAN_TASK_NOT_OPEN,
            f"human task {task.pk} is {task.status}",
            extra={"status": task.status},
        )


def _history(task: HumanTask, action: str, actor: str, body: dict[str, Any], at: datetime) -> None:
    snapshot = snapshot_of(task.instance)
    OrmStore().operator_history(snapshot, action=action, body=body, actor=actor, at=at)


def human_tasks_cancel(*, instance_id: uuid.UUID, states: Iterable[str] | None = None) -> int:
    """Cancel an instance's open entries (an operator's tool); how many closed."""
    return human_tasks_close(instance_id, states=states, reason="cancelled by an operator")


def human_task_body(task: HumanTask, href: str) -> dict[str, Any]:
    """The inbox item of `task`; `href` is where it lives."""
    now = timezone.now()
    return {
        "id": str(task.pk),
        "domain": task.domain,
        "workflow": task.workflow_key,
        "instanceId": str(task.instance_id),
        "state": task.state,
        "taskKey": task.task_key,
        "title": task.title,
        "instructions": task.instructions,
        "assignedTo": {"roles": list(task.roles or []), "users": list(task.users or [])},
        "form": task.form,
        "context": task.context,
        "status": task.status,
        "claimedBy": task.claimed_by or None,
        "claimedAt": task.claimed_at.isoformat() if task.claimed_at else None,
        "completedBy": task.completed_by or None,
        "completedAt": task.completed_at.isoformat() if task.completed_at else None,
        "dueDate": task.due_at.isoformat() if task.due_at else None,
        "overdue": bool(task.due_at and task.due_at < now and task.status in OPEN_STATUSES),
        "createdAt": task.created_at.isoformat(),
        "href": href,
        "links": {
            "claim": f"{href}/claim",
            "release": f"{href}/release",
            "complete": f"{href}/complete",
        },
    }
