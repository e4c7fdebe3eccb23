"""The job table: the durable queue / transactional outbox (DESIGN section 3), alone in its module
so that the import contract can hold every query of its rows inside `instances/queue.py`."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from instances.status import JobStatus, choices


class Job(models.Model):
    """The durable queue / transactional outbox: inserted with the change that causes it."""

    kind = models.CharField(max_length=40)
    instance = models.ForeignKey(
        "instances.Instance",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="jobs",
        db_index=False,  # covered by the (instance, status) index
    )
    state = models.CharField(max_length=200, blank=True)  # the state a timer belongs to
    payload = models.JSONField(default=dict, blank=True)
    run_at = models.DateTimeField(default=timezone.now)
    status = models.CharField(max_length=20, choices=choices(JobStatus), default=JobStatus.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    lease_owner = models.CharField(max_length=64, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    dedupe_key = models.CharField(max_length=200, null=True, blank=True, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["status", "run_at"], name="job_due"),
            models.Index(fields=["instance", "status"], name="job_instance"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} job {self.pk} [{self.status}]"
