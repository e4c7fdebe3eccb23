"""Instances counted by workflow and status without counting them: the database keeps the
figures with every write (migration 0013's triggers append signed deltas), so a read costs a
few small rows whatever the size of the instances table.

A figure is its `InstanceCount` row plus the deltas not folded yet, read in one statement (one
snapshot: a fold moving deltas into the totals commits both at once, so a read sees either
side, never neither or both). `instance_counts_fold` runs with the periodic sweeps.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from django.db import connection, transaction
from django.db.models import Q, QuerySet, Sum

from instances.models import Instance, InstanceCount, InstanceCountDelta
from instances.status import InstanceStatus

FOLD_BATCH = 10_000
# Above this many cancelled instances (by the planner's estimate) the figure is the estimate;
# below, they are counted, at most this many + 1 read.
CANCELLED_EXACT_BOUND = 10_000

_FOLD_TAKE = (
    "DELETE FROM instances_instancecountdelta WHERE id IN "
    "(SELECT id FROM instances_instancecountdelta ORDER BY id LIMIT %s) "
    "RETURNING domain, workflow_key, status, delta"
)
# `count` of the row already there plus the batch's: both PostgreSQL and SQLite spell it so.
_FOLD_ADD = (
    "INSERT INTO instances_instancecount (domain, workflow_key, status, count) "
    "VALUES (%s, %s, %s, %s) ON CONFLICT (domain, workflow_key, status) "
    "DO UPDATE SET count = instances_instancecount.count + excluded.count"
)


def instance_counts(*, domain: str | None = None, workflow: str | None = None) -> dict[str, int]:
    """Instances by status letter (every workflow, a domain's, or one workflow's), exact and
    current, from the counters: one statement over a handful of rows."""
    scope = Q()
    if domain is not None:
        scope &= Q(domain=domain)
    if workflow is not None:
        scope &= Q(workflow_key=workflow)
    totals = InstanceCount.objects.filter(scope).values("status").annotate(n=Sum("count"))
    pending = InstanceCountDelta.objects.filter(scope).values("status").annotate(n=Sum("delta"))
    found: dict[str, int] = defaultdict(int)
    for row in totals.union(pending, all=True):
        found[row["status"]] += int(row["n"] or 0)
    return {status: n for status, n in found.items() if n}


def workflow_counts() -> dict[tuple[str, str], int]:
    """Instances per `(domain, workflow)`, from the counters (the admin's workflow filter)."""
    totals = InstanceCount.objects.values("domain", "workflow_key").annotate(n=Sum("count"))
    pending = InstanceCountDelta.objects.values("domain", "workflow_key").annotate(n=Sum("delta"))
    found: dict[tuple[str, str], int] = defaultdict(int)
    for row in totals.union(pending, all=True):
        found[(row["domain"], row["workflow_key"])] += int(row["n"] or 0)
    return dict(found)


def instance_counts_fold(*, batch: int = FOLD_BATCH) -> int:
    """Add the pending deltas into the totals, `batch` at a time (each batch one short
    transaction); the number of deltas folded. Safe beside writers and another fold: a batch
    takes its deltas with `DELETE ... RETURNING`, so a delta is added exactly once (a second
    fold waiting on the same rows finds them gone), and the totals rows are written in one
    order, so two folds never deadlock."""
    folded = 0
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(_FOLD_TAKE, [batch])
            taken = cursor.fetchall()
            sums: dict[tuple[str, str, str], int] = defaultdict(int)
            for domain, workflow, status, delta in taken:
                sums[(domain, workflow, status)] += delta
            rows = [(*key, n) for key, n in sorted(sums.items()) if n]
            if rows:
                cursor.executemany(_FOLD_ADD, rows)
        folded += len(taken)
        if len(taken) < batch:
            return folded


def cancelled_count(*, bound: int = CANCELLED_EXACT_BOUND) -> tuple[int, bool]:
    """Instances the workflow's cancel ended (status Completed, state subtype `cancelled`),
    and whether the figure is the planner's estimate. The counters do not tell them from the
    completed ones: the partial index `instance_cancelled` (cancelled rows only) answers,
    reading at most `bound` + 1 of its entries, else the estimate."""
    cancelled = Instance.objects.filter(
        status=InstanceStatus.COMPLETED, effective_state_subtype="cancelled"
    )
    estimate = estimated_rows(cancelled)
    if estimate is not None and estimate > bound:
        return estimate, True
    return cancelled.order_by()[: bound + 1].count(), False


def estimated_rows(queryset: QuerySet[Any]) -> int | None:
    """The planner's estimate of the rows `queryset` selects (PostgreSQL's `EXPLAIN`, which
    reads no row), or None where the database gives none."""
    if connection.vendor != "postgresql":
        return None
    plan = json.loads(queryset.order_by().explain(format="json"))
    return int(plan[0]["Plan"]["Plan Rows"])
