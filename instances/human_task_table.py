"""The human-task inbox's tables (task type 5, `instances/human_tasks.py`), in their own module
beside the job table: a `HumanTask` row per opened human task, and one `HumanTaskAssignee` row
per role or user it is assigned to while it is open (claimed included).

The inbox reads "the open tasks of one of these assignees, oldest first": one range of the
`human_task_inbox` index per assignee (domain, assignee, created_at, task), merged. Assignee
rows exist only while their task is open or claimed (the close deletes them), so that index holds
the open work alone, however many instances and closed tasks there are."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.utils import timezone

from instances.status import HumanTaskStatus, choices

OPEN_STATUSES = (HumanTaskStatus.OPEN, HumanTaskStatus.CLAIMED)


class HumanTask(models.Model):
    """One human task (type 5) an instance's state opened: its assignment, who claimed it, how
    it ended. Claim, release and complete are compare-and-set updates of `status`."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    instance = models.ForeignKey(
        "instances.Instance",
        on_delete=models.CASCADE,
        related_name="human_tasks",
        db_index=False,  # covered by the (instance, status) index
    )
    domain = models.CharField(max_length=100)
    workflow_key = models.CharField(max_length=200)
    state = models.CharField(max_length=200)
    task_key = models.CharField(max_length=250)
    # The history row of the transition whose hop opened it.
    transition_id = models.UUIDField(null=True, blank=True)
    title = models.CharField(max_length=500)
    instructions = models.TextField(blank=True)
    roles = models.JSONField(default=list, blank=True)
    users = models.JSONField(default=list, blank=True)
    form = models.JSONField(null=True, blank=True)
    context = models.JSONField(null=True, blank=True)
    status = models.CharField(
        max_length=12, choices=choices(HumanTaskStatus), default=HumanTaskStatus.OPEN
    )
    claimed_by = models.CharField(max_length=150, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    completed_by = models.CharField(max_length=150, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    # The completion: the transition it ran and the form data.
    result = models.JSONField(null=True, blank=True)
    due_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # The close when the state is left (by instance, the open ones).
            models.Index(fields=["instance", "status"], name="human_task_instance"),
            # "Mine": what a user claimed, oldest first.
            models.Index(
                fields=["claimed_by", "created_at", "id"],
                condition=Q(status=HumanTaskStatus.CLAIMED),
                name="human_task_claimed",
            ),
            # The admin's list of open work, newest first.
            models.Index(
                fields=["-created_at"],
                condition=Q(status__in=OPEN_STATUSES),
                name="human_task_open",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.title} [{self.status}] {self.workflow_key}/{self.state}"


class HumanTaskAssignee(models.Model):
    """One role (`role:<name>`) or user (`user:<name>`) an open human task is assigned to."""

    id = models.BigAutoField(primary_key=True)
    task = models.ForeignKey(
        HumanTask,
        on_delete=models.CASCADE,
        related_name="assignees",
        db_index=False,  # covered by the (task) index
    )
    domain = models.CharField(max_length=100)
    assignee = models.CharField(max_length=250)
    # The task's `created_at`: the inbox's order, read from the index itself.
    created_at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(
                fields=["domain", "assignee", "created_at", "task"], name="human_task_inbox"
            ),
            models.Index(fields=["task"], name="human_task_assignee_task"),
        ]

    def __str__(self) -> str:
        return f"{self.assignee} -> {self.task_id}"
