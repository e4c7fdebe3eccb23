"""Operators' actions on instances, each audited: retry, cancel, resolve incidents, force-release a
resource lock, and the retry plan a confirmation page shows. The admin actions and the operators'
commands call these; they run instances through the instance services."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from instances.engine.errors import Codes, VNextError
from instances.engine.outcomes import PipelineFault, PipelineSuperseded
from instances.models import Incident, Instance, OperatorAction
from instances.orm_store import FaultToRetry, OrmStore, incidents_resolve
from instances.run_requests import faulted_transition
from instances.services import (
    RequestInfo,
    instance_retry,
    instance_transition,
    transition_payload_check,
    workflow_definition,
)
from instances.snapshots import snapshot_of
from instances.status import Channel, InstanceStatus
from locks.models import ResourceLock

# A force release is logged with the other lock maintenance.
_locks_log = logging.getLogger("vnext.locks")

_store = OrmStore()

RETRIED, FAULTED_AGAIN, REFUSED, SKIPPED = "retried", "faulted again", "refused", "skipped"
CANCELLED, RESOLVED = "cancelled", "resolved"
RESOLVED_BY_OPERATOR = "resolved by operator"


@dataclass(frozen=True)
class RetryPlan:
    """What a retry of `instance` would do: the transition and step it re-runs (None: nothing
    to re-run) and the open incident it resolves (None: no open one)."""

    instance: Instance
    fault: FaultToRetry | None
    incident: Incident | None

    @property
    def faulted(self) -> bool:
        """Only a Faulted instance is retried; the others are skipped."""
        return self.instance.status == InstanceStatus.FAULTED

    @property
    def reruns(self) -> str:
        """`transition (from state) from STEP`, for confirmation pages and --dry-run."""
        if self.fault is None:
            return "nothing to re-run"
        origin = f" from state {self.fault.from_state}" if self.fault.from_state else ""
        return f"{self.fault.transition_key}{origin} at step {self.fault.step or 'the start'}"


@dataclass(frozen=True)
class OperatorResult:
    """How one operator action on one instance ended: `retried`, `faulted again`, `refused`,
    `skipped`, `cancelled` or `resolved`; `detail` says the new status, the code or why."""

    instance_id: uuid.UUID
    outcome: str
    detail: str = ""

    @property
    def failed(self) -> bool:
        """Faulted again or refused (a skipped instance was never meant to run)."""
        return self.outcome in (FAULTED_AGAIN, REFUSED)

    def __str__(self) -> str:
        return f"{self.instance_id}: {self.outcome}" + (f" ({self.detail})" if self.detail else "")


def operator_action_record(
    *,
    actor: str,
    action: str,
    instance_id: uuid.UUID | None,
    target: str = "",
    outcome: str = "",
    channel: str = Channel.ADMIN,
) -> OperatorAction:
    """One audit row for an operator's action, with the channel it came through; an instance
    that does not exist (any more) is recorded by the target text only."""
    if instance_id is not None and not Instance.objects.filter(pk=instance_id).exists():
        target = f"{target} (instance {instance_id})".strip()
        instance_id = None
    return OperatorAction.objects.create(
        actor=actor,
        action=action,
        instance_id=instance_id,
        target=target[:200],
        outcome=outcome,
        channel=channel,
    )


def retry_plan(*, instance: Instance) -> RetryPlan:
    """What `operator_retry` would re-run for `instance` (read-only)."""
    fault = None
    if instance.status == InstanceStatus.FAULTED:
        fault = _store.fault_to_retry(snapshot_of(instance))
    incident = (
        Incident.objects.filter(instance_id=instance.id, resolved=False)
        .order_by("-created_at")
        .first()
    )
    return RetryPlan(instance, fault, incident)


def retry_correction_check(*, instance: Instance, correction: dict[str, Any]) -> None:
    """Check an operator's correction against the schema of the transition a retry of the
    Faulted `instance` re-runs, as the API checks that transition's body (400 `App:900002`,
    pointers relative to the data). An empty correction changes nothing and is not checked;
    neither is a transition without a schema."""
    if not correction or instance.status != InstanceStatus.FAULTED:
        return
    fault = _store.fault_to_retry(snapshot_of(instance))
    definition = workflow_definition(
        instance.domain, instance.workflow_key, instance.workflow_version
    )
    transition = faulted_transition(definition, fault) if fault is not None else None
    if transition is None:
        return
    # Raw mode: the correction is the data itself, so a pointer reads `/divisor`.
    raw = RequestInfo(headers={"x-vnext-payload-mode": "raw"})
    transition_payload_check(
        definition=definition, transition=transition, body=correction, info=raw
    )


def operator_retry(
    *,
    instance: Instance,
    actor: str,
    correction: dict[str, Any] | None = None,
    channel: str = Channel.ADMIN,
) -> OperatorResult:
    """Retry one instance for an operator through `instance_retry` (with the corrected data
    merged first, when given), and audit it: retried (the new status), faulted again (the
    code), refused (why); an instance that is not faulted is skipped and not audited."""
    if instance.status != InstanceStatus.FAULTED:
        return OperatorResult(instance.id, SKIPPED, "not faulted")
    plan = retry_plan(instance=instance)
    try:
        outcome = instance_retry(
            domain=instance.domain,
            workflow=instance.workflow_key,
            ref=str(instance.id),
            body={"attributes": dict(correction or {})},
            info=RequestInfo(actor=actor),
        )
        detail = f"status {outcome.instance.status}"
        due = outcome.execution.awaiting_retry if outcome.execution else None
        if due is not None:
            # Its error boundary retries a task again later: a job runs it when due.
            detail += f", error-boundary retry due {due:%Y-%m-%d %H:%M:%S} UTC"
        result = OperatorResult(instance.id, RETRIED, detail)
    except (PipelineFault, PipelineSuperseded, VNextError) as failure:
        result = _failed(instance, failure)
    target = plan.reruns + (f"; corrected {', '.join(sorted(correction))}" if correction else "")
    return _audited(result, actor, OperatorAction.Action.RETRY, target, channel)


def operator_cancel(
    *, instance: Instance, actor: str, reason: str, channel: str = Channel.ADMIN
) -> OperatorResult:
    """Cancel one instance for an operator: its workflow's cancel transition with body
    `{"reason": reason}` (which closes its open incidents); refused when the workflow defines
    no cancel or the instance cannot take it. Audited with the reason."""
    try:
        definition = workflow_definition(
            instance.domain, instance.workflow_key, instance.workflow_version
        )
        if definition.cancel is None:
            raise VNextError(
                Codes.TRANSITION_NOT_FOUND,
                f"workflow {definition.key} defines no cancel transition",
                instance_id=str(instance.id),
            )
        outcome = instance_transition(
            domain=instance.domain,
            workflow=instance.workflow_key,
            ref=str(instance.id),
            transition_key=definition.cancel.key,
            body={"reason": reason},
            info=RequestInfo(actor=actor),
        )
        result = OperatorResult(
            instance.id,
            CANCELLED,
            f"status {outcome.instance.status}, state {outcome.instance.current_state}",
        )
    except (PipelineFault, PipelineSuperseded, VNextError) as failure:
        result = _failed(instance, failure)
    target = f"reason: {reason}" if reason else "no reason given"
    return _audited(result, actor, OperatorAction.Action.CANCEL, target, channel)


def _failed(
    instance: Instance, failure: PipelineFault | PipelineSuperseded | VNextError
) -> OperatorResult:
    # A run that faulted the instance again, one another run took over, or a request refused
    # before anything ran.
    if isinstance(failure, PipelineFault):
        return OperatorResult(instance.id, FAULTED_AGAIN, failure.code)
    if isinstance(failure, PipelineSuperseded):
        return OperatorResult(instance.id, REFUSED, f"{failure.code}: {failure.message}")
    return OperatorResult(instance.id, REFUSED, f"{failure.code}: {failure.detail}")


def _audited(
    result: OperatorResult, actor: str, action: str, target: str, channel: str
) -> OperatorResult:
    operator_action_record(
        channel=channel,
        actor=actor,
        action=action,
        instance_id=result.instance_id,
        target=target,
        outcome=str(result.outcome) + (f" ({result.detail})" if result.detail else ""),
    )
    return result


def incident_resolve(
    *, instance: Instance, actor: str, channel: str = Channel.ADMIN
) -> OperatorResult:
    """An operator repaired the cause outside and closes the instance's open incidents without a
    retry: resolution `resolved by operator`, who and when. The instance status does not change
    (a Faulted one stays Faulted until retried or cancelled). Skipped when nothing is open;
    audited otherwise."""
    count, codes = incidents_resolve(
        instance_id=instance.id, resolved_by=actor, resolution=RESOLVED_BY_OPERATOR
    )
    if not count:
        return OperatorResult(instance.id, SKIPPED, "no open incident")
    result = OperatorResult(instance.id, RESOLVED, f"{count} incident(s); status unchanged")
    operator_action_record(
        actor=actor,
        action=OperatorAction.Action.RESOLVE,
        channel=channel,
        instance_id=instance.id,
        target=", ".join(codes),
        outcome=f"{result.outcome} ({result.detail})",
    )
    return result


def lock_force_release(*, lock: ResourceLock, operator: str, channel: str = Channel.ADMIN) -> None:
    """An operator releases `lock`; the owner's history records who did it and when, the key
    leaves the owner's `resource.locks`, and the audit trail records the release."""
    with transaction.atomic():
        deleted = ResourceLock.objects.filter(pk=lock.pk, owner=lock.owner).delete()[0]
        if deleted:

            def without_key(extra: dict[str, Any]) -> dict[str, Any]:
                held = [key for key in extra.get("resource.locks", []) if key != lock.key]
                return {**extra, "resource.locks": held}

            _store.record_operator_action(
                lock.owner,
                action="operator:force-release-lock",
                body={"lockKey": lock.key},
                actor=operator,
                change_extra=without_key,
            )
    _locks_log.info("operator %s force-released lock %s of %s", operator, lock.key, lock.owner)
    operator_action_record(
        actor=operator,
        action=OperatorAction.Action.FORCE_RELEASE,
        channel=channel,
        instance_id=lock.owner,
        target=f"lock {lock.key}",
        outcome="released",
    )
