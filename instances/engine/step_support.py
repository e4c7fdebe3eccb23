"""What the pipeline steps share: the `Step` interface, the script context of a hop, running a
task list with its outputs merged into the instance data (and a notification task's messages
staged), and whether a hop does I/O (which decides when it takes Busy)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from instances.engine.merging import deep_merge
from instances.engine.profiles import Order, Outcome
from instances.engine.records import HumanTaskRow, JobRow, Rederive
from instances.engine.recovery import task_failed
from instances.engine.script_runner import script_context
from instances.engine.task_types import PURE_TASK_TYPES
from instances.engine.tasks import TaskOutcome
from instances.job_payloads import TaskNotificationJob
from instances.status import JobKind, StateType

if TYPE_CHECKING:
    from instances.engine.execution import Execution, Hop


class Step:
    """A pipeline step: `order` places it, `run` does its one job and says how to go on."""

    order: ClassVar[Order]

    def run(self, execution: Execution, hop: Hop) -> Outcome:
        """Do the step's work for `hop`."""
        raise NotImplementedError


def hop_context(
    execution: Execution, hop: Hop, data: dict[str, Any] | None = None, **extra: Any
) -> Any:
    """The script context of `hop`'s mappings and rules; with `data`, over other instance data
    (a patch derived again, see `merge_data`)."""
    instance = execution.instance if data is None else replace(execution.instance, data=data)
    return script_context(
        instance,
        transition_key=hop.transition.key,
        body=hop.request.attributes,
        headers=hop.request.headers,
        query=hop.request.query,
        task_responses=execution.task_responses,
        configuration=execution.engine.config.script_configuration,
        **extra,
    )


def resumes_phase(hop: Hop, phase: str) -> bool:
    """True when `hop` is an error-boundary retry that re-enters at a failed task of `phase`."""
    resume = hop.request.resume_tasks
    return hop.depth == 0 and resume is not None and resume.phase == phase


def run_tasks(execution: Execution, hop: Hop, references: list[dict[str, Any]], phase: str) -> None:
    """Run a task list of `hop` (Busy first when one of them does I/O): journal rows, responses
    and data patches staged on the run; a failure goes to its error boundary."""
    resume = hop.request.resume_tasks if resumes_phase(hop, phase) else None
    if resume is not None:
        references = [reference for reference in references if resume.selects(reference)]
    if not references:
        return
    if tasks_do_io(execution, references):
        execution.ensure_busy()
    row = hop.row

    def merge(outcome: TaskOutcome) -> None:
        if resume is not None and outcome.key in resume.keys:
            # The journal numbers the attempts of a task its error boundary retried.
            outcome.row.attempts = hop.request.boundary_retries + 1
        execution.writes.tasks.append(outcome.row)
        execution.writes.tasks.extend(outcome.item_rows)
        if outcome.response is not None:
            execution.task_responses[outcome.key] = outcome.response
        merge_data(execution, outcome.patch, execution.strategy_for(hop), outcome.rederive)
        _enqueue_notifications(execution, hop, outcome)
        _stage_human_tasks(execution, hop, outcome)

    execution.engine.tasks.run(
        references,
        phase=phase,
        definition=execution.definition,
        instance=execution.instance,
        transition_key=hop.transition.key,
        transition_id=row.id if row else None,
        task_responses=execution.task_responses,
        on_done=merge,
        on_failed=lambda outcome, reference: task_failed(execution, hop, outcome, reference, phase),
    )


def _enqueue_notifications(execution: Execution, hop: Hop, outcome: TaskOutcome) -> None:
    # A notification task's messages commit with the hop as jobs (the transactional outbox):
    # sent once it is committed, retried until delivered; a hop that faults drops its own.
    now = execution.engine.clock()
    for message in outcome.notifications:
        job = JobRow(
            kind=JobKind.TASK_NOTIFICATION,
            run_at=now,
            payload=TaskNotificationJob(
                task=outcome.key,
                channel=message.channel,
                content=message.content,
                headers=message.headers,
                state=execution.instance.current_state,
                transition=hop.transition.key,
                at=now.isoformat(),
            ).to_json(),
        )
        execution.writes.jobs.append(job)
        hop.notification_jobs.append(job)


def _stage_human_tasks(execution: Execution, hop: Hop, outcome: TaskOutcome) -> None:
    # A human task's inbox entry commits with the hop, in the state the instance is in now
    # (a state's onEntries run once it was entered).
    for opened in outcome.human_tasks:
        execution.writes.human_tasks.append(
            HumanTaskRow(
                id=opened.id,
                task_key=opened.task_key,
                state=execution.instance.current_state,
                title=opened.title,
                instructions=opened.instructions,
                roles=list(opened.roles),
                users=list(opened.users),
                form=opened.form,
                context=opened.context,
                due_at=opened.due_at,
                transition_id=hop.row.id if hop.row else None,
            )
        )


def merge_data(
    execution: Execution,
    patch: dict[str, Any],
    strategy: str,
    rederive: Rederive | None = None,
) -> None:
    """Merge `patch` into the run's view of the data and stage it with `strategy`.

    A patch a script derived from the data carries `rederive`: should another write change the
    data before this run's flush, the flush makes the patch again from the data as committed
    (the write funnel, Execution.flush) instead of writing it stale."""
    if patch:
        execution.instance.data = deep_merge(execution.instance.data, patch)
    execution.writes.merge_data(patch, strategy, rederive)


def tasks_do_io(execution: Execution, references: list[dict[str, Any]]) -> bool:
    """True unless every task of `references` is a script or condition task.

    Those compute in the script worker and touch nothing outside: a hop made only of them
    commits once, guarded by the state it loaded, like a hop with no task. A task that is not
    published counts as I/O; it fails when it runs."""
    components = execution.engine.tasks.components
    for reference in references:
        document = components.component("task", reference.get("task") or {})
        attributes = (document or {}).get("attributes") or {}
        if str(attributes.get("type")) not in PURE_TASK_TYPES:
            return True
    return False


def hop_does_io(execution: Execution, hop: Hop) -> bool:
    """True when a task of the transition, of the state it leaves or of the state it enters
    does I/O, or it enters a SubFlow state: the hop then takes Busy (step 19)."""
    definition = execution.definition
    target = hop.transition.resolved_target(execution.instance.current_state)
    if hop.transition.tasks and tasks_do_io(execution, hop.transition.tasks):
        return True
    self_only = hop.transition.is_update_data
    source = definition.states.get(hop.source_state or "")
    if not self_only and source is not None and tasks_do_io(execution, source.on_exits):
        return True
    entered = definition.states.get(target)
    if entered is None or self_only:
        return False
    return entered.state_type == StateType.SUBFLOW or tasks_do_io(execution, entered.on_entries)
