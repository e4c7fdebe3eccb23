"""Operators repair running instances: suspend and resume them, and migrate them to another
published version of their workflow. Every action is one transaction — the instance row, its
jobs, a history row and the audit row — so it happens whole or not at all, whichever channel
(API, admin, command, batch) asked for it.

A suspended instance (status `P`) refuses transitions and retries (409 `Instance:100029`);
its timers, workflow timeout and pending automatic re-evaluations are held (job status `held`,
due times kept) and run when it resumes — at once for those whose time passed meanwhile.
Cancel still runs on it.

A migration keeps the instance's data (and its data version) and moves it to the target
version's counterpart of its state (the same key, or `stateMapping`'s); it is refused, with
its own code, when that is unsafe. Its armed timers follow the target: a timer whose
transition the target state still schedules keeps its due time, one whose transition is gone
is cancelled, and one the target adds is armed by its timer script.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from instances.changes import instance_changed
from instances.engine.definition import TransitionDef, WorkflowDefinition
from instances.engine.errors import Codes, VNextError, refused_at
from instances.engine.records import SUBFLOW_OWNER_PREFIX, InstanceSnapshot, JobRow, new_etag
from instances.engine.script_runner import script_context
from instances.engine.timers import timer_arm, timer_due
from instances.job_payloads import TimerJob
from instances.models import Correlation, Instance, OperatorAction
from instances.operations import operator_action_record
from instances.orm_store import OrmStore
from instances.queue import (
    job_timer_retarget,
    jobs_armed_timers,
    jobs_cancel,
    jobs_create,
    jobs_hold,
    jobs_release,
)
from instances.services import instance_snapshot, workflow_definition
from instances.status import (
    Channel,
    CorrelationStatus,
    InstanceStatus,
    JobKind,
)
from instances.wiring import engine

_store = OrmStore()

# The history rows of operators' actions, named as the store names them (`operator:...`).
SUSPEND_KEY, RESUME_KEY, MIGRATE_KEY = "operator:suspend", "operator:resume", "operator:migrate"


@dataclass(frozen=True)
class Actor:
    """Who asks, and through which channel (recorded in the audit)."""

    name: str
    channel: str = Channel.API


# --- suspend / resume ----------------------------------------------------------------------------


def instance_suspend(
    *, domain: str, workflow: str, ref: str, actor: Actor, reason: str = ""
) -> InstanceSnapshot:
    """Suspend an Active instance: status `P`, its timers and automatic re-evaluations held.
    409 `Instance:NotSuspendable` (with its status) for any other status."""
    instance = instance_snapshot(domain=domain, workflow=workflow, ref=ref)
    with transaction.atomic():
        moved = _move_status(instance, InstanceStatus.ACTIVE, InstanceStatus.PASSIVE)
        if not moved:
            raise _not_suspendable(instance.id)
        held = jobs_hold(instance_id=instance.id)
        _history(instance, SUSPEND_KEY, actor, {"reason": reason} if reason else {})
        operator_action_record(
            actor=actor.name,
            channel=actor.channel,
            action=OperatorAction.Action.SUSPEND,
            instance_id=instance.id,
            target=f"{instance.workflow_key} {instance.id}",
            outcome=f"suspended in {instance.current_state}; {held} job(s) held"
            + (f"; reason: {reason}" if reason else ""),
        )
    instance_changed(instance.id)
    return _reloaded(instance.id)


def instance_resume(
    *, domain: str, workflow: str, ref: str, actor: Actor, reason: str = ""
) -> InstanceSnapshot:
    """Resume a suspended instance: Active again, its held jobs pending at their own due times
    (past due: now). 409 `Instance:NotSuspended` when it is not suspended."""
    instance = instance_snapshot(domain=domain, workflow=workflow, ref=ref)
    with transaction.atomic():
        if not _move_status(instance, InstanceStatus.PASSIVE, InstanceStatus.ACTIVE):
            raise VNextError(
                Codes.INSTANCE_NOT_SUSPENDED,
                f"instance is not suspended (status {_status_now(instance.id)})",
                instance_id=str(instance.id),
            )
        released = jobs_release(instance_id=instance.id)
        _history(instance, RESUME_KEY, actor, {"reason": reason} if reason else {})
        operator_action_record(
            actor=actor.name,
            channel=actor.channel,
            action=OperatorAction.Action.RESUME,
            instance_id=instance.id,
            target=f"{instance.workflow_key} {instance.id}",
            outcome=f"resumed in {instance.current_state}; {released} job(s) released"
            + (f"; reason: {reason}" if reason else ""),
        )
    instance_changed(instance.id)
    return _reloaded(instance.id)


def _not_suspendable(instance_id: uuid.UUID) -> VNextError:
    status = _status_now(instance_id)
    reasons: dict[str, str] = {
        InstanceStatus.PASSIVE.value: "it is suspended already",
        InstanceStatus.BUSY.value: "a transition is running; try again when it ends",
        InstanceStatus.FAULTED.value: "it is faulted; retry or cancel it",
        InstanceStatus.COMPLETED.value: "it is completed",
    }
    why = reasons.get(status, f"status {status}")
    return VNextError(
        Codes.INSTANCE_NOT_SUSPENDABLE,
        f"only an Active instance is suspended: {why}",
        instance_id=str(instance_id),
        extra={"status": status},
    )


def _move_status(instance: InstanceSnapshot, expected: str, new: str) -> bool:
    """Compare-and-set of the status. The state version moves on: a hop that read the instance
    before cannot write after it (its guard names the old version); `modified_by` is kept,
    since `$PreviousUser` is whoever made the latest business transition."""
    return bool(
        Instance.objects.filter(pk=instance.id, status=expected).update(
            status=new,
            state_version=F("state_version") + 1,
            etag=new_etag(),
            updated_at=timezone.now(),
        )
    )


def _status_now(instance_id: uuid.UUID) -> str:
    return _store.status_of(instance_id) or ""


def _history(
    instance: InstanceSnapshot,
    key: str,
    actor: Actor,
    body: dict[str, Any],
    *,
    to_state: str | None = None,
) -> None:
    _store.operator_history(
        instance,
        action=key,
        body=body,
        actor=actor.name,
        to_state=to_state,
        stage=f"operator via {actor.channel}",
    )


def _reloaded(instance_id: uuid.UUID) -> InstanceSnapshot:
    found = _store.load(instance_id)
    assert found is not None  # the caller's update just matched it
    return found


# --- migrate -------------------------------------------------------------------------------------


@dataclass
class TimerPlan:
    """What a migration does to one timer: `kept` (due time unchanged), `cancelled` (its
    transition is gone) or `armed` (the target adds it; due when its script says)."""

    transition: str
    action: str
    due_at: datetime | None = None
    kind: str = JobKind.TIMER
    job_id: int | None = None
    # The armed or kept job's payload: a cron timer's schedule and occurrence go with it.
    payload: TimerJob | None = None

    def as_json(self) -> dict[str, Any]:
        """The dry-run report's form."""
        return {
            "transition": self.transition,
            "kind": self.kind,
            "action": self.action,
            "dueAt": self.due_at.isoformat() if self.due_at else None,
        }


@dataclass
class MigrationPlan:
    """Where a migration takes one instance, or why it is refused (`refusal`)."""

    instance: InstanceSnapshot
    target_version: str
    to_state: str = ""
    timers: list[TimerPlan] = field(default_factory=list)
    refusal: VNextError | None = None
    target: WorkflowDefinition | None = None

    def as_json(self) -> dict[str, Any]:
        """The report an API dry-run (or a migration) answers with."""
        report: dict[str, Any] = {
            "instanceId": str(self.instance.id),
            "fromVersion": self.instance.workflow_version,
            "toVersion": self.target_version,
            "fromState": self.instance.current_state,
            "toState": self.to_state or None,
            "timers": [timer.as_json() for timer in self.timers],
            "refused": None,
        }
        if self.refusal is not None:
            report["refused"] = {"code": self.refusal.code, "detail": self.refusal.detail}
        return report


def migration_plan(
    *,
    instance: InstanceSnapshot,
    target_version: str,
    state_mapping: dict[str, str] | None = None,
) -> MigrationPlan:
    """What migrating `instance` to `target_version` would do (read-only), or why not."""
    plan = MigrationPlan(instance, target_version)
    try:
        _plan(plan, state_mapping or {})
    except VNextError as refused:
        plan.refusal = refused
    return plan


def _plan(plan: MigrationPlan, mapping: dict[str, str]) -> None:
    instance = plan.instance
    if not isinstance(mapping, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
    ):
        raise VNextError(
            Codes.APP_INVALID_REQUEST, "stateMapping maps state keys to state keys (strings)"
        )
    source = workflow_definition(instance.domain, instance.workflow_key, instance.workflow_version)
    target = engine().components.workflow(
        instance.domain, instance.workflow_key, plan.target_version
    )
    if target is None:
        raise VNextError(
            Codes.MIGRATION_TARGET_NOT_FOUND,
            f"{instance.domain}/{instance.workflow_key}@{plan.target_version} is not published",
        )
    plan.target = target
    if target.version == instance.workflow_version:
        raise VNextError(
            Codes.MIGRATION_SAME_VERSION, f"the instance already runs {target.version}"
        )
    unknown = sorted(
        f"{old} -> {new}"
        for old, new in mapping.items()
        if old not in source.states or new not in target.states
    )
    if unknown:
        raise refused_at(
            Codes.MIGRATION_BAD_MAPPING,
            "/stateMapping",
            "stateMapping names states that do not exist (old state of "
            f"{source.version} -> new state of {target.version}): {', '.join(unknown)}",
        )
    _check_status(instance)
    state = mapping.get(instance.current_state, instance.current_state)
    if state not in target.states:
        raise VNextError(
            Codes.MIGRATION_STATE_UNMAPPED,
            f"state {instance.current_state!r} has no counterpart in {target.version}: "
            "map it with stateMapping",
            extra={"state": instance.current_state},
        )
    plan.to_state = state
    if target.state(state).is_final and not source.state(instance.current_state).is_final:
        raise VNextError(
            Codes.MIGRATION_STATE_UNMAPPED,
            f"state {state!r} is final in {target.version}: a running instance is not "
            "completed by a migration",
            extra={"state": instance.current_state},
        )
    if instance.status == InstanceStatus.FAULTED:
        _check_fault(instance, target)
    _check_subflow(instance, source, target, state)
    plan.timers = _timer_plan(instance, target, state)


def _check_status(instance: InstanceSnapshot) -> None:
    if instance.status == InstanceStatus.COMPLETED:
        raise VNextError(
            Codes.MIGRATION_NOT_MIGRATABLE,
            "the instance is completed",
            instance_id=str(instance.id),
            extra={"status": instance.status},
        )
    waits_for_child = instance.busy_owner.startswith(SUBFLOW_OWNER_PREFIX)
    if instance.status == InstanceStatus.BUSY and not waits_for_child:
        raise VNextError(
            Codes.MIGRATION_NOT_MIGRATABLE,
            "the instance is busy with a transition; try again when it ends",
            instance_id=str(instance.id),
            extra={"status": instance.status},
        )


def _check_fault(instance: InstanceSnapshot, target: WorkflowDefinition) -> None:
    """A Faulted instance is migrated to be retried on the target: the transition a retry
    re-runs must still be there."""
    fault = _store.fault_to_retry(instance)
    if fault is None:
        return
    key, from_state = fault.transition_key, fault.from_state
    found = target.transition_for(from_state, key) if from_state else None
    found = found or target.find_any(key) or (target.start if target.start.key == key else None)
    if found is None:
        raise VNextError(
            Codes.MIGRATION_STATE_UNMAPPED,
            f"the faulted transition {key!r} is not in {target.version}: a retry could not "
            "re-run it",
            instance_id=str(instance.id),
        )


def _check_subflow(
    instance: InstanceSnapshot,
    source: WorkflowDefinition,
    target: WorkflowDefinition,
    state: str,
) -> None:
    """An open SubFlow/SubProcess correlation from the instance's state must find the same
    child workflow (domain and key) started from the state it lands in."""
    open_from = set(
        Correlation.objects.filter(
            parent_id=instance.id, status=CorrelationStatus.ACTIVE
        ).values_list("parent_state", flat=True)
    )
    for parent_state in open_from:
        old = source.states.get(parent_state)
        new_key = state if parent_state == instance.current_state else parent_state
        new = target.states.get(new_key)
        before = _child_of(old.subflow if old else None)
        after = _child_of(new.subflow if new else None)
        if before != after:
            raise VNextError(
                Codes.MIGRATION_SUBFLOW_INCOMPATIBLE,
                f"state {parent_state!r} has an open subflow of {before}; in {target.version} "
                f"state {new_key!r} starts {after or 'no subflow'}",
                instance_id=str(instance.id),
            )


def _child_of(subflow: dict[str, Any] | None) -> str | None:
    if not subflow:
        return None
    process = subflow.get("process")
    if not isinstance(process, dict):
        return None
    return f"{process.get('domain', '')}/{process.get('key', '')}"


def _timer_plan(
    instance: InstanceSnapshot, target: WorkflowDefinition, state: str
) -> list[TimerPlan]:
    scheduled = {t.key: t for t in target.scheduled_transitions(state)}
    timeout = target.timeout_for(instance.extra)
    plans: list[TimerPlan] = []
    kept: set[str] = set()
    has_timeout = False
    for job in jobs_armed_timers(instance_id=instance.id):
        armed = TimerJob.from_json(job.payload)
        transition = armed.transition
        if job.kind == JobKind.TIMEOUT:
            has_timeout = True
            action = "kept" if timeout is not None else "cancelled"
            plans.append(TimerPlan(transition, action, job.run_at, JobKind.TIMEOUT, job.pk))
            continue
        if job.state != instance.current_state:
            continue  # a timer of a state it left: void already, it will be skipped
        if transition in scheduled and transition not in kept:
            kept.add(transition)
            plans.append(
                TimerPlan(transition, "kept", job.run_at, JobKind.TIMER, job.pk, payload=armed)
            )
        else:
            plans.append(TimerPlan(transition, "cancelled", job.run_at, JobKind.TIMER, job.pk))
    if instance.status != InstanceStatus.FAULTED:
        # A faulted instance arms its state's timers when a retry enters the state.
        for key in scheduled:
            if key not in kept:
                plans.append(TimerPlan(key, "armed"))
    if timeout is not None and not has_timeout and _static_timeout(timeout):
        plans.append(TimerPlan(timeout.key, "armed", kind=JobKind.TIMEOUT))
    return plans


def _static_timeout(timeout: TransitionDef) -> str:
    timer = timeout.raw.get("timer")
    return str(timer.get("duration") or "") if isinstance(timer, dict) else ""


def instance_migrate(
    *,
    domain: str,
    workflow: str,
    ref: str,
    target_version: str,
    state_mapping: dict[str, str] | None = None,
    actor: Actor,
    dry_run: bool = False,
) -> MigrationPlan:
    """Migrate a running instance to `target_version` (or, `dry_run`, say what that would do).
    The plan's refusal is raised (its code: 404/400/409); a dry run returns it instead."""
    instance = instance_snapshot(domain=domain, workflow=workflow, ref=ref)
    plan = migration_plan(
        instance=instance, target_version=target_version, state_mapping=state_mapping
    )
    if dry_run:
        return plan
    if plan.refusal is not None:
        raise plan.refusal
    assert plan.target is not None
    armed = _armed_due_times(plan)
    with transaction.atomic():
        moved = Instance.objects.filter(
            pk=instance.id,
            status=instance.status,
            state_version=instance.state_version,
            workflow_version=instance.workflow_version,
        ).update(
            workflow_version=plan.target.version,
            current_state=plan.to_state,
            effective_state=(
                plan.to_state
                if instance.effective_state in ("", instance.current_state)
                else instance.effective_state
            ),
            state_version=F("state_version") + 1,
            etag=new_etag(),
            updated_at=timezone.now(),
        )
        if not moved:
            raise VNextError(
                Codes.MIGRATION_NOT_MIGRATABLE,
                "the instance changed while it was being migrated; try again",
                instance_id=str(instance.id),
            )
        _apply_timers(instance, plan, armed)
        _history(
            instance,
            MIGRATE_KEY,
            actor,
            {
                "fromVersion": instance.workflow_version,
                "toVersion": plan.target.version,
                "stateMapping": state_mapping or {},
            },
            to_state=plan.to_state,
        )
        operator_action_record(
            actor=actor.name,
            channel=actor.channel,
            action=OperatorAction.Action.MIGRATE,
            instance_id=instance.id,
            target=f"{instance.workflow_key} {instance.id}",
            outcome=f"{instance.workflow_version} -> {plan.target.version}, state "
            f"{instance.current_state} -> {plan.to_state}; timers: "
            + (", ".join(f"{t.transition} {t.action}" for t in plan.timers) or "none"),
        )
    instance_changed(instance.id)
    return plan


def _armed_due_times(plan: MigrationPlan) -> dict[str, datetime]:
    """Due times of the timers the target adds: their timer scripts run now, before the
    migration's transaction (a script that fails refuses the migration)."""
    assert plan.target is not None
    target, due = plan.target, {}
    now = timezone.now()
    for timer in plan.timers:
        if timer.action != "armed":
            continue
        if timer.kind == JobKind.TIMEOUT:
            timeout = target.timeout_for(plan.instance.extra)
            assert timeout is not None
            due[timer.transition] = timer_due(_static_timeout(timeout), now)
            timer.due_at = due[timer.transition]
            continue
        transition = target.transition_for(plan.to_state, timer.transition)
        script = transition.raw.get("timer") if transition is not None else None
        if not isinstance(script, dict):
            continue
        context = script_context(
            plan.instance,
            transition_key=timer.transition,
            configuration=engine().config.script_configuration,
        )
        try:
            value = engine().scripts.call(script, target, "handler", context)
            arm = timer_arm(value, now)
            due[timer.transition] = arm.due
            timer.payload = TimerJob.from_json(arm.payload(timer.transition, state=plan.to_state))
        except Exception as exc:  # a script of the target: its failure is the refusal
            raise VNextError(
                Codes.MIGRATION_TIMER_UNARMABLE,
                f"the timer of {timer.transition!r} in {target.version} failed: {exc}",
                instance_id=str(plan.instance.id),
            ) from exc
        timer.due_at = due[timer.transition]
    return due


def _apply_timers(
    instance: InstanceSnapshot, plan: MigrationPlan, armed: dict[str, datetime]
) -> None:
    cancelled = [t.job_id for t in plan.timers if t.action == "cancelled" and t.job_id]
    if cancelled:
        jobs_cancel(job_ids=cancelled)
    for timer in plan.timers:
        if timer.action != "kept" or timer.job_id is None:
            continue
        if timer.kind == JobKind.TIMER:
            kept = timer.payload or TimerJob(timer.transition)
            payload = replace(kept, state=plan.to_state).to_json()
            job_timer_retarget(job_id=timer.job_id, state=plan.to_state, payload=payload)
    rows = []
    for timer in plan.timers:
        if timer.action != "armed" or timer.transition not in armed:
            continue
        if timer.kind == JobKind.TIMEOUT:
            rows.append(
                JobRow(
                    kind=JobKind.TIMEOUT,
                    run_at=armed[timer.transition],
                    payload=TimerJob(timer.transition).to_json(),
                )
            )
        else:
            rows.append(
                JobRow(
                    kind=JobKind.TIMER,
                    run_at=armed[timer.transition],
                    state=plan.to_state,
                    payload=(
                        timer.payload or TimerJob(timer.transition, state=plan.to_state)
                    ).to_json(),
                )
            )
    if rows:
        jobs_create(instance_id=instance.id, jobs=rows)
        if instance.status == InstanceStatus.PASSIVE:
            jobs_hold(instance_id=instance.id)
