"""Instances and everything recorded about them: transitions, data versions, the task journal,
incidents and parent/child correlations (DESIGN section 3); the durable job queue's table is
`instances/job_table.py`."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.utils import timezone

# Django registers the models of an app by importing its `models` module: the job table lives in
# its own module (only `instances.queue` queries it), imported here for that registration alone.
from instances import (
    human_task_table,  # noqa: F401
    job_table,  # noqa: F401
)
from instances.status import (
    BatchOperation,
    BatchOutcome,
    BatchStatus,
    Channel,
    CorrelationStatus,
    FlowType,
    InstanceStatus,
    TaskStatus,
    TransitionStatus,
    choices,
)


class Instance(models.Model):
    """One run of a workflow. Status changes are compare-and-set updates (see `store.py`)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    domain = models.CharField(max_length=100)
    workflow_key = models.CharField(max_length=200)
    workflow_version = models.CharField(max_length=64)
    # NULL, not "": the unique constraint on live business keys ignores instances without one.
    key = models.CharField(max_length=100, null=True, blank=True)  # noqa: DJ001
    status = models.CharField(
        max_length=1, choices=choices(InstanceStatus), default=InstanceStatus.ACTIVE
    )
    current_state = models.CharField(max_length=200)
    effective_state = models.CharField(max_length=200)
    effective_state_type = models.CharField(max_length=20, default="initial")
    effective_state_subtype = models.CharField(max_length=20, default="none")
    data = models.JSONField(default=dict, blank=True)
    data_version_major = models.PositiveIntegerField(default=1)
    data_version_minor = models.PositiveIntegerField(default=0)
    data_version_patch = models.PositiveIntegerField(default=0)
    # `etag` changes on every committed change, `entity_etag` only when the data changes.
    etag = models.CharField(max_length=32)
    entity_etag = models.CharField(max_length=32)
    # Bumped by every committed transition (not by updateData): the optimistic guard of
    # pipelines that commit in one statement.
    state_version = models.PositiveIntegerField(default=0)
    busy_owner = models.CharField(max_length=64, blank=True)
    busy_since = models.DateTimeField(null=True, blank=True)
    tags = models.JSONField(default=list, blank=True)
    stage = models.CharField(max_length=120, blank=True)
    extra = models.JSONField(default=dict, blank=True)
    parent_correlation = models.ForeignKey(
        "Correlation", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by = models.CharField(max_length=150, blank=True)
    modified_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # A business key names one live instance per workflow; a completed one frees it.
            models.UniqueConstraint(
                fields=["domain", "workflow_key", "key"],
                condition=Q(key__isnull=False) & ~Q(status=InstanceStatus.COMPLETED),
                name="instance_live_business_key",
            ),
        ]
        indexes = [
            models.Index(fields=["domain", "workflow_key", "-created_at"], name="instance_list"),
            # The reaper's and the dashboard's Busy-past-lease range. Partial: it holds only
            # the few Busy rows, and a hop's guarded UPDATE (`status = 'A'`) cannot take it for
            # the primary key when the statistics are stale.
            models.Index(
                fields=["busy_since"],
                condition=Q(status=InstanceStatus.BUSY),
                name="instance_busy",
            ),
            # The archive's candidates: completed instances of a workflow, oldest first.
            models.Index(
                fields=["domain", "workflow_key", "completed_at"],
                condition=Q(status=InstanceStatus.COMPLETED),
                name="instance_archivable",
            ),
            # Every instance by business key, completed ones too (the live-key constraint above
            # is partial, so a completed instance was found by a sequential scan). The key
            # first, by character (`varchar_pattern_ops` serves `=` and `LIKE 'k%'`): the same
            # index answers the admin's exact or prefix key search across workflows.
            models.Index(
                fields=["key", "domain", "workflow_key"],
                opclasses=["varchar_pattern_ops", "text_ops", "text_ops"],
                name="instance_business_key",
            ),
            # Cancelled instances (Completed by the workflow's cancel): the dashboard tells
            # them from the completed ones through this small index (migration 0016).
            models.Index(
                fields=["domain", "workflow_key"],
                condition=Q(status=InstanceStatus.COMPLETED, effective_state_subtype="cancelled"),
                name="instance_cancelled",
            ),
        ]
        permissions = [
            ("relay_subflow", "Relay a transition to a reserved subflow (service credential)"),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_key} {self.id} [{self.status}] {self.current_state}"

    @property
    def data_version(self) -> str:
        """The data version as semver text."""
        return f"{self.data_version_major}.{self.data_version_minor}.{self.data_version_patch}"


class InstanceCount(models.Model):
    """How many instances a workflow holds in a status, kept by the database with every write:
    the triggers of migration 0013 append a signed `InstanceCountDelta` per change (an insert,
    never a contended update), and `instance_counts_fold` adds the deltas in here. The figure
    is this row plus the deltas not yet folded (`instances.counts`)."""

    domain = models.CharField(max_length=100)
    workflow_key = models.CharField(max_length=200)
    status = models.CharField(max_length=1, choices=choices(InstanceStatus))
    count = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["domain", "workflow_key", "status"], name="instance_count_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.domain}/{self.workflow_key} [{self.status}]: {self.count}"


class InstanceCountDelta(models.Model):
    """A change of `InstanceCount` not yet folded in: +n or -n instances of a workflow in a
    status. Written only by the triggers; few (the sweep folds them every half minute)."""

    id = models.BigAutoField(primary_key=True)
    domain = models.CharField(max_length=100)
    workflow_key = models.CharField(max_length=200)
    status = models.CharField(max_length=1, choices=choices(InstanceStatus))
    delta = models.BigIntegerField()

    def __str__(self) -> str:
        return f"{self.domain}/{self.workflow_key} [{self.status}]: {self.delta:+d}"


class InstanceTransition(models.Model):
    """One attempt to run a transition on an instance (the history the API shows)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # The (instance, started_at) index serves the foreign key too: no separate index.
    instance = models.ForeignKey(
        Instance, on_delete=models.CASCADE, related_name="transitions", db_index=False
    )
    transition_key = models.CharField(max_length=200)
    from_state = models.CharField(max_length=200, blank=True)
    to_state = models.CharField(max_length=200, blank=True)
    trigger_type = models.PositiveSmallIntegerField()
    body = models.JSONField(default=dict, blank=True)
    actor = models.CharField(max_length=150, blank=True)
    status = models.CharField(max_length=12, choices=choices(TransitionStatus))
    error_code = models.CharField(max_length=100, blank=True)
    error_message = models.TextField(blank=True)
    effective_state = models.CharField(max_length=200, blank=True)
    effective_state_type = models.CharField(max_length=20, blank=True)
    effective_state_subtype = models.CharField(max_length=20, blank=True)
    stage = models.CharField(max_length=120, blank=True)
    chain_depth = models.PositiveSmallIntegerField(default=0)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["instance", "started_at"], name="transition_history"),
            # The dashboard's last hour of transitions (migration 0016): a range, not a scan.
            models.Index(fields=["started_at"], name="transition_started"),
        ]
        ordering = ["started_at"]

    def __str__(self) -> str:
        return f"{self.transition_key}: {self.from_state} -> {self.to_state} [{self.status}]"


class InstanceDataVersion(models.Model):
    """The instance data after each change, for audit and diffs."""

    instance = models.ForeignKey(
        Instance, on_delete=models.CASCADE, related_name="data_versions", db_index=False
    )
    transition = models.ForeignKey(
        InstanceTransition, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    version = models.CharField(max_length=64)
    patch = models.JSONField(default=dict)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["instance", "created_at"], name="data_version_history")]

    def __str__(self) -> str:
        return f"{self.instance_id} data {self.version}"


class InstanceTask(models.Model):
    """Task journal: one row per task execution (`{fanOutKey}#{index}` for fan-out items)."""

    instance = models.ForeignKey(
        Instance, on_delete=models.CASCADE, related_name="tasks", db_index=False
    )
    transition = models.ForeignKey(
        InstanceTransition, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    task_key = models.CharField(max_length=250)
    phase = models.CharField(max_length=20)  # onExecute | onExit | onEntry
    order = models.PositiveIntegerField(default=1)
    status = models.CharField(max_length=12, choices=choices(TaskStatus))
    attempts = models.PositiveSmallIntegerField(default=1)
    response = models.JSONField(null=True, blank=True)
    error_code = models.CharField(max_length=100, blank=True)
    error_message = models.TextField(blank=True)
    duration_ms = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["instance", "created_at"], name="task_journal")]

    def __str__(self) -> str:
        return f"{self.task_key} [{self.status}]"


class Incident(models.Model):
    """A failure an operator may need to see. Never a stack trace."""

    instance = models.ForeignKey(
        Instance, on_delete=models.CASCADE, related_name="incidents", db_index=False
    )
    transition = models.ForeignKey(
        InstanceTransition, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    state = models.CharField(max_length=200, blank=True)
    transition_key = models.CharField(max_length=200, blank=True)
    task_key = models.CharField(max_length=250, blank=True)
    error_code = models.CharField(max_length=100)
    layer = models.CharField(max_length=20, default="pipeline")  # transport | task | pipeline
    boundary_action = models.CharField(max_length=20, blank=True)
    boundary_level = models.CharField(max_length=20, blank=True)
    # The pipeline step that failed (`ON_ENTRY`, ...) and the job attempt it failed on.
    step = models.CharField(max_length=40, blank=True)
    attempt = models.PositiveIntegerField(null=True, blank=True)
    message = models.TextField()
    trace_id = models.CharField(max_length=64, blank=True)
    resolved = models.BooleanField(default=False)
    resolved_at = models.DateTimeField(null=True, blank=True)
    # How it was closed (`cancelled`, `exited`, `retried`, ...) and by whom.
    resolution = models.CharField(max_length=40, blank=True)
    resolved_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["instance", "resolved"], name="incident_open")]

    def __str__(self) -> str:
        return f"{self.error_code} on {self.instance_id}"


class Correlation(models.Model):
    """A parent instance waiting on (S) or having started (P) a child instance."""

    parent = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="correlations")
    parent_state = models.CharField(max_length=200)
    child = models.ForeignKey(
        Instance, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    type = models.CharField(max_length=1, choices=choices(FlowType))
    status = models.CharField(
        max_length=12, choices=choices(CorrelationStatus), default=CorrelationStatus.ACTIVE
    )
    created_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.parent_id} -> {self.child_id} ({self.type}, {self.status})"


class OperatorAction(models.Model):
    """The audit trail of operators' tools (admin actions and commands): who did what, when, to
    which instance (none for a job without one), and how it ended."""

    class Action(models.TextChoices):
        RETRY = "retry", "Retry"
        CANCEL = "cancel", "Cancel"
        RESOLVE = "resolve", "Resolve without retry"
        REPLAY = "replay", "Replay job"
        FORCE_RELEASE = "force-release", "Force-release lock"
        RESTORE = "restore", "Restore from the archive"
        SUSPEND = "suspend", "Suspend"
        RESUME = "resume", "Resume"
        MIGRATE = "migrate", "Migrate to another version"
        BATCH = "batch", "Batch operation"

    actor = models.CharField(max_length=150)
    action = models.CharField(max_length=20, choices=Action.choices)
    # Where it came from: the admin, the API, a command, or a batch (which names its own).
    channel = models.CharField(max_length=10, choices=choices(Channel), default=Channel.ADMIN)
    instance = models.ForeignKey(
        Instance,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="operator_actions",
        db_index=False,  # covered by the (instance, created_at) index
    )
    target = models.CharField(max_length=200, blank=True)
    outcome = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["instance", "created_at"], name="operator_action_trail")]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor} ({self.channel}): {self.target} -> {self.outcome}"


class ArchivedInstance(models.Model):
    """The tombstone of an instance archived after its retention (`instances/archive.py`): what
    the API answers 410 with, and where `instances_restore` reads it back from."""

    instance_id = models.UUIDField(primary_key=True)
    domain = models.CharField(max_length=100)
    workflow_key = models.CharField(max_length=200)
    key = models.CharField(max_length=100, null=True, blank=True)  # noqa: DJ001
    completed_at = models.DateTimeField(null=True, blank=True)
    archived_at = models.DateTimeField(default=timezone.now)
    # The archive file holding its rows, relative to the archive's root.
    location = models.CharField(max_length=500)

    class Meta:
        indexes = [
            models.Index(
                fields=["domain", "workflow_key", "key"],
                condition=Q(key__isnull=False),
                name="archived_instance_key",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_key} {self.instance_id} archived to {self.location}"


class Batch(models.Model):
    """An operator's operation over the instances a filter matched when it was created: the
    ids are frozen into its items at once, then the job runner handles them in chunks, each
    item's outcome committed with the operation's own writes (exactly once, across crashes)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    domain = models.CharField(max_length=100)
    workflow_key = models.CharField(max_length=200)
    operation = models.CharField(max_length=10, choices=choices(BatchOperation))
    # The operation's own fields (a cancel's reason, a migration's target and mapping ...).
    arguments = models.JSONField(default=dict, blank=True)
    # The list API's filter as given, kept to say what was matched.
    filter = models.JSONField(default=list, blank=True)
    status = models.CharField(
        max_length=10, choices=choices(BatchStatus), default=BatchStatus.RUNNING
    )
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    refused = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    created_by = models.CharField(max_length=150)
    channel = models.CharField(max_length=10, choices=choices(Channel), default=Channel.API)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["domain", "workflow_key", "-created_at"], name="batch_list")
        ]
        verbose_name_plural = "batches"

    def __str__(self) -> str:
        return f"{self.operation} batch {self.id} [{self.status}]"

    @property
    def handled(self) -> int:
        """Items with an outcome."""
        return self.done + self.refused + self.failed


class BatchItem(models.Model):
    """One instance of a batch and how its operation ended."""

    id = models.BigAutoField(primary_key=True)
    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="items", db_index=False)
    position = models.PositiveIntegerField()
    instance_id = models.UUIDField()
    outcome = models.CharField(
        max_length=10, choices=choices(BatchOutcome), default=BatchOutcome.PENDING
    )
    reason = models.TextField(blank=True)
    handled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["batch", "position"], name="batch_item_position"),
        ]
        indexes = [
            # The next chunk: a batch's pending items in order.
            models.Index(
                fields=["batch", "position"],
                condition=Q(outcome=BatchOutcome.PENDING),
                name="batch_item_pending",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.instance_id}: {self.outcome}"


class OutboxEvent(models.Model):
    """A CloudEvent about an instance (started, state entered, completed, faulted, incident
    opened or resolved), written by the store in the transaction of the change it describes
    and published to its `target` by the relay (`manage.py outbox_relay`, instances/outbox.py).

    `id` is the relay's order: an instance's rows are inserted after its row is locked by the
    change's guarded write, so their ids grow in the order its changes commit. A row is pending
    until the broker confirmed it (`published_at`), then kept for the retention period."""

    id = models.BigAutoField(primary_key=True)
    # No foreign key: an event outlives an archived instance, and a check would cost each hop.
    instance_id = models.UUIDField()
    event_id = models.UUIDField(default=uuid.uuid4)
    type = models.CharField(max_length=100)
    source = models.CharField(max_length=500)
    subject = models.CharField(max_length=200, blank=True)
    time = models.DateTimeField(default=timezone.now)
    data = models.JSONField(default=dict)
    target = models.CharField(max_length=100)
    published_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # The relay's read, "the oldest pending rows of a target": an index range scan.
            models.Index(
                fields=["target", "id"],
                condition=Q(published_at__isnull=True),
                name="outbox_pending",
            ),
            # The prune of rows published before the retention period.
            models.Index(
                fields=["published_at"],
                condition=Q(published_at__isnull=False),
                name="outbox_published",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.type} of {self.instance_id}"
