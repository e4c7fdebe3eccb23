"""Batch operations: retry, cancel, suspend, resume or migrate every instance a filter (the list
API's language) matches.

Creating a batch freezes the matching ids into its items in one statement, in creation order;
instances that match later are not in it. A job (kind `batch`, one per batch) then works the
items off in chunks of `VNEXT_BATCH_CHUNK`, on the embedded runner or a Celery worker. Each item
is handled in one transaction that holds the batch row: the operation's own writes (a retry or
cancel is accepted there and its job enqueued; suspend, resume and migrate are applied whole),
the item's outcome and the batch's counters commit together, so after a crash or a SIGKILL the
next run picks up at the first item without an outcome and no instance is handled twice.
Cancelling a batch (which takes the same row lock) marks the items still pending `cancelled`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from instances.engine.errors import Codes, VNextError, refused_at
from instances.engine.outcomes import PipelineFault, PipelineSuperseded
from instances.job_handlers import HANDLERS, RetryLater
from instances.models import Batch, BatchItem, Instance, OperatorAction
from instances.operations import operator_action_record
from instances.queue import job_batch_enqueue
from instances.repair import Actor, instance_migrate, instance_resume, instance_suspend
from instances.selectors import instance_ids_matching
from instances.services import (
    RequestInfo,
    instance_retry,
    instance_snapshot,
    instance_transition_accept,
    workflow_definition,
)
from instances.status import BatchOperation, BatchOutcome, BatchStatus, Channel, JobKind
from vnext.conf import vnext_setting

if TYPE_CHECKING:
    from instances.job_table import Job


@dataclass(frozen=True)
class BatchRequest:
    """What an operator asks of a batch: the operation, the filter, the operation's fields."""

    operation: str
    filter: Any
    arguments: dict[str, Any]


_KINDS = {str: "text", dict: "a JSON object", bool: "true or false"}


def batch_request(body: Any) -> BatchRequest:
    """A batch request from a JSON body (`{operation, filter, ...operation fields}`), or 400
    `App:900002` naming the field."""
    if not isinstance(body, dict):
        raise VNextError(Codes.APP_INVALID_REQUEST, "the body must be a JSON object")
    operation = body.get("operation")
    if operation not in BatchOperation._value2member_map_:
        raise refused_at(
            Codes.APP_INVALID_REQUEST,
            "/operation",
            f"operation must be one of {', '.join(BatchOperation)}",
        )
    filters = body.get("filter", [])
    if filters is None:
        filters = []
    if not isinstance(filters, str | list | dict):
        raise refused_at(
            Codes.APP_INVALID_REQUEST,
            "/filter",
            "filter is the list API's filter: a string, a list of them, or a JSON filter",
        )
    for name, kind in (
        ("targetVersion", str),
        ("stateMapping", dict),
        ("attributes", dict),
        ("reason", str),
        ("dryRun", bool),
    ):
        if name in body and not isinstance(body[name], kind):
            raise refused_at(
                Codes.APP_INVALID_REQUEST,
                f"/{name}",
                f"{name} is {_KINDS[kind]}",
            )
    mapping = body.get("stateMapping") or {}
    if not all(isinstance(value, str) for value in mapping.values()):
        raise refused_at(
            Codes.APP_INVALID_REQUEST,
            "/stateMapping",
            "stateMapping maps old state keys to new ones",
        )
    arguments: dict[str, Any] = {}
    if operation == BatchOperation.MIGRATE:
        target = body.get("targetVersion")
        if not target:
            raise refused_at(
                Codes.APP_INVALID_REQUEST, "/targetVersion", "a migrate batch needs targetVersion"
            )
        arguments = {"targetVersion": target, "stateMapping": mapping}
    elif operation == BatchOperation.RETRY and body.get("attributes"):
        arguments = {"attributes": body["attributes"]}
    reason = body.get("reason")
    if reason:
        arguments["reason"] = reason
    return BatchRequest(str(operation), filters, arguments)


def batch_count(
    *, domain: str, workflow: str, request: BatchRequest, visible: Q | None, roles: frozenset[str]
) -> int:
    """How many instances the batch would freeze now (a dry run): nothing is created."""
    workflow_definition(domain, workflow)
    return instance_ids_matching(
        domain=domain,
        workflow=workflow,
        filters=request.filter,
        visible=visible,
        roles=roles,
    ).count()


def batch_create(
    *,
    domain: str,
    workflow: str,
    request: BatchRequest,
    actor: Actor,
    visible: Q | None,
    roles: frozenset[str],
) -> Batch:
    """Create the batch with the ids its filter matches now (400 `Batch:TooLarge` above
    `VNEXT_BATCH_MAX_ITEMS`) and enqueue its job; audited."""
    workflow_definition(domain, workflow)
    ids = instance_ids_matching(
        domain=domain,
        workflow=workflow,
        filters=request.filter,
        visible=visible,
        roles=roles,
    ).values("id")
    limit = int(vnext_setting("BATCH_MAX_ITEMS"))
    sql, params = ids.query.sql_with_params()
    with transaction.atomic():
        batch = Batch.objects.create(
            domain=domain,
            workflow_key=workflow,
            operation=request.operation,
            arguments=request.arguments,
            filter=request.filter,
            created_by=actor.name,
            channel=actor.channel,
        )
        with connection.cursor() as cursor:
            # One statement: the ids in creation order, numbered; one over the limit is enough
            # to refuse.
            cursor.execute(
                f"INSERT INTO {BatchItem._meta.db_table} "
                "(batch_id, position, instance_id, outcome, reason) "
                "SELECT %s, row_number() OVER (), matched.id, %s, '' "
                f"FROM ({sql} LIMIT %s) matched",
                [
                    batch.pk.hex if connection.vendor == "sqlite" else batch.pk,
                    BatchOutcome.PENDING,
                    *params,
                    limit + 1,
                ],
            )
            total = cursor.rowcount
        if total > limit:
            transaction.set_rollback(True)
            raise refused_at(
                Codes.BATCH_TOO_LARGE,
                "/filter",
                f"the filter matches more than {limit} instances (VNEXT_BATCH_MAX_ITEMS): "
                "narrow it, or run several batches",
            )
        batch.total = total
        if total == 0:
            batch.status, batch.finished_at = BatchStatus.COMPLETED, timezone.now()
        batch.save(update_fields=["total", "status", "finished_at"])
        if total:
            job_batch_enqueue(batch_id=batch.pk)
        operator_action_record(
            actor=actor.name,
            channel=actor.channel,
            action=OperatorAction.Action.BATCH,
            instance_id=None,
            target=f"{request.operation} batch {batch.pk} of {domain}/{workflow}",
            outcome=f"created: {total} instance(s)",
        )
    return batch


def batch_get(*, domain: str, workflow: str, batch_id: str) -> Batch:
    """The batch, or 404 `Batch:NotFound`."""
    try:
        wanted = uuid.UUID(str(batch_id))
    except ValueError:
        wanted = None
    found = (
        Batch.objects.filter(pk=wanted, domain=domain, workflow_key=workflow).first()
        if wanted
        else None
    )
    if found is None:
        raise VNextError(Codes.BATCH_NOT_FOUND, f"{domain}/{workflow} has no batch {batch_id!r}")
    return found


def batch_items(
    batch: Batch, *, outcome: str | None = None, after: int = 0, limit: int = 100
) -> list[BatchItem]:
    """A page of the batch's items in order (after position `after`), optionally of one
    outcome."""
    items = BatchItem.objects.filter(batch=batch, position__gt=after)
    if outcome:
        items = items.filter(outcome=outcome)
    return list(items.order_by("position")[:limit])


def batch_cancel(*, batch: Batch, actor: Actor) -> Batch:
    """Stop a running batch: its pending items end `cancelled` (the ones handled keep their
    outcome). 409 `Batch:Finished` once it completed or was cancelled."""
    with transaction.atomic():
        locked = Batch.objects.select_for_update().get(pk=batch.pk)
        if locked.status != BatchStatus.RUNNING:
            raise VNextError(Codes.BATCH_FINISHED, f"the batch is {locked.status} already")
        left = BatchItem.objects.filter(batch=locked, outcome=BatchOutcome.PENDING).update(
            outcome=BatchOutcome.CANCELLED,
            reason=f"batch cancelled by {actor.name}",
            handled_at=timezone.now(),
        )
        locked.status, locked.finished_at = BatchStatus.CANCELLED, timezone.now()
        locked.save(update_fields=["status", "finished_at"])
        operator_action_record(
            actor=actor.name,
            channel=actor.channel,
            action=OperatorAction.Action.BATCH,
            instance_id=None,
            target=f"{locked.operation} batch {locked.pk}",
            outcome=f"cancelled: {locked.handled} handled, {left} left undone",
        )
    return locked


# --- working a batch off ------------------------------------------------------------------------


def batch_work(batch_id: uuid.UUID, *, chunk: int | None = None) -> bool:
    """Handle the next chunk of the batch's pending items; True while items are left."""
    size = chunk or int(vnext_setting("BATCH_CHUNK"))
    pending = list(
        BatchItem.objects.filter(batch_id=batch_id, outcome=BatchOutcome.PENDING)
        .order_by("position")
        .values_list("pk", flat=True)[:size]
    )
    # A run stays well inside its job's lease: past a third of it, the rest waits for the next
    # run (else a slow chunk would lose the lease and run twice at once, spending attempts).
    deadline = time.monotonic() + float(vnext_setting("JOB_LEASE_SECONDS")) / 3
    for start in range(0, len(pending), GROUP):
        if not _handle_group(batch_id, pending[start : start + GROUP]):
            return False  # cancelled, or finished by another run
        if time.monotonic() > deadline and start + GROUP < len(pending):
            return True
    if len(pending) == size:
        return True
    with transaction.atomic():
        batch = Batch.objects.select_for_update().get(pk=batch_id)
        if (
            batch.status == BatchStatus.RUNNING
            and not BatchItem.objects.filter(batch=batch, outcome=BatchOutcome.PENDING).exists()
        ):
            batch.status, batch.finished_at = BatchStatus.COMPLETED, timezone.now()
            batch.save(update_fields=["status", "finished_at"])
            return False
    return batch.status == BatchStatus.RUNNING


# Items handled in one transaction: their operations, outcomes and counters commit together (a
# commit per item would spend most of a batch's time flushing the log), while the instance rows
# a group locks stay locked for a moment only.
GROUP = 25
_COUNTERS = {
    BatchOutcome.DONE: "done",
    BatchOutcome.REFUSED: "refused",
    BatchOutcome.FAILED: "failed",
}


def _handle_group(batch_id: uuid.UUID, item_ids: list[int]) -> bool:
    """Some items, each exactly once: under the batch row's lock (cancel takes it too), the
    ones another run handled meanwhile skipped, each operation in its own savepoint (a refusal
    undoes its writes only); False when the batch no longer runs."""
    with transaction.atomic():
        batch = Batch.objects.select_for_update().get(pk=batch_id)
        if batch.status != BatchStatus.RUNNING:
            return False
        items = list(
            BatchItem.objects.filter(pk__in=item_ids, outcome=BatchOutcome.PENDING).order_by(
                "position"
            )
        )
        counts = dict.fromkeys(_COUNTERS.values(), 0)
        audits: list[OperatorAction] = []
        for item in items:
            try:
                with transaction.atomic():
                    outcome, reason = BatchOutcome.DONE, OPERATIONS[batch.operation](batch, item)
            except (VNextError, PipelineFault, PipelineSuperseded) as refused:
                outcome, reason = BatchOutcome.REFUSED, _why(refused)
            except (
                Exception
            ) as failed:  # an unexpected error is the item's outcome, not the batch's
                outcome, reason = BatchOutcome.FAILED, f"{type(failed).__name__}: {failed}"
            item.outcome, item.reason, item.handled_at = outcome, reason[:2000], timezone.now()
            counts[_COUNTERS[outcome]] += 1
            if outcome != BatchOutcome.DONE or batch.operation in AUDITED_HERE:
                audits.append(_audit_row(batch, item))
        BatchItem.objects.bulk_update(items, ["outcome", "reason", "handled_at"])
        OperatorAction.objects.bulk_create(audits)
        Batch.objects.filter(pk=batch_id).update(
            **{name: F(name) + count for name, count in counts.items() if count}
        )
    return True


def _why(refused: VNextError | PipelineFault | PipelineSuperseded) -> str:
    if isinstance(refused, VNextError):
        return f"{refused.code}: {refused.detail}"
    return f"{refused.code}: {refused.message}" if hasattr(refused, "message") else str(refused)


# Suspend, resume and migrate record their own audit row (with the channel the batch gives
# them); a retry and a cancel accepted here are recorded with the batch's other rows.
AUDITED_HERE = frozenset({BatchOperation.RETRY, BatchOperation.CANCEL})


def _audit_row(batch: Batch, item: BatchItem) -> OperatorAction:
    actions: dict[str, str] = {
        BatchOperation.RETRY: OperatorAction.Action.RETRY,
        BatchOperation.CANCEL: OperatorAction.Action.CANCEL,
        BatchOperation.SUSPEND: OperatorAction.Action.SUSPEND,
        BatchOperation.RESUME: OperatorAction.Action.RESUME,
        BatchOperation.MIGRATE: OperatorAction.Action.MIGRATE,
    }
    exists = (
        item.outcome == BatchOutcome.DONE or Instance.objects.filter(pk=item.instance_id).exists()
    )
    return OperatorAction(
        actor=batch.created_by,
        channel=Channel.BATCH,
        action=actions[batch.operation],
        instance_id=item.instance_id if exists else None,
        target=f"batch {batch.pk}" + ("" if exists else f" (instance {item.instance_id})"),
        outcome=f"{item.outcome}: {item.reason}" if item.reason else str(item.outcome),
    )


def _actor(batch: Batch) -> Actor:
    return Actor(batch.created_by, Channel.BATCH)


def _retry(batch: Batch, item: BatchItem) -> str:
    # Accepted here (Faulted -> Busy and its job, in this transaction); the job re-runs it.
    correction = batch.arguments.get("attributes") or {}
    instance_retry(
        domain=batch.domain,
        workflow=batch.workflow_key,
        ref=str(item.instance_id),
        body={"attributes": correction},
        info=RequestInfo(actor=batch.created_by),
        sync=False,
    )
    return "retry accepted; a job re-runs it"


def _cancel(batch: Batch, item: BatchItem) -> str:
    reason = str(batch.arguments.get("reason") or "")
    instance = instance_snapshot(
        domain=batch.domain, workflow=batch.workflow_key, ref=str(item.instance_id)
    )
    definition = workflow_definition(
        instance.domain, instance.workflow_key, instance.workflow_version
    )
    if definition.cancel is None:
        raise VNextError(
            Codes.TRANSITION_NOT_FOUND,
            f"workflow {definition.key}@{definition.version} defines no cancel transition",
        )
    instance_transition_accept(
        domain=batch.domain,
        workflow=batch.workflow_key,
        ref=str(item.instance_id),
        transition_key=definition.cancel.key,
        body={"reason": reason} if reason else {},
        info=RequestInfo(actor=batch.created_by),
        addressed=instance,
    )
    return "cancel accepted; a job runs it"


def _suspend(batch: Batch, item: BatchItem) -> str:
    instance_suspend(
        domain=batch.domain,
        workflow=batch.workflow_key,
        ref=str(item.instance_id),
        actor=_actor(batch),
        reason=str(batch.arguments.get("reason") or ""),
    )
    return "suspended"


def _resume(batch: Batch, item: BatchItem) -> str:
    instance_resume(
        domain=batch.domain,
        workflow=batch.workflow_key,
        ref=str(item.instance_id),
        actor=_actor(batch),
        reason=str(batch.arguments.get("reason") or ""),
    )
    return "resumed"


def _migrate(batch: Batch, item: BatchItem) -> str:
    plan = instance_migrate(
        domain=batch.domain,
        workflow=batch.workflow_key,
        ref=str(item.instance_id),
        target_version=str(batch.arguments["targetVersion"]),
        state_mapping=dict(batch.arguments.get("stateMapping") or {}),
        actor=_actor(batch),
    )
    return f"{plan.instance.workflow_version} -> {plan.target_version}, state {plan.to_state}"


OPERATIONS: dict[str, Callable[[Batch, BatchItem], str]] = {
    BatchOperation.RETRY: _retry,
    BatchOperation.CANCEL: _cancel,
    BatchOperation.SUSPEND: _suspend,
    BatchOperation.RESUME: _resume,
    BatchOperation.MIGRATE: _migrate,
}


def _handle_batch_job(job: Job) -> None:
    """The batch job: one chunk per run; while items are left it runs again at once (the wait
    spends no attempt), so other jobs get their turn between chunks."""
    if batch_work(uuid.UUID(str(job.payload["batch"]))):
        raise RetryLater("more items left", delay=0.0, free=True)


def batch_job_register() -> None:
    """Give the job runner the batch job's handler (called when the app is ready)."""
    HANDLERS[JobKind.BATCH] = _handle_batch_job
