"""What a flush writes of the human-task inbox (task type 5), in the flush's transaction: the
entries of the states the instance leaves close as `cancelled` (all of them when it ends), then
the entries its hops opened are inserted, open when the instance rests in their state, else
cancelled at once (a later hop of the same flush left it).

Only an entry that is still open or claimed closes: one being completed was marked completed
before its transition ran (instances/human_tasks.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.utils import timezone

from instances.engine.records import InstanceSnapshot, PendingWrites
from instances.human_task_table import OPEN_STATUSES, HumanTask, HumanTaskAssignee
from instances.status import HumanTaskStatus, InstanceStatus


def assignee_names(roles: Iterable[str], users: Iterable[str]) -> list[str]:
    """The `HumanTaskAssignee.assignee` values of roles and users (`role:x`, `user:y`)."""
    return [f"role:{role}" for role in roles] + [f"user:{user}" for user in users]


def human_tasks_close(
    instance_id: uuid.UUID, *, states: Iterable[str] | None, reason: str = "state left"
) -> int:
    """Cancel the open (and claimed) entries of `instance_id` in `states` (None: every state);
    their assignee rows go, so the inbox no longer holds them. How many closed."""
    open_tasks = HumanTask.objects.filter(instance_id=instance_id, status__in=OPEN_STATUSES)
    if states is not None:
        open_tasks = open_tasks.filter(state__in=sorted(states))
    ids = list(open_tasks.values_list("id", flat=True))
    if not ids:
        return 0
    closed = HumanTask.objects.filter(id__in=ids, status__in=OPEN_STATUSES).update(
        status=HumanTaskStatus.CANCELLED,
        closed_at=timezone.now(),
        result={"cancelled": reason},
    )
    HumanTaskAssignee.objects.filter(task_id__in=ids).delete()
    return closed


def human_tasks_write(committed: InstanceSnapshot, writes: PendingWrites) -> None:
    """The inbox rows of a flush (see the module docstring)."""
    if writes.close_all_human_tasks or writes.close_human_tasks_of:
        human_tasks_close(
            committed.id,
            states=None if writes.close_all_human_tasks else writes.close_human_tasks_of,
            reason="instance ended" if writes.close_all_human_tasks else "state left",
        )
    if not writes.human_tasks:
        return
    now = timezone.now()
    resting = committed.status not in (InstanceStatus.COMPLETED, InstanceStatus.FAULTED)
    tasks: list[HumanTask] = []
    assignees: list[HumanTaskAssignee] = []
    for row in writes.human_tasks:
        is_open = resting and row.state == committed.current_state
        tasks.append(
            HumanTask(
                id=row.id,
                instance_id=committed.id,
                domain=committed.domain,
                workflow_key=committed.workflow_key,
                state=row.state,
                task_key=row.task_key,
                transition_id=row.transition_id,
                title=row.title[:500],
                instructions=row.instructions,
                roles=row.roles,
                users=row.users,
                form=row.form,
                context=row.context,
                due_at=row.due_at,
                status=HumanTaskStatus.OPEN if is_open else HumanTaskStatus.CANCELLED,
                closed_at=None if is_open else now,
                result=None if is_open else {"cancelled": "state left in the same run"},
                created_at=now,
            )
        )
        if is_open:
            assignees.extend(
                HumanTaskAssignee(
                    task_id=row.id, domain=committed.domain, assignee=name, created_at=now
                )
                for name in assignee_names(row.roles, row.users)
            )
    HumanTask.objects.bulk_create(tasks)
    HumanTaskAssignee.objects.bulk_create(assignees)
