"""SubFlow states (seed 000 "Subflow Chain Reserve", steps 10, 21, 70, 79; seed 001 SubFlow state).

A parent entering a SubFlow state starts its child in the same transaction as its own writes: the
child row (Busy, reserved for its start job), the `Correlation` and the job. The parent then stays
Busy for the child's lifetime with the owner `subflow:<child id>`, so a client's transition on it
is forwarded to the child (step 10) unless it is the parent's own (updateData, cancel/exit, a
`$self` shared transition). When the child ends, its final flush closes the correlation and
queues the parent's resume job (step 79): the mapping's output handler merges the child's data
into the parent and the parent goes on (automatic transitions after the SubFlow state).

Mapping contract (vNext `ISubFlowMapping`): `input_handler(context)` returns the child's start
data; `output_handler(context)` gets the child's data as `context.body` and returns the patch
merged into the parent. Both are optional.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from instances.engine.definition import SELF, TransitionKind, WorkflowDefinition
from instances.engine.errors import Codes, VNextError
from instances.engine.outcomes import BUSY_EXEMPT
from instances.engine.overrides import OVERRIDES_KEY, SubflowOverrides
from instances.engine.records import ChildStart, InstanceSnapshot, waiting_child
from instances.engine.script_runner import response_data
from instances.engine.scripts import ScriptError
from instances.job_payloads import TransitionJob
from instances.status import FlowType

if TYPE_CHECKING:
    from instances.engine.definition import StateDef
    from instances.engine.execution import Execution, Hop


def parents_own(definition: WorkflowDefinition, state: str, key: str) -> bool:
    """True when transition `key` belongs to the parent itself even while its child runs:
    updateData (data only, step 21), cancel/exit (they end the chain from the top), or a `$self`
    shared transition available in `state` (seed 000 step 10)."""
    transition = definition.transition_for(state, key)
    if transition is None:
        return False
    if transition.is_update_data or transition.kind in BUSY_EXEMPT:
        return True
    return transition.kind == TransitionKind.SHARED and transition.target == SELF


def forward_target(
    definition: WorkflowDefinition, instance: InstanceSnapshot, key: str
) -> uuid.UUID | None:
    """The child a client's transition `key` on `instance` goes to instead (step 10), or None
    when the instance runs it itself."""
    child = waiting_child(instance)
    if child is None or parents_own(definition, instance.current_state, key):
        return None
    return child


def child_start(execution: Execution, hop: Hop, state: StateDef, context: Any) -> ChildStart:
    """The child a SubFlow state starts: its pinned workflow, its start data from the mapping's
    input handler, the timeout, view and role overrides, and the job that runs its start
    transition."""
    config = state.subflow or {}
    if config.get("type", FlowType.SUBFLOW) != FlowType.SUBFLOW:
        raise VNextError(
            Codes.SUBFLOW_NOT_FOUND,
            f"state {state.key} has subFlow type {config.get('type')!r}; a state starts 'S' "
            "subflows (a SubProcess is started by a task of type 14)",
        )
    process = config.get("process") or {}
    engine = execution.engine
    child_definition = engine.components.workflow(
        str(process.get("domain") or execution.instance.domain),
        str(process.get("key") or ""),
        str(process["version"]) if process.get("version") else None,
    )
    if child_definition is None:
        raise VNextError(
            Codes.SUBFLOW_NOT_FOUND,
            f"state {state.key} starts workflow {process.get('domain')}/{process.get('key')} "
            f"{process.get('version') or '(newest)'}, which is not published",
        )
    start_data = _mapped(execution, config, "input_handler", context)
    # Derived from the hop's history row: a job re-running this hop starts the same child.
    row = execution.transition_row(hop)
    child_id = uuid.uuid5(row.id, "subflow-child")
    initial = child_definition.initial_state.key
    extra: dict[str, Any] = {}
    overrides = config.get("overrides")
    if isinstance(overrides, dict) and isinstance(overrides.get("timeout"), dict):
        extra["timeoutOverride"] = overrides["timeout"]
    # Pinned with the child, as the timeout is: a later publish of the parent changes nothing.
    parent = execution.definition
    source = f"{parent.domain}/{parent.key}@{parent.version}#{state.key}"
    pinned = SubflowOverrides.of_subflow(config, source)
    if pinned:
        extra[OVERRIDES_KEY] = pinned.as_extra()
    child = InstanceSnapshot(
        id=child_id,
        domain=child_definition.domain,
        workflow_key=child_definition.key,
        workflow_version=child_definition.version,
        current_state=initial,
        effective_state=initial,
        extra=extra,
        created_by=hop.request.actor,
        modified_by=hop.request.actor,
    )
    reservation = f"res:{uuid.uuid5(child_id, 'start').hex}"
    attributes = start_data if isinstance(start_data, dict) else {}
    payload = TransitionJob(
        transition=child_definition.start.key,
        start=True,
        attributes=attributes,
        body=attributes,
        actor=hop.request.actor,
        reservation=reservation,
        origin=str(execution.instance.id),
    )
    return ChildStart(child, FlowType.SUBFLOW, state.key, reservation, payload.to_json())


def resume_patch(execution: Execution, state: StateDef, context: Any) -> dict[str, Any]:
    """What the mapping's output handler merges into the resumed parent (`context.body` is the
    child's data); nothing when the mapping has no output handler."""
    patch = _mapped(execution, state.subflow or {}, "output_handler", context)
    if patch is None:
        return {}
    if not isinstance(patch, dict):
        raise VNextError(
            Codes.SUBFLOW_MAPPING_FAILED,
            f"the subflow output handler of {state.key} returned {type(patch).__name__}; "
            "return a dict (or ScriptResponse(data=...)) to merge into the parent",
        )
    return patch


def _mapped(execution: Execution, config: dict[str, Any], handler: str, context: Any) -> Any:
    mapping = config.get("mapping")
    if not isinstance(mapping, dict) or not mapping.get("code"):
        return None
    scripts = execution.engine.scripts
    script = scripts.load(mapping, execution.definition)
    if not script.has(handler):
        return None
    try:
        return response_data(script.call(handler, context))
    except ScriptError as exc:
        raise VNextError(
            Codes.SUBFLOW_MAPPING_FAILED, f"subflow mapping {handler} failed: {exc}"
        ) from exc
