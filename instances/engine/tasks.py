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
    Bulkhead,
    FanOutConfig,
    FanOutRun,
    FanOutTask,
    InnerTask,
)
from instances.engine.ports import Components, InstanceReader, InstanceWriter, SubprocessParent
from instances.engine.records import InstanceSnapshot, Rederive, TaskRow
from instances.engine.script_pool import FollowUp, ScriptCall, ScriptReply
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
    PURE_TASK_TYPES,
    HumanTaskOpen,
    OutgoingNotification,
    StandardResponse,
    TaskCall,
    TaskFailure,
)
from instances.status import TaskStatus, TaskType

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
    # DaprService (3), DaprHttpEndpoint (1), DaprBinding (2), SoapTask (16).
    "appId": "app_id",
    "methodName": "method_name",
    "httpVerb": "http_verb",
    "queryString": "query_string",
    "endpointName": "endpoint_name",
    "path": "path",
    "bindingName": "binding_name",
    "operation": "operation",
    "metadata": "metadata",
    "data": "data",
    "soapAction": "soap_action",
    "soapVersion": "soap_version",
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
    # The human tasks it opened (type 5): inbox entries committed with the hop.
    human_tasks: list[HumanTaskOpen] = field(default_factory=list)
    # Makes `patch` again from other data (the output handler, or a pure task's whole run);
    # None when the patch does not depend on the data.
    rederive: Rederive | None = None
    # Run in a chained batch: `patch` was made on the data with the outputs of its group's
    # tasks before it merged already, so merging it needs no second run.
    chained: bool = False


@dataclass(frozen=True)
class _TaskScope:
    """What the tasks of one `TaskRunner.run` share: the hop's phase and history row, the
    instance, the responses so far, and the request their input mappings see."""

    phase: str
    definition: WorkflowDefinition
    instance: InstanceSnapshot
    transition_key: str
    transition_id: Any
    task_responses: dict[str, Any]
    headers: dict[str, str] | None = None
    query: dict[str, Any] | None = None
    body: Any = None


@dataclass(frozen=True)
class _TaskRun:
    """One task reference being run: its key, its group's order, when it started."""

    key: str
    order: int
    started: float
    scope: _TaskScope

    def row(self, **values: Any) -> TaskRow:
        """A journal row of this run (the task's own, or a fan-out item's `task_key`)."""
        values.setdefault("task_key", self.key)
        return TaskRow(
            transition_id=self.scope.transition_id,
            phase=self.scope.phase,
            order=self.order,
            **values,
        )

    def outcome(
        self,
        status: str,
        response: Any = None,
        patch: Any = None,
        failure: TaskFailure | None = None,
    ) -> TaskOutcome:
        """The task's outcome, its journal row timed from `started`."""
        row = self.row(
            status=status,
            response=response,
            duration_ms=int((time.monotonic() - self.started) * 1000),
            error_code=failure.code if failure else "",
            error_message=failure.message if failure else "",
        )
        return TaskOutcome(self.key, row, patch or {}, response, failure)


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
        scope = _TaskScope(
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
        indexed = sorted(enumerate(references), key=lambda pair: int(pair[1].get("order") or 1))
        for _, group_iter in groupby(indexed, key=lambda pair: int(pair[1].get("order") or 1)):
            group = [reference for _, reference in group_iter]

            outcomes = self._run_group(group, scope)
            merged = False
            for outcome in outcomes:
                if merged and outcome.rederive is not None and not outcome.chained:
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

    def _run_group(self, group: list[dict[str, Any]], scope: _TaskScope) -> list[TaskOutcome]:
        """The outcomes of one group's tasks, in definition order."""
        if len(group) == 1:
            return [self._run_one(group[0], scope)]
        chained = self._run_pure_group(group, scope)
        if chained is not None:
            return chained

        def one(reference: dict[str, Any]) -> TaskOutcome:
            return self._run_one(reference, scope)

        with ThreadPoolExecutor(max_workers=min(len(group), 8)) as pool:
            return list(pool.map(self._in_worker(one), group))

    def _run_pure_group(
        self, group: list[dict[str, Any]], scope: _TaskScope
    ) -> list[TaskOutcome] | None:
        """A group of script and condition tasks, each with an input handler: every handler
        of the group in one worker round trip, the context encoded once, each task's handlers
        seeing the data with the outputs of the tasks before it merged (what merging them one
        after the other makes of tasks run side by side). None for any other group, or when
        the executor cannot batch."""
        if not self.scripts.batches:
            return None
        plans: list[tuple[dict[str, Any], str, dict[str, Any], ScriptHandle]] = []
        for reference in group:
            document = self.components.component("task", reference.get("task") or {})
            attributes = (document or {}).get("attributes") or {}
            task_type = str(attributes.get("type"))
            script = self._mapping_script(reference, scope.definition)
            if task_type not in PURE_TASK_TYPES or script is None:
                return None
            if not script.has("input_handler"):
                return None
            plans.append((reference, task_type, attributes, script))
        context = self._context(scope)
        prepared: list[_Prepared] = []
        for reference, task_type, attributes, script in plans:
            key = str((reference.get("task") or {}).get("key", "?"))
            task = _task_view(key, task_type, attributes.get("config") or {})
            then = _follow_up(task_type) if script.has("output_handler") else None
            # Where the task's data patch is: its output handler's value, or a script task's
            # own result (a condition task without an output handler writes nothing).
            patch = "then" if then else ("result" if task_type == TaskType.SCRIPT else "")
            call = script.prepare(
                "input_handler", task, context, updates=(0,), then=then, patch=patch
            )
            prepared.append(_Prepared(task, context, call))
        replies = self.scripts.run_batch([item.call for item in prepared], chain=1)
        outcomes = []
        for (reference, *_), item, reply in zip(plans, prepared, replies, strict=True):
            item.reply = reply
            outcome = self._run_one(reference, scope, item)
            outcome.chained = True
            outcomes.append(outcome)
        return outcomes

    def _context(self, scope: _TaskScope) -> ScriptObject:
        """The `context` of the input and output handlers of `scope`'s tasks."""
        return script_context(
            scope.instance,
            transition_key=scope.transition_key,
            body=scope.body,
            headers=scope.headers,
            query=scope.query,
            task_responses=scope.task_responses,
            configuration=self.configuration,
        )

    def _in_worker(self, action: Callable[[dict[str, Any]], TaskOutcome]) -> Callable[..., Any]:
        def run(reference: dict[str, Any]) -> TaskOutcome:
            try:
                return action(reference)
            finally:
                if self.reader is not None:
                    self.reader.release_thread()

        return run

    def _run_one(
        self, reference: dict[str, Any], scope: _TaskScope, prepared: _Prepared | None = None
    ) -> TaskOutcome:
        """Run one task reference; a failure is the outcome's, never raised. `prepared`: its
        input handler already ran, in a batch."""
        task_ref = reference.get("task") or {}
        run = _TaskRun(
            key=str(task_ref.get("key", "?")),
            order=int(reference.get("order") or 1),
            started=time.monotonic(),
            scope=scope,
        )
        try:
            document = self.components.component("task", task_ref)
            if document is None:
                raise TaskFailure(
                    Codes.TASK_NOT_FOUND,
                    f"task {run.key} {task_ref.get('version')} is not published",
                )
            attributes = document.get("attributes") or {}
            task_type = str(attributes.get("type"))
            if task_type == TaskType.FAN_OUT:
                return self._fan_out_outcome(run, attributes, reference)
            return self._execute(run, reference, task_type, attributes, prepared)
        except TaskFailure as failure:
            failure.task_key = run.key
            response_dict = failure.response.as_dict() if failure.response else None
            return run.outcome(TaskStatus.FAILED, response_dict, failure=failure)

    def _execute(
        self,
        run: _TaskRun,
        reference: dict[str, Any],
        task_type: str,
        attributes: dict[str, Any],
        prepared: _Prepared | None = None,
    ) -> TaskOutcome:
        """Run a task of a type with an executor: input handler, the call, output handler."""
        scope = run.scope
        executor = EXECUTORS.get(task_type)
        if executor is None:
            raise TaskFailure(
                Codes.TASK_UNSUPPORTED,
                f"task type {task_type} ({run.key}) is not supported by this runtime",
            )
        script = self._mapping_script(reference, scope.definition)
        if prepared is not None:
            task, context = prepared.task, prepared.context
        else:
            task = _task_view(run.key, task_type, attributes.get("config") or {})
            context = self._context(scope)
        input_data, chained = self._input(
            run.key, task_type, task, script, context, prepared.reply if prepared else None
        )
        call = self._call(task, input_data, scope.instance, mapping=script, context=context)
        if task_type == TaskType.CACHE_ASIDE:
            call.run_source = self._source_runner(scope, context)
        try:
            response = executor(call)
        except TaskFailure as failure:
            if failure.response is None:
                raise
            # The answer of a failed call is still an answer: the output handler sees it
            # (and may record it) whatever an error boundary then decides.
            failure.task_key = run.key
            patch = self._output(script, context, failure.response, task_type)
            failed = run.outcome(TaskStatus.FAILED, failure.response.as_dict(), patch, failure)
            failed.rederive = self._output_rederive(
                script, context, scope.instance, failure.response, task_type
            )
            return failed
        if chained is not None:
            patch = _output_patch(chained.follow_up, chained.follow_up_error)
        else:
            patch = self._output(script, context, response, task_type)
        done = run.outcome(TaskStatus.SUCCEEDED, response.as_dict(), patch)
        done.notifications = call.outbox
        done.human_tasks = call.human_tasks
        if task_type in PURE_TASK_TYPES:
            # Nothing left the worker: the whole task runs again on other data.
            done.rederive = self._rerun(
                reference, replace(scope, task_responses=dict(scope.task_responses))
            )
        else:
            done.rederive = self._output_rederive(
                script, context, scope.instance, response, task_type
            )
        return done

    def _input(
        self,
        key: str,
        task_type: str,
        task: ScriptObject,
        script: ScriptHandle | None,
        context: ScriptObject,
        prepared: ScriptReply | ScriptError | None = None,
    ) -> tuple[Any, ScriptReply | None]:
        """The input handler's data for the call (it may change `task`: url, headers, body),
        and, for a pure task with an output handler, the reply that ran both handlers.
        `prepared`: what the handlers did in a batch (see `_run_pure_group`)."""
        if script is None or not script.has("input_handler"):
            return None, None
        chained: ScriptReply | None = None
        try:
            if prepared is not None:
                if isinstance(prepared, ScriptError):
                    raise prepared
                returned = prepared.value
                chained = prepared if script.has("output_handler") else None
            elif task_type in PURE_TASK_TYPES and script.has("output_handler"):
                # Nothing happens between the handlers: both in one worker round trip.
                chained = script.call_then(
                    "input_handler", task, context, updates=(0,), then=_follow_up(task_type)
                )
                returned = chained.value
            else:
                returned = script.call("input_handler", task, context, updates=(0,))
        except ScriptError as exc:
            raise _input_failure(key, task_type, exc) from exc
        if isinstance(returned, ScriptResponse) and returned.headers:
            task.headers = {**(task.get("headers") or {}), **returned.headers}
        return response_data(returned), chained

    def _call(
        self,
        task: ScriptObject,
        input_data: Any,
        instance: InstanceSnapshot,
        *,
        mapping: ScriptHandle | None = None,
        context: ScriptObject | None = None,
    ) -> TaskCall:
        """What an executor gets for one call of `task` on behalf of `instance`."""
        return TaskCall(
            task=task,
            input_data=input_data,
            domain=instance.domain,
            workflow=instance.workflow_key,
            reader=self.reader,
            writer=self.writer,
            parent=SubprocessParent(instance.id, instance.current_state),
            mapping=mapping,
            context=context,
            scripts=self.scripts,
        )

    def _source_runner(
        self, scope: _TaskScope, context: ScriptObject
    ) -> Callable[[dict[str, Any], dict[str, Any] | None], Any]:
        """A cache-aside task's source (type 18, on a miss): the referenced task run by its own
        type's executor, `mapping` as its input and output handlers on a throwaway copy of the
        context; the output handler's value (else the response's data) is what it gives. No
        journal row and no boundary of its own: its failure is the cache-aside task's."""

        def run_source(reference: dict[str, Any], mapping: dict[str, Any] | None) -> Any:
            key = str(reference.get("key"))
            document = self.components.component(
                "task", {**reference, "flow": reference.get("flow") or "sys-tasks"}
            )
            if document is None:
                raise TaskFailure(
                    Codes.TASK_NOT_FOUND,
                    f"the cache-aside source task {key} {reference.get('version')} is not "
                    "published",
                )
            attributes = document.get("attributes") or {}
            source_type = str(attributes.get("type"))
            executor = EXECUTORS.get(source_type)
            if source_type in (TaskType.CACHE_ASIDE, TaskType.NOTIFICATION) or executor is None:
                raise TaskFailure(
                    Codes.TASK_CACHE_ASIDE_SOURCE,
                    f"the source task {key!r} (type {source_type}) cannot be a cache-aside "
                    "source: a cache-aside or notification task, or a type that does not run",
                )
            task = _task_view(key, source_type, attributes.get("config") or {})
            script = (
                self.scripts.load(mapping, scope.definition)
                if isinstance(mapping, dict) and mapping.get("code")
                else None
            )
            branch = copy.copy(context)
            input_data, _ = self._input(key, source_type, task, script, branch)
            response = executor(
                self._call(task, input_data, scope.instance, mapping=script, context=branch)
            )
            if script is None or not script.has("output_handler"):
                return response.data
            branch.body = copy.deepcopy(response.as_dict())
            try:
                return response_data(script.call("output_handler", branch))
            except ScriptError as exc:
                raise TaskFailure(
                    stopped_code(exc, Codes.TASK_OUTPUT_MAPPING_FAILED), str(exc)
                ) from exc

        return run_source

    def _mapping_script(
        self, reference: dict[str, Any], definition: WorkflowDefinition
    ) -> ScriptHandle | None:
        """The reference's mapping script, or None when it has no mapping code."""
        mapping = reference.get("mapping") if isinstance(reference.get("mapping"), dict) else None
        return self.scripts.load(mapping, definition) if mapping and mapping.get("code") else None

    def _rerun(self, reference: dict[str, Any], scope: _TaskScope) -> Rederive:
        """The patch a pure task (script, condition) makes when it runs on other data."""

        def rederive(data: dict[str, Any]) -> dict[str, Any]:
            again = self._run_one(
                reference, replace(scope, instance=replace(scope.instance, data=data))
            )
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

    def _fan_out_outcome(
        self, run: _TaskRun, attributes: dict[str, Any], reference: dict[str, Any]
    ) -> TaskOutcome:
        """A fan-out task's outcome: its joined output, and one journal row per item."""
        batch = self._fan_out(run.key, attributes, reference, run.scope)
        answer = StandardResponse(status_code=200, data=batch.output).as_dict()
        status = TaskStatus.FAILED if batch.failure else TaskStatus.SUCCEEDED
        if batch.failure is not None:
            batch.failure.task_key = run.key
        done = run.outcome(status, answer, batch.output, batch.failure)
        done.rederive = batch.rederive
        done.item_rows = [
            run.row(
                task_key=f"{run.key}#{item.index}",
                status=TaskStatus.SUCCEEDED if item.is_success else TaskStatus.FAILED,
                response=item.response,
                duration_ms=item.duration_ms,
                error_code=item.error_code or "",
                error_message=item.error_message or "",
                attempts=item.attempts,
            )
            for item in batch.result.items
        ]
        return done

    def _fan_out(
        self, key: str, attributes: dict[str, Any], reference: dict[str, Any], scope: _TaskScope
    ) -> FanOutRun:
        """Run a fan-out task (type 21): its inner task resolved once, cloned per item."""
        instance = scope.instance
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
        if inner_type == TaskType.NOTIFICATION:
            raise TaskFailure(
                Codes.TASK_UNSUPPORTED,
                f"the fan-out's inner task {inner_key} is a notification task (type 10): its "
                "messages are committed with a hop, which an item does not have",
            )
        if inner_type == TaskType.HUMAN:
            raise TaskFailure(
                Codes.TASK_UNSUPPORTED,
                f"the fan-out's inner task {inner_key} is a human task (type 5): its inbox "
                "entry belongs to a state, which an item does not have",
            )
        if executor is None and inner_type != TaskType.FAN_OUT:
            raise TaskFailure(
                Codes.TASK_UNSUPPORTED,
                f"the fan-out's inner task {inner_key} has type {inner_type}, which this "
                "runtime does not run",
            )
        inner_config = inner_attributes.get("config") or {}
        script = self._mapping_script(reference, scope.definition)

        def execute(task: ScriptObject, input_data: Any) -> StandardResponse:
            assert executor is not None
            return executor(self._call(task, input_data, instance))

        def context(body: Any, data: dict[str, Any] | None = None) -> ScriptObject:
            return script_context(
                instance if data is None else replace(instance, data=data),
                transition_key=scope.transition_key,
                body=body,
                task_responses=scope.task_responses,
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
        if task_type in (TaskType.SCRIPT, TaskType.PYTHON) and isinstance(response.data, dict):
            return response.data
        return {}


@dataclass
class _Prepared:
    """A task of a batched group: its `task` and `context` arguments, its input handler's call
    and, once the batch ran, that call's reply or error."""

    task: ScriptObject
    context: ScriptObject
    call: ScriptCall
    reply: ScriptReply | ScriptError | None = None


def _follow_up(task_type: str) -> FollowUp:
    # A pure task's output handler, run right after its input handler in the same exchange.
    return FollowUp(
        "output_handler",
        context_position=1,
        body=StandardResponse(status_code=200).as_dict(),
        condition=task_type == TaskType.CONDITION,
    )


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
    if task_type == TaskType.SCRIPT and stopped == Codes.TASK_INPUT_MAPPING_FAILED:
        error = ErrorCode(f"Task:Script:{key}:500", 500, "Script task failed")
        return TaskFailure(error, str(exc), status=500)
    return TaskFailure(stopped, str(exc))


def _task_view(key: str, task_type: str, config: dict[str, Any]) -> ScriptObject:
    values: dict[str, Any] = {"task_key": key, "type": task_type, "config": copy.deepcopy(config)}
    for name, attribute in _TASK_ATTRIBUTES.items():
        if name in config:
            values[attribute] = copy.deepcopy(config[name])
    values.setdefault("headers", {})
    if task_type == TaskType.DAPR_BINDING:
        values.setdefault("metadata", {})  # an input handler adds to it (`emailTo`, `path`)
    return ScriptObject(**values)
