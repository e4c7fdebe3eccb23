"""Running a list of task references (onExecutionTasks, onExits, onEntries): grouped by `order`,
one group after the other, the tasks of a group concurrently; each with its mapping's input and
output handlers, a journal row, and its output merged into the instance data."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from itertools import groupby
from typing import Any

from instances.engine.definition import WorkflowDefinition
from instances.engine.errors import Codes, ErrorCode
from instances.engine.fan_out import (
    DEFAULT_MAX_CONCURRENT_ITEMS,
    FAN_OUT_TYPE,
    Bulkhead,
    FanOutConfig,
    FanOutRun,
    FanOutTask,
    InnerTask,
)
from instances.engine.ports import Components, InstanceReader, InstanceWriter, SubprocessParent
from instances.engine.records import InstanceSnapshot, Rederive, TaskRow
from instances.engine.script_pool import FollowUp, ScriptReply
from instances.engine.script_runner import (
    ScriptHandle,
    ScriptObject,
    ScriptRunner,
    instance_view,
    response_data,
    script_context,
    stopped_code,
)
from instances.engine.scripts import ScriptError, ScriptResponse
from instances.engine.task_types import (
    EXECUTORS,
    NOTIFICATION_TYPE,
    PURE_TASK_TYPES,
    OutgoingNotification,
    StandardResponse,
    TaskCall,
    TaskFailure,
)
from instances.status import TaskStatus

# Config keys exposed to scripts as snake_case attributes of the `task` argument.
_TASK_ATTRIBUTES = {
    "url": "url",
    "method": "method",
    "headers": "headers",
    "body": "body",
    "timeoutSeconds": "timeout_seconds",
    "validateSsl": "validate_ssl",
    "acceptedStatusCodes": "accepted",
    "domain": "domain",
    "flow": "flow",
    "key": "key",
    "instanceId": "instance_id",
    "page": "page",
    "pageSize": "page_size",
    "filter": "filter",
    "sort": "sort",
    "transitionName": "transition_name",
    "version": "version",
    "tags": "tags",
    "sync": "sync",
}


@dataclass
class TaskOutcome:
    """What one task did: its journal row, its data patch, its response, or its failure."""

    key: str
    row: TaskRow
    patch: dict[str, Any] = field(default_factory=dict)
    response: dict[str, Any] | None = None
    failure: TaskFailure | None = None
    # A fan-out task's item rows (`{taskKey}#{index}`), journalled after its own.
    item_rows: list[TaskRow] = field(default_factory=list)
    # What a notification task handed over: delivered once the hop commits (as jobs).
    notifications: list[OutgoingNotification] = field(default_factory=list)
    # Makes `patch` again from other data (the output handler, or a pure task's whole run);
    # None when the patch does not depend on the data.
    rederive: Rederive | None = None


@dataclass
class TaskRunner:
    """Executes task references of a definition for one pipeline hop."""

    components: Components
    scripts: ScriptRunner
    reader: InstanceReader | None = None
    # `context.configuration` of every mapping: values the operator chose to show scripts.
    configuration: dict[str, Any] = field(default_factory=dict)
    writer: InstanceWriter | None = None
    # The process-wide limit on running fan-out items (one per engine, so one per process).
    bulkhead: Bulkhead = field(default_factory=lambda: Bulkhead(DEFAULT_MAX_CONCURRENT_ITEMS))

    def run(
        self,
        references: list[dict[str, Any]],
        *,
        phase: str,
        definition: WorkflowDefinition,
        instance: InstanceSnapshot,
        transition_key: str,
        transition_id: Any,
        task_responses: dict[str, Any],
        on_done: Callable[[TaskOutcome], None],
        on_failed: Callable[[TaskOutcome, dict[str, Any]], bool] | None = None,
        headers: dict[str, str] | None = None,
        query: dict[str, Any] | None = None,
        body: Any = None,
    ) -> None:
        """Run `references` group by group; report each outcome, in definition order, to
        `on_done` (which merges its data). Once a group is done, its first failure goes to
        `on_failed` with its reference, which raises, or returns True to skip the groups after
        it, False to go on; without `on_failed` the failure is raised. `headers`, `query` and
        `body` are the request the input mappings see as `context.headers` / `context.query` /
        `context.body` (a custom function's or an extension's caller; credentials already
        removed)."""
        indexed = sorted(enumerate(references), key=lambda pair: int(pair[1].get("order") or 1))
        for _, group_iter in groupby(indexed, key=lambda pair: int(pair[1].get("order") or 1)):
            group = [reference for _, reference in group_iter]

            def one(reference: dict[str, Any]) -> TaskOutcome:
                return self._run_one(
                    reference,
                    phase=phase,
                    definition=definition,
                    instance=instance,
                    transition_key=transition_key,
                    transition_id=transition_id,
                    task_responses=task_responses,
                    headers=headers,
                    query=query,
                    body=body,
                )

            if len(group) == 1:
                outcomes = [one(group[0])]
            else:
                with ThreadPoolExecutor(max_workers=min(len(group), 8)) as pool:
                    outcomes = list(pool.map(self._in_worker(one), group))
            merged = False
            for outcome in outcomes:
                if merged and outcome.rederive is not None:
                    # Tasks of one order ran side by side on the same data: their outputs are
                    # merged one after the other, each made from the data with the outputs
                    # before it merged (two counters bumped by two tasks both count).
                    _rederive_outcome(outcome, instance.data)
                on_done(outcome)
                merged = merged or bool(outcome.patch)
            failed = next(
                ((o, ref) for o, ref in zip(outcomes, group, strict=True) if o.failure), None
            )
            if failed is None:
                continue
            outcome, reference = failed
            if on_failed is None:
                assert outcome.failure is not None
                raise outcome.failure
            if on_failed(outcome, reference):
                return

    def _in_worker(self, action: Callable[[dict[str, Any]], TaskOutcome]) -> Callable[..., Any]:
        def run(reference: dict[str, Any]) -> TaskOutcome:
            try:
                return action(reference)
            finally:
                if self.reader is not None:
                    self.reader.release_thread()

        return run

    def _run_one(
        self,
        reference: dict[str, Any],
        *,
        phase: str,
        definition: WorkflowDefinition,
        instance: InstanceSnapshot,
        transition_key: str,
        transition_id: Any,
        task_responses: dict[str, Any],
        headers: dict[str, str] | None = None,
        query: dict[str, Any] | None = None,
        body: Any = None,
    ) -> TaskOutcome:
        started = time.monotonic()
        task_ref = reference.get("task") or {}
        key = str(task_ref.get("key", "?"))
        order = int(reference.get("order") or 1)

        def outcome(
            status: str, response: Any = None, patch: Any = None, failure: TaskFailure | None = None
        ) -> TaskOutcome:
            row = TaskRow(
                transition_id=transition_id,
                task_key=key,
                phase=phase,
                order=order,
                status=status,
                response=response,
                duration_ms=int((time.monotonic() - started) * 1000),
                error_code=failure.code if failure else "",
                error_message=failure.message if failure else "",
            )
            return TaskOutcome(key, row, patch or {}, response, failure)

        try:
            document = self.components.component("task", task_ref)
            if document is None:
                raise TaskFailure(
                    Codes.TASK_NOT_FOUND, f"task {key} {task_ref.get('version')} is not published"
                )
            attributes = document.get("attributes") or {}
            task_type = str(attributes.get("type"))
            if task_type == FAN_OUT_TYPE:
                run = self._fan_out(
                    key,
                    attributes,
                    reference,
                    definition=definition,
                    instance=instance,
                    transition_key=transition_key,
                    task_responses=task_responses,
                )
                answer = StandardResponse(status_code=200, data=run.output).as_dict()
                status = TaskStatus.FAILED if run.failure else TaskStatus.SUCCEEDED
                if run.failure is not None:
                    run.failure.task_key = key
                done = outcome(status, answer, run.output, run.failure)
                done.rederive = run.rederive
                done.item_rows = [
                    TaskRow(
                        transition_id=transition_id,
                        task_key=f"{key}#{item.index}",
                        phase=phase,
                        order=order,
                        status=TaskStatus.SUCCEEDED if item.is_success else TaskStatus.FAILED,
                        response=item.response,
                        duration_ms=item.duration_ms,
                        error_code=item.error_code or "",
                        error_message=item.error_message or "",
                        attempts=item.attempts,
                    )
                    for item in run.result.items
                ]
                return done
            executor = EXECUTORS.get(task_type)
            if executor is None:
                raise TaskFailure(
                    Codes.TASK_UNSUPPORTED,
                    f"task type {task_type} ({key}) is not supported by this runtime",
                )
            task = _task_view(key, task_type, attributes.get("config") or {})
            mapping = (
                reference.get("mapping") if isinstance(reference.get("mapping"), dict) else None
            )
            script = (
                self.scripts.load(mapping, definition) if mapping and mapping.get("code") else None
            )
            context = script_context(
                instance,
                transition_key=transition_key,
                body=body,
                headers=headers,
                query=query,
                task_responses=task_responses,
                configuration=self.configuration,
            )
            input_data: Any = None
            chained: ScriptReply | None = None
            if script is not None and script.has("input_handler"):
                try:
                    # The handler may change the task (url, headers, body): take its changes back.
                    if task_type in PURE_TASK_TYPES and script.has("output_handler"):
                        # Nothing happens between the handlers: both in one worker round trip.
                        chained = script.call_then(
                            "input_handler",
                            task,
                            context,
                            updates=(0,),
                            then=FollowUp(
                                "output_handler",
                                context_position=1,
                                body=StandardResponse(status_code=200).as_dict(),
                                condition=task_type == "8",
                            ),
                        )
                        returned = chained.value
                    else:
                        returned = script.call("input_handler", task, context, updates=(0,))
                except ScriptError as exc:
                    raise _input_failure(key, task_type, exc) from exc
                input_data = response_data(returned)
                if isinstance(returned, ScriptResponse) and returned.headers:
                    task.headers = {**(task.get("headers") or {}), **returned.headers}
            call = TaskCall(
                task=task,
                input_data=input_data,
                domain=instance.domain,
                workflow=instance.workflow_key,
                reader=self.reader,
                writer=self.writer,
                parent=SubprocessParent(instance.id, instance.current_state),
                mapping=script,
                context=context,
            )
            try:
                response = executor(call)
            except TaskFailure as failure:
                if failure.response is None:
                    raise
                # The answer of a failed call is still an answer: the output handler sees it
                # (and may record it) whatever an error boundary then decides.
                failure.task_key = key
                patch = self._output(script, context, failure.response, task_type)
                failed = outcome(TaskStatus.FAILED, failure.response.as_dict(), patch, failure)
                failed.rederive = self._output_rederive(
                    script, context, instance, failure.response, task_type
                )
                return failed
            if chained is not None:
                patch = _output_patch(chained.follow_up, chained.follow_up_error)
            else:
                patch = self._output(script, context, response, task_type)
            done = outcome(TaskStatus.SUCCEEDED, response.as_dict(), patch)
            done.notifications = call.outbox
            if task_type in PURE_TASK_TYPES:
                # Nothing left the worker: the whole task runs again on other data.
                done.rederive = self._rerun(
                    reference,
                    phase=phase,
                    definition=definition,
                    instance=instance,
                    transition_key=transition_key,
                    transition_id=transition_id,
                    task_responses=dict(task_responses),
                    headers=headers,
                    query=query,
                    body=body,
                )
            else:
                done.rederive = self._output_rederive(
                    script, context, instance, response, task_type
                )
            return done
        except TaskFailure as failure:
            failure.task_key = key
            response_dict = failure.response.as_dict() if failure.response else None
            return outcome(TaskStatus.FAILED, response_dict, failure=failure)

    def _rerun(self, reference: dict[str, Any], **arguments: Any) -> Rederive:
        """The patch a pure task (script, condition) makes when it runs on other data."""
        instance: InstanceSnapshot = arguments.pop("instance")

        def rederive(data: dict[str, Any]) -> dict[str, Any]:
            again = self._run_one(reference, instance=replace(instance, data=data), **arguments)
            if again.failure is not None:
                raise again.failure
            return again.patch

        return rederive

    def _output_rederive(
        self,
        script: ScriptHandle | None,
        context: ScriptObject,
        instance: InstanceSnapshot,
        response: StandardResponse,
        task_type: str,
    ) -> Rederive | None:
        """The patch the output handler makes of the same answer on other data; None without
        an output handler (the patch does not depend on the data then)."""
        if script is None or not script.has("output_handler"):
            return None

        def rederive(data: dict[str, Any]) -> dict[str, Any]:
            again = copy.copy(context)
            again.instance = instance_view(replace(instance, data=data))
            return self._output(script, again, response, task_type)

        return rederive

    def _fan_out(
        self,
        key: str,
        attributes: dict[str, Any],
        reference: dict[str, Any],
        *,
        definition: WorkflowDefinition,
        instance: InstanceSnapshot,
        transition_key: str,
        task_responses: dict[str, Any],
    ) -> FanOutRun:
        """Run a fan-out task (type 21): its inner task resolved once, cloned per item."""
        config = FanOutConfig.parse(attributes.get("config"))
        inner_key = str(config.inner.get("key"))
        document = self.components.component("task", config.inner)
        if document is None:
            raise TaskFailure(
                Codes.TASK_NOT_FOUND,
                f"the fan-out's inner task {inner_key} {config.inner.get('version')} is not "
                "published",
            )
        inner_attributes = document.get("attributes") or {}
        inner_type = str(inner_attributes.get("type"))
        executor = EXECUTORS.get(inner_type)
        if inner_type == NOTIFICATION_TYPE:
            raise TaskFailure(
                Codes.TASK_UNSUPPORTED,
                f"the fan-out's inner task {inner_key} is a notification task (type 10): its "
                "messages are committed with a hop, which an item does not have",
            )
        if executor is None and inner_type != FAN_OUT_TYPE:
            raise TaskFailure(
                Codes.TASK_UNSUPPORTED,
                f"the fan-out's inner task {inner_key} has type {inner_type}, which this "
                "runtime does not run",
            )
        inner_config = inner_attributes.get("config") or {}
        mapping = reference.get("mapping") if isinstance(reference.get("mapping"), dict) else None
        script = self.scripts.load(mapping, definition) if mapping and mapping.get("code") else None
        parent = SubprocessParent(instance.id, instance.current_state)

        def execute(task: ScriptObject, input_data: Any) -> StandardResponse:
            assert executor is not None
            call = TaskCall(
                task=task,
                input_data=input_data,
                domain=instance.domain,
                workflow=instance.workflow_key,
                reader=self.reader,
                writer=self.writer,
                parent=parent,
            )
            return executor(call)

        def context(body: Any, data: dict[str, Any] | None = None) -> ScriptObject:
            return script_context(
                instance if data is None else replace(instance, data=data),
                transition_key=transition_key,
                body=body,
                task_responses=task_responses,
                configuration=self.configuration,
            )

        reader = self.reader
        return FanOutTask(
            task_key=key,
            config=config,
            inner=InnerTask(
                inner_key,
                inner_type,
                clone=lambda: _task_view(inner_key, inner_type, inner_config),
                execute=execute,
            ),
            script=script,
            context=context,
            bulkhead=self.bulkhead,
            instance_id=str(instance.id),
            data=instance.data,
            release=reader.release_thread if reader is not None else lambda: None,
        ).run()

    def _output(
        self,
        script: ScriptHandle | None,
        context: ScriptObject,
        response: StandardResponse,
        task_type: str,
    ) -> dict[str, Any]:
        if script is not None and script.has("output_handler"):
            context.body = copy.deepcopy(response.as_dict())
            try:
                returned = script.call("output_handler", context)
            except ScriptError as exc:
                return _output_patch(None, exc)
            return _output_patch(returned, None)
        if task_type == "7" and isinstance(response.data, dict):
            return response.data
        return {}


def _rederive_outcome(outcome: TaskOutcome, data: dict[str, Any]) -> None:
    # The outcome's patch made again on `data`; an output handler that now fails fails the task.
    assert outcome.rederive is not None
    try:
        outcome.patch = outcome.rederive(data)
    except TaskFailure as failure:
        failure.task_key = outcome.key
        outcome.patch, outcome.failure = {}, failure
        outcome.row.status = TaskStatus.FAILED
        outcome.row.error_code, outcome.row.error_message = failure.code, failure.message


def _output_patch(returned: Any, error: ScriptError | None) -> dict[str, Any]:
    # What an output handler's value merges into the instance data, or the failure it raised.
    if error is not None:
        raise TaskFailure(
            stopped_code(error, Codes.TASK_OUTPUT_MAPPING_FAILED), str(error)
        ) from error
    value = response_data(returned)
    return value if isinstance(value, dict) else {}


def _input_failure(key: str, task_type: str, exc: ScriptError) -> TaskFailure:
    # A script task's input handler is its work: when it raises, the task failed with a 500
    # (`Task:Script:<key>:500`, as in vNext); other tasks' input mappings fail with 400007.
    stopped = stopped_code(exc, Codes.TASK_INPUT_MAPPING_FAILED)
    if task_type == "7" and stopped == Codes.TASK_INPUT_MAPPING_FAILED:
        error = ErrorCode(f"Task:Script:{key}:500", 500, "Script task failed")
        return TaskFailure(error, str(exc), status=500)
    return TaskFailure(stopped, str(exc))


def _task_view(key: str, task_type: str, config: dict[str, Any]) -> ScriptObject:
    values: dict[str, Any] = {"task_key": key, "type": task_type, "config": copy.deepcopy(config)}
    for name, attribute in _TASK_ATTRIBUTES.items():
        if name in config:
            values[attribute] = copy.deepcopy(config[name])
    values.setdefault("headers", {})
    return ScriptObject(**values)
