"""The instances API's answers on plain request data (`RequestInfo`, never a DRF request): the
JSON shapes of an instance, and the run-and-answer use case of a start, transition, retry,
long-poll acknowledgement or subflow relay — run it, settle its relays and retries, shape a
fault, apply the workflow's output mapping. The views parse, call one of these, and render."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from instances.engine.errors import Codes, VNextError, refused_at
from instances.engine.functions import ReadKind
from instances.engine.outcomes import PipelineFault, PipelineSuperseded
from instances.engine.records import InstanceSnapshot
from instances.engine.roles import Caller
from instances.engine.script_runner import script_context
from instances.engine.scripts import ScriptError, ScriptResponse
from instances.engine.visibility import readable
from instances.extensions import instance_extensions, listed_extensions
from instances.job_handlers import relays_run
from instances.models import Correlation, Instance, InstanceTransition, OperatorAction
from instances.operations import operator_action_record
from instances.repair import Actor, instance_migrate, instance_resume, instance_suspend
from instances.selectors import (
    incident_active_get,
    incident_active_list,
    incident_block,
    instance_get,
    listed_attributes,
    master_schema,
    shown_attributes,
    transition_newest_id_get,
)
from instances.services import (
    InstanceOutcome,
    RequestInfo,
    instance_long_poll_ack,
    instance_relay,
    instance_retry,
    instance_snapshot,
    instance_start,
    instance_transition_accept,
    start_runs_sync,
    transition_runs_sync,
    workflow_definition,
)
from instances.snapshots import snapshot_of
from instances.status import Channel, FlowType, InstanceStatus
from instances.sync_transitions import instance_settle, instance_transition_run
from instances.wiring import engine
from vnext.conf import vnext_setting

logger = logging.getLogger(__name__)


# --- the JSON shapes of an instance (API.md sections 1-3) ----------------------------------------


def _iso(value: Any) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def envelope(instance: InstanceSnapshot) -> dict[str, Any]:
    """The sync start/transition answer: `{id, key, status, attributes, eTag, entityEtag,
    extensions}`."""
    return {
        "id": str(instance.id),
        "key": instance.key,
        "status": str(instance.status),
        "attributes": instance.data,
        "eTag": instance.etag,
        "entityEtag": instance.entity_etag,
        "extensions": {},
    }


def metadata(instance: InstanceSnapshot, incident: dict[str, Any] | None) -> dict[str, Any]:
    """The `metadata` block of `GET instance`."""
    duration = None
    if instance.created_at:
        end = instance.completed_at or instance.updated_at or instance.created_at
        duration = (end - instance.created_at).total_seconds()
    return {
        "currentState": instance.current_state,
        "effectiveState": instance.effective_state,
        "status": str(instance.status),
        "effectiveStatus": str(instance.status),
        "effectiveStateType": instance.effective_state_type,
        "effectiveStateSubType": instance.effective_state_subtype,
        "createdAt": _iso(instance.created_at),
        "modifiedAt": _iso(instance.updated_at),
        "completedAt": _iso(instance.completed_at),
        "duration": duration,
        "createdBy": instance.created_by,
        "modifiedBy": instance.modified_by,
        "stage": instance.stage,
        "dataVersion": instance.data_version_text,
        "incident": incident_block(instance, incident),
    }


def instance_detail(
    instance: InstanceSnapshot, incident: dict[str, Any] | None = None
) -> dict[str, Any]:
    """`GET .../instances/{instance}`."""
    return {
        "id": str(instance.id),
        "key": instance.key,
        "flow": instance.workflow_key,
        "domain": instance.domain,
        "flowVersion": instance.workflow_version,
        "eTag": instance.etag,
        "entityEtag": instance.entity_etag,
        "tags": instance.tags,
        "metadata": metadata(instance, incident),
        "attributes": instance.data,
        "extensions": {},
    }


def listed_items(
    rows: Sequence[Instance],
    *,
    caller: Caller,
    requested: tuple[str, ...],
    headers: dict[str, str],
    query: dict[str, Any],
) -> list[dict[str, Any]]:
    """The `items` of a page of instances: each as `GET instance` shows it, with its newest open
    incident, the data `caller` may see and the extensions `requested` of a listing."""
    incidents = incident_active_list(instance_ids=[row.pk for row in rows])
    extensions = listed_extensions(rows, requested=requested, headers=headers, query=query)
    return [
        {
            **instance_detail(snapshot_of(row), incidents.get(row.pk)),
            "attributes": listed_attributes(row, caller),
            "extensions": extensions.get(row.pk, {}),
        }
        for row in rows
    ]


def history_row(row: InstanceTransition) -> dict[str, Any]:
    """One row of `GET .../transitions`."""
    return {
        "id": str(row.id),
        "transitionKey": row.transition_key,
        "fromState": row.from_state,
        "toState": row.to_state,
        "effectiveState": row.effective_state,
        "effectiveStateType": row.effective_state_type,
        "effectiveStateSubType": row.effective_state_subtype,
        "triggerType": row.trigger_type,
        "stage": row.stage,
        "status": row.status,
        "actor": row.actor,
        "startedAt": _iso(row.started_at),
        "finishedAt": _iso(row.finished_at),
        "errorCode": row.error_code or None,
        "errorMessage": row.error_message or None,
    }


# --- run and answer ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunAnswer:
    """What a start, transition, retry, acknowledgement or relay answers, before HTTP: the
    status, body and headers; `tagged`, the instance whose ETags a sync answer carries (None
    for a 202); `location`, for a 202, the path of the instance to poll."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    tagged: InstanceSnapshot | None = None
    location: str | None = None


# Faults the caller's request caused, answered with their own status (409 lock conflict, 400 data
# the database refused) although the instance faulted; any other fault is the workflow's own work
# failing, answered 200 with the instance in status `F`.
CALLER_FAULTS = frozenset({Codes.RESOURCE_LOCK_CONFLICT.code, Codes.DATA_REFUSED.code})


def instance_start_answer(
    *,
    domain: str,
    workflow: str,
    body: Callable[[], Any],
    info: RequestInfo,
    version: str | None,
    sync_requested: bool,
) -> RunAnswer:
    """Start (idempotent by business key): the envelope when the start runs sync (asked, or the
    definition's `executionType`), shaped by the output mapping; else 202 — or, for a start
    that finds its instance already there, the answer for that instance. `body` is read once
    the workflow is found (an unknown workflow is 404 before a body that does not parse)."""
    sync = start_runs_sync(domain, workflow, version, sync_requested)

    def run() -> InstanceOutcome:
        return instance_start(
            domain=domain, workflow=workflow, body=body(), info=info, version=version, sync=sync
        )

    if sync:
        return _run_answer(
            run, domain=domain, workflow=workflow, accepted=False, shown_to=info, shaped_by="start"
        )
    outcome = run()
    # An idempotent start answers with the instance that already exists.
    return _run_answer(
        lambda: outcome,
        domain=domain,
        workflow=workflow,
        accepted=outcome.created,
        shown_to=info,
    )


def instance_transition_answer(
    *,
    domain: str,
    workflow: str,
    ref: str,
    transition_key: str,
    body: Callable[[], Any],
    info: RequestInfo,
    sync_requested: bool,
) -> RunAnswer:
    """Admit and run a transition, sync or as a job: the transition's (else the workflow's)
    `executionType` overrides `sync_requested`. `body` is read once the instance is found (an
    unknown instance is 404 before a body that does not parse)."""
    sync, addressed = transition_runs_sync(
        domain=domain,
        workflow=workflow,
        ref=ref,
        transition_key=transition_key,
        requested=sync_requested,
    )
    run = instance_transition_run if sync else instance_transition_accept
    return _run_answer(
        lambda: run(
            domain=domain,
            workflow=workflow,
            ref=ref,
            transition_key=transition_key,
            body=body(),
            info=info,
            addressed=addressed,
        ),
        domain=domain,
        workflow=workflow,
        accepted=not sync,
        shown_to=info,
        shaped_by=transition_key,
    )


def instance_retry_answer(
    *, domain: str, workflow: str, ref: str, body: Any, info: RequestInfo, sync: bool
) -> RunAnswer:
    """Retry a faulted instance: with `sync`, the envelope and the re-run's history row id
    (`retriedTransitionId`); else 202 and a job runs it. Retries are never shaped. A retry
    that ran (or was accepted) is in the operators' audit, channel `api`."""
    answer = _run_answer(
        lambda: instance_retry(
            domain=domain, workflow=workflow, ref=ref, body=body, info=info, sync=sync
        ),
        domain=domain,
        workflow=workflow,
        accepted=not sync,
        retried=True,
        shown_to=info,
    )
    instance_id = answer.body.get("id") if isinstance(answer.body, dict) else None
    if instance_id:
        status = answer.body.get("status")
        corrected = body.get("attributes", body) if isinstance(body, dict) else {}
        operator_action_record(
            actor=info.actor,
            channel=Channel.API,
            action=OperatorAction.Action.RETRY,
            instance_id=uuid.UUID(str(instance_id)),
            target="retry" + (f"; corrected {', '.join(sorted(corrected))}" if corrected else ""),
            outcome=("accepted (202)" if answer.status == 202 else f"retried (status {status})"),
        )
    return answer


def instance_suspend_answer(
    *, domain: str, workflow: str, ref: str, reason: str, info: RequestInfo
) -> RunAnswer:
    """Suspend an Active instance (status `P`): 200 with its envelope."""
    instance = instance_suspend(
        domain=domain, workflow=workflow, ref=ref, actor=Actor(info.actor), reason=reason
    )
    return RunAnswer(200, _shown_envelope(instance, info), tagged=instance)


def instance_resume_answer(
    *, domain: str, workflow: str, ref: str, reason: str, info: RequestInfo
) -> RunAnswer:
    """Resume a suspended instance: 200 with its envelope (its held timers run when due)."""
    instance = instance_resume(
        domain=domain, workflow=workflow, ref=ref, actor=Actor(info.actor), reason=reason
    )
    return RunAnswer(200, _shown_envelope(instance, info), tagged=instance)


def instance_migrate_answer(
    *,
    domain: str,
    workflow: str,
    ref: str,
    target_version: Any,
    state_mapping: Any,
    dry_run: bool,
    info: RequestInfo,
) -> RunAnswer:
    """Migrate a running instance to another published version (or report what that would
    do): 200 with the report `{instanceId, fromVersion, toVersion, fromState, toState, timers,
    refused, dryRun}`; a refusal of a real migration is its own problem code."""
    if not isinstance(target_version, str) or not target_version:
        raise refused_at(
            Codes.APP_INVALID_REQUEST,
            "/targetVersion",
            "targetVersion (the published version to migrate to) is required",
        )
    if state_mapping is not None and (
        not isinstance(state_mapping, dict)
        or not all(isinstance(value, str) for value in state_mapping.values())
    ):
        raise refused_at(
            Codes.APP_INVALID_REQUEST,
            "/stateMapping",
            "stateMapping maps old state keys to new ones",
        )
    plan = instance_migrate(
        domain=domain,
        workflow=workflow,
        ref=ref,
        target_version=target_version,
        state_mapping=state_mapping,
        actor=Actor(info.actor),
        dry_run=dry_run,
    )
    return RunAnswer(200, {**plan.as_json(), "dryRun": dry_run})


def instance_long_poll_ack_answer(
    *, domain: str, workflow: str, ref: str, info: RequestInfo
) -> RunAnswer:
    """Acknowledge a long-poll stopped at a `terminate` state: the paused run goes on."""
    return _run_answer(
        lambda: instance_long_poll_ack(domain=domain, workflow=workflow, ref=ref, info=info),
        domain=domain,
        workflow=workflow,
        accepted=False,
        shown_to=info,
    )


def instance_relay_answer(
    *,
    domain: str,
    ref: str,
    transition_key: str,
    reservation: str,
    attributes: Any,
    info: RequestInfo,
) -> RunAnswer:
    """Run a chain-reserved transition relayed by a service (the subflow forward): the
    envelope as stored, without extensions (no end user reads it)."""
    return _run_answer(
        lambda: instance_relay(
            domain=domain,
            ref=ref,
            transition_key=transition_key,
            reservation=reservation,
            body={"attributes": attributes or {}},
            info=info,
        ),
        domain=domain,
        workflow="",
        accepted=False,
        shown_to=None,
    )


def _instance_path(instance: InstanceSnapshot) -> str:
    return f"/api/v1/{instance.domain}/workflows/{instance.workflow_key}/instances/{instance.id}"


def _current(domain: str, workflow: str, instance_id: Any) -> InstanceSnapshot:
    # The instance may be the active subflow a transition was forwarded to: by id first.
    return instance_get(instance_id=instance_id) or instance_snapshot(
        domain=domain, workflow=workflow, ref=str(instance_id)
    )


def _run_answer(
    run: Callable[[], InstanceOutcome],
    *,
    domain: str,
    workflow: str,
    accepted: bool,
    shown_to: RequestInfo | None,
    retried: bool = False,
    shaped_by: str | None = None,
) -> RunAnswer:
    """Run a start/transition/retry and answer: 202 `{id, status}` when accepted for a job;
    else 200 with the instance envelope, or what the workflow's output mapping makes of it
    (`shaped_by` names the start or transition for its context; retries are never shaped).
    A run that faults its instance answers 200 as well, status `F`, with an `error` block
    (code, detail, the open incident), as vNext does (but `CALLER_FAULTS`). A run an error
    boundary stopped for a retry answers once the retries settle (they run here when no
    worker has them) or `SYNC_RETRY_WAIT_SECONDS` pass, whichever is first."""
    try:
        outcome = run()
    except PipelineSuperseded as superseded:
        # A cancel, exit or timeout took the instance over while this run was on its way:
        # the answer is what the instance is now, and what became of the request.
        instance = _current(domain, workflow, superseded.instance_id)
        error = {"errorCode": superseded.code, "detail": superseded.message}
        body = {**_shown_envelope(instance, shown_to), "error": error}
        return RunAnswer(200, body, tagged=instance)
    except PipelineFault as fault:
        if fault.code in CALLER_FAULTS:
            raise  # the exception handler answers with the code's own status
        instance = _current(domain, workflow, fault.instance_id)
        return _faulted(instance, fault.code, fault.message, retried, shown_to, shaped_by)
    instance = outcome.instance
    execution = outcome.execution
    if not accepted and execution is not None and execution.relays:
        # Children started or a parent resumes: run those hand-offs before answering.
        relays_run(execution.instance.id)
        instance = instance_get(instance_id=instance.id) or instance
    if outcome.addressed is not None:
        # Forwarded to the active subflow: the answer describes the instance the caller named.
        instance = instance_get(instance_id=outcome.addressed) or instance
    extra = _retried(instance, outcome) if retried else {}
    if accepted or outcome.queued:
        body = {"id": str(instance.id), "status": str(instance.status), **extra}
        # Where to poll: the instance the caller named.
        return RunAnswer(202, body, location=_instance_path(instance))
    if execution is not None and execution.awaiting_retry is not None:
        wait = float(vnext_setting("SYNC_RETRY_WAIT_SECONDS"))
        instance = instance_settle(instance.id, within=wait) or instance
        incident = (
            incident_active_get(instance=instance)
            if instance.status == InstanceStatus.FAULTED
            else None
        )
        if incident is not None:
            code, detail = incident["errorCode"], incident["message"]
            return _faulted(instance, code, detail, retried, shown_to, shaped_by)
    return _sync_answer(instance, {**_shown_envelope(instance, shown_to), **extra}, shaped_by)


def _sync_answer(
    instance: InstanceSnapshot, standard: dict[str, Any], shaped_by: str | None
) -> RunAnswer:
    """The standard envelope, or the workflow's output mapping's answer for it."""
    shaped = output_answer(instance, standard, transition_key=shaped_by) if shaped_by else None
    if shaped is None:
        return RunAnswer(200, standard, tagged=instance)
    return RunAnswer(shaped.status, shaped.body, dict(shaped.headers), tagged=instance)


def _shown_envelope(instance: InstanceSnapshot, shown_to: RequestInfo | None) -> dict[str, Any]:
    """The envelope with the data the caller may see: none when the state's query roles
    refuse them, else through the master schema's field rules, and then the extensions of a
    single-instance read. No caller to show it to: as stored, without extensions."""
    body = envelope(instance)
    if shown_to is None:
        return body
    definition = workflow_definition(
        instance.domain, instance.workflow_key, instance.workflow_version
    )
    overrides = instance.overrides
    rules = definition.query_roles(instance.current_state, overrides)
    if rules or master_schema(definition) is not None:  # else nothing to decide: no groups query
        roles = shown_to.roles_on(instance) or frozenset()
        if not readable(definition, instance.current_state, roles, overrides):
            body["attributes"] = {}
            return body  # nor extensions: they would show what the caller may not read
        body["attributes"] = shown_attributes(definition, instance, roles)
    body["extensions"] = instance_extensions(
        definition,
        instance,
        ReadKind.INSTANCE,
        requested=(),
        headers=shown_to.headers,
        query=shown_to.query,
    )
    return body


def _retried(instance: InstanceSnapshot, outcome: InstanceOutcome | None = None) -> dict[str, Any]:
    # The history row of the re-run (its first hop), or the newest row when the run faulted.
    execution = outcome.execution if outcome is not None else None
    if execution is not None and execution.hops and execution.hops[0].row is not None:
        return {"retriedTransitionId": str(execution.hops[0].row.id)}
    newest = transition_newest_id_get(instance=instance)
    return {"retriedTransitionId": str(newest) if newest else None}


def _faulted(
    instance: InstanceSnapshot,
    code: str,
    detail: str,
    retried: bool,
    shown_to: RequestInfo | None,
    shaped_by: str | None,
) -> RunAnswer:
    path = _instance_path(instance)
    error = {"errorCode": code, "detail": detail, "incident": {"href": f"{path}/incidents/active"}}
    extra = _retried(instance) if retried else {}
    body = {**_shown_envelope(instance, shown_to), **extra, "error": error}
    return _sync_answer(instance, body, shaped_by)


# --- output mapping (seed 001 "Output Mapping") ---------------------------------------------------

# Headers an output mapping may not set: the server frames the answer and owns its cookies.
_FRAMING_HEADERS = frozenset(
    {"content-length", "transfer-encoding", "connection", "content-type", "set-cookie"}
)
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")


@dataclass(frozen=True)
class ShapedAnswer:
    """What a workflow's output mapping made of a sync answer."""

    status: int
    headers: dict[str, str]
    body: Any


def output_answer(
    instance: InstanceSnapshot, standard: dict[str, Any], *, transition_key: str = ""
) -> ShapedAnswer | None:
    """The workflow's `attributes.output` applied to a sync start or transition answer: its
    handler gets the standard envelope as `context.body` and returns the body (a plain value,
    200) or a `ScriptResponse(data=..., status_code=..., headers=...)`. None — the standard
    answer stands — when the workflow has no output mapping, the instance is a SubFlow child
    (the parent/child model relies on the standard answer), or the script failed (logged: an
    output mapping never breaks the request)."""
    definition = workflow_definition(
        instance.domain, instance.workflow_key, instance.workflow_version
    )
    node = definition.attributes.get("output")
    if not isinstance(node, dict) or not node.get("code"):
        return None
    if (
        instance.parent_correlation_id is not None
        and Correlation.objects.filter(
            pk=instance.parent_correlation_id, type=FlowType.SUBFLOW
        ).exists()
    ):
        return None
    scripts = engine().scripts
    try:
        handle = scripts.load(node, definition)
        name = "output_handler" if handle.has("output_handler") else "handler"
        context = script_context(
            instance,
            transition_key=transition_key,
            body=standard,
            configuration=engine().config.script_configuration,
        )
        returned = handle.call(name, context)
        return shaped_answer(returned)
    except (ScriptError, VNextError, ValueError) as exc:
        logger.warning(
            "output mapping of %s %s failed, the standard answer is sent: %s",
            instance.workflow_key,
            instance.id,
            exc,
        )
        return None


def shaped_answer(returned: Any) -> ShapedAnswer:
    """A script's answer as an HTTP answer (an output mapping's, a raw custom function's): a
    plain value is a 200 body; a `ScriptResponse` gives its status (200-599) and headers (no
    framing ones). ValueError when they are unusable."""
    if not isinstance(returned, ScriptResponse):
        return ShapedAnswer(200, {}, returned)
    status = returned.status_code if returned.status_code is not None else 200
    if not isinstance(status, int) or isinstance(status, bool) or not 200 <= status <= 599:
        raise ValueError(f"status_code {status!r} is not an HTTP status from 200 to 599")
    headers: dict[str, str] = {}
    for name, value in (returned.headers or {}).items():
        text = str(value)
        if not _HEADER_NAME.match(str(name)) or "\r" in text or "\n" in text:
            raise ValueError(f"header {name!r} is not a valid HTTP header")
        if str(name).lower() in _FRAMING_HEADERS:
            raise ValueError(f"header {name!r} is set by the server, not by an output mapping")
        headers[str(name)] = text
    return ShapedAnswer(status, headers, returned.data)
