"""Custom functions and extensions (vNext "Custom Functions", "Extension Management"): a
`sys-functions` or `sys-extensions` component runs its task references through the task runner
(each mapping in the script workers, as in a transition) with the caller's request as the
scripts' context. Nothing they compute is written to the instance: a function answers it, an
extension's output goes into the `extensions` of instance reads.

A function answers the verbs it declares (`verbs`; none declared: every one of
`FUNCTION_VERBS`); a body-taking call's body is the scripts' `context.body`. Its contracts
(`inputSchema`, `outputSchema`, `inputView`, `outputView`) are a component reference or rule
entries chosen like view rules (`contract_choice`). Its cache key and generation may be computed
by expression scripts (`handler(context) -> str`, `expression_value`).

Plain data in, a result out: who may call a function, where its answer is cached and which
extensions a read runs are decided by the adapters (`instances.functions`,
`instances.extensions`)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any

from instances.engine.definition import WorkflowDefinition
from instances.engine.errors import Codes, VNextError
from instances.engine.records import InstanceSnapshot
from instances.engine.script_runner import response_data, script_context
from instances.engine.scripts import ScriptError, ScriptResponse, ScriptUnavailable
from instances.engine.task_types import TaskFailure
from instances.engine.tasks import TaskOutcome, TaskRunner

logger = logging.getLogger("vnext.functions")

# The functions every instance serves itself (`.../functions/state` ...): a custom function of
# one of these names could never be called, so publishing refuses the declaration.
BUILT_IN_FUNCTIONS = frozenset({"state", "data", "view", "schema", "authorize"})

# The verbs a function may declare (vnext-schema `verbs`), in the order `Allow` lists them. A
# function that declares none answers every one of them, as vNext does.
FUNCTION_VERBS = ("GET", "POST", "PATCH", "DELETE")
# The verbs that carry a request body (`context.body`); a GET is answered without one.
BODY_VERBS = frozenset({"POST", "PATCH", "DELETE"})


class FunctionScope(StrEnum):
    """`attributes.scope` of a function: where it may be called."""

    INSTANCE = "I"  # on an instance of a workflow that declares it
    FLOW = "F"  # the same (the workflow-level route without an instance is gone upstream)
    DOMAIN = "D"  # also without an instance: `GET /api/v1/{domain}/functions/{name}`


class ExtensionType(IntEnum):
    """`attributes.type` of an extension: in which workflows it runs, and whether only when a
    client asks for it by name (`?extensions=`)."""

    GLOBAL = 1  # every workflow of its domain, on every read of its scope
    GLOBAL_AND_REQUESTED = 2  # every workflow of its domain, when asked for
    DEFINED_FLOWS = 3  # the workflows that declare it, on every read of its scope
    DEFINED_FLOWS_AND_REQUESTED = 4  # the workflows that declare it, when asked for


class ExtensionScope(IntEnum):
    """`attributes.scope` of an extension: which reads it enriches."""

    GET_INSTANCE = 1  # GET instance, the data function, a sync start/transition answer
    GET_ALL_INSTANCES = 2  # each item of the instance list
    EVERYWHERE = 3  # all of them


class ReadKind(StrEnum):
    """The reads that carry `extensions`."""

    INSTANCE = "instance"  # GET instance, the data function, the sync envelope
    LIST = "list"  # one item of GET .../instances


def variable_name(key: str) -> str:
    """A component key as vNext names its output (`role-matrix-summary` -> `roleMatrixSummary`)."""
    head, *rest = [part for part in re.split(r"[-_.\s]+", key) if part] or [key]
    return head[:1].lower() + head[1:] + "".join(part[:1].upper() + part[1:] for part in rest)


@dataclass(frozen=True)
class FunctionCache:
    """`attributes.cache` of a function (read-through, opt-in): the entry's key (`keyExpression`'s
    value, else `key`, else the function's own), its generation (`generationKeyExpression`'s
    value, else `generationKey`; none: no generation), the Django cache alias it lives in
    (`storeName`; empty: `default`), its lifetime (`ttlInSeconds`; null or not positive: no
    expiry), what a cache failure does (`bypassOnCacheError`: run uncached, the default; else
    fail), and the request headers that vary the entry (exact names and name prefixes,
    case-insensitive)."""

    key: str
    ttl_seconds: int | None
    bypass_on_error: bool
    vary_headers: tuple[str, ...]
    vary_prefixes: tuple[str, ...]
    key_expression: dict[str, Any] | None = None
    generation_key: str = ""
    generation_expression: dict[str, Any] | None = None
    store: str = ""

    @classmethod
    def parse(cls, value: Any, default_key: str) -> FunctionCache | None:
        """The cache settings, or None when the function caches nothing."""
        if not isinstance(value, dict):
            return None
        ttl = value.get("ttlInSeconds")
        positive = isinstance(ttl, int) and not isinstance(ttl, bool) and ttl > 0
        generation = value.get("generationKey")
        store = value.get("storeName")
        return cls(
            key=str(value.get("key") or default_key),
            ttl_seconds=ttl if positive else None,
            bypass_on_error=value.get("bypassOnCacheError") is not False,
            vary_headers=_lower_names(value.get("varyByHeaders")),
            vary_prefixes=_lower_names(value.get("varyByHeaderPrefixes")),
            key_expression=_script(value.get("keyExpression")),
            generation_key=generation if isinstance(generation, str) else "",
            generation_expression=_script(value.get("generationKeyExpression")),
            store=store if isinstance(store, str) else "",
        )

    @property
    def has_generation(self) -> bool:
        """The entries live in a generation (a static or computed generation key)."""
        return bool(self.generation_key) or self.generation_expression is not None

    def variant(self, headers: dict[str, str]) -> list[tuple[str, str]]:
        """The request headers (lower-case names) this entry varies by, sorted."""
        return sorted(
            (name, value)
            for name, value in headers.items()
            if name in self.vary_headers or name.startswith(self.vary_prefixes)
        )


def _script(value: Any) -> dict[str, Any] | None:
    # An expression script object (`{code, location?, encoding?}`); without code: none.
    return value if isinstance(value, dict) and value.get("code") else None


def _lower_names(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(str(name).lower() for name in value if isinstance(name, str) and name)


def _task_references(attributes: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    listed = attributes.get("onExecutionTasks")
    if isinstance(listed, list) and listed:
        return tuple(item for item in listed if isinstance(item, dict))
    single = attributes.get("task")
    return (single,) if isinstance(single, dict) else ()


@dataclass(frozen=True)
class FunctionDef:
    """A published `sys-functions` component, as the runtime reads it."""

    key: str
    domain: str
    version: str
    scope: str
    roles: Any
    raw_response: bool
    tasks: tuple[dict[str, Any], ...]
    output: dict[str, Any] | None
    cache: FunctionCache | None
    declared_verbs: tuple[str, ...] = ()
    input_schema: tuple[ContractEntry, ...] = ()
    output_schema: tuple[ContractEntry, ...] = ()
    input_view: tuple[ContractEntry, ...] = ()
    output_view: tuple[ContractEntry, ...] = ()
    labels: tuple[dict[str, Any], ...] = ()

    @classmethod
    def parse(cls, document: dict[str, Any]) -> FunctionDef:
        """Read a (validated) function document."""
        attributes = document.get("attributes") or {}
        key = str(document.get("key", ""))
        output = attributes.get("output")
        verbs = attributes.get("verbs")
        labels = attributes.get("labels")
        return cls(
            key=key,
            domain=str(document.get("domain", "")),
            version=str(document.get("version", "")),
            scope=str(attributes.get("scope") or FunctionScope.INSTANCE),
            roles=attributes.get("roles"),
            raw_response=attributes.get("rawResponse") is True,
            tasks=_task_references(attributes),
            output=output if isinstance(output, dict) and output.get("code") else None,
            cache=FunctionCache.parse(attributes.get("cache"), key),
            declared_verbs=tuple(
                dict.fromkeys(v.upper() for v in verbs or [] if isinstance(v, str))
            ),
            input_schema=contract_entries(attributes.get("inputSchema"), "schema"),
            output_schema=contract_entries(attributes.get("outputSchema"), "schema"),
            input_view=contract_entries(attributes.get("inputView"), "view"),
            output_view=contract_entries(attributes.get("outputView"), "view"),
            labels=tuple(item for item in labels or [] if isinstance(item, dict)),
        )

    @property
    def variable(self) -> str:
        """The key of a wrapped answer (`{"roleMatrixSummary": ...}`)."""
        return variable_name(self.key)

    @property
    def verbs(self) -> tuple[str, ...]:
        """The verbs it answers, in `FUNCTION_VERBS` order: the declared ones, else all."""
        declared = set(self.declared_verbs)
        return tuple(v for v in FUNCTION_VERBS if not declared or v in declared)

    def answers(self, verb: str) -> bool:
        """It answers `verb` (case-insensitive; HEAD is a GET)."""
        verb = verb.upper()
        return ("GET" if verb == "HEAD" else verb) in self.verbs


@dataclass(frozen=True)
class ContractEntry:
    """One entry of a contract slot: the schema or view component it names, the rule that
    must hold for it to be chosen (None: always), and for a view whether the client should load
    the data with it."""

    reference: dict[str, Any]
    rule: dict[str, Any] | None = None
    load_data: bool = False


def contract_entries(value: Any, kind: str) -> tuple[ContractEntry, ...]:
    """A contract slot (vnext-schema `schemaSlot` / `viewSlot`, `kind` "schema" or "view") as
    its entries in order: a plain reference is one entry without a rule; a list of
    `{rule?, schema|view, loadData?}` or `{schemas|views: [...]}` is one entry each."""
    if isinstance(value, dict) and isinstance(value.get(f"{kind}s"), list):
        value = value[f"{kind}s"]
    if isinstance(value, list):
        entries = []
        for item in value:
            if isinstance(item, dict) and isinstance(item.get(kind), dict):
                rule = item.get("rule")
                entries.append(
                    ContractEntry(
                        item[kind],
                        rule if isinstance(rule, dict) else None,
                        item.get("loadData") is True,
                    )
                )
        return tuple(entries)
    if isinstance(value, dict) and isinstance(value.get("key"), str):
        return (ContractEntry(value),)
    return ()


def choose_contract(
    entries: tuple[ContractEntry, ...], holds: Callable[[dict[str, Any]], bool]
) -> ContractEntry | None:
    """The first entry whose rule `holds` (an entry without a rule always matches), else None."""
    for entry in entries:
        if entry.rule is None or holds(entry.rule):
            return entry
    return None


@dataclass(frozen=True)
class ExtensionDef:
    """A published `sys-extensions` component, as the runtime reads it."""

    key: str
    domain: str
    version: str
    type: int
    scope: int
    task: dict[str, Any]

    @classmethod
    def parse(cls, document: dict[str, Any]) -> ExtensionDef:
        """Read a (validated) extension document."""
        attributes = document.get("attributes") or {}
        task = attributes.get("task")
        return cls(
            key=str(document.get("key", "")),
            domain=str(document.get("domain", "")),
            version=str(document.get("version", "")),
            type=_int(attributes.get("type")),
            scope=_int(attributes.get("scope")),
            task=task if isinstance(task, dict) else {},
        )

    @property
    def is_global(self) -> bool:
        """It runs in every workflow of its domain (types 1 and 2)."""
        return self.type in (ExtensionType.GLOBAL, ExtensionType.GLOBAL_AND_REQUESTED)

    @property
    def on_request(self) -> bool:
        """It runs only when a client names it (types 2 and 4)."""
        return self.type in (
            ExtensionType.GLOBAL_AND_REQUESTED,
            ExtensionType.DEFINED_FLOWS_AND_REQUESTED,
        )

    def serves(self, read: ReadKind) -> bool:
        """Its scope covers `read`."""
        if self.scope == ExtensionScope.EVERYWHERE:
            return True
        if read == ReadKind.LIST:
            return self.scope == ExtensionScope.GET_ALL_INSTANCES
        return self.scope == ExtensionScope.GET_INSTANCE


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class FunctionFailed(Exception):
    """A task or the output script of a function or extension failed: which part, and the
    public code of its failure (`Task:Http:503`, `Script:Timeout`, ...)."""

    def __init__(self, part: str, code: str, message: str) -> None:
        super().__init__(f"{part} failed ({code}): {message}")
        self.part = part
        self.code = code
        self.message = message


@dataclass(frozen=True)
class TaskRun:
    """What the tasks of one call produced: each task's output (its mapping's output handler's
    object, else the task's response data) and standard response, by task key."""

    outputs: dict[str, Any]
    responses: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Request:
    """The request a function or extension runs for: the instance (an empty one for a domain
    function), its workflow (allowed script modules), and what the scripts see of the caller:
    headers, query, and the body a POST, PATCH or DELETE sent (None: no body, `context.body`
    is `{}`)."""

    definition: WorkflowDefinition
    instance: InstanceSnapshot
    headers: dict[str, str]
    query: dict[str, Any]
    configuration: dict[str, Any]
    body: Any = None
    verb: str = "GET"

    def context(self, body: Any = None) -> Any:
        """The scripts' `context` for this request (`body`: instead of the request's)."""
        return script_context(
            self.instance,
            transition_key="",
            body=self.body if body is None else body,
            headers=self.headers,
            query=self.query,
            configuration=self.configuration,
        )


def run_tasks(
    runner: TaskRunner, references: tuple[dict[str, Any], ...], request: Request, phase: str
) -> TaskRun:
    """Run `references` (grouped by `order`; a later task's mapping sees the earlier ones'
    responses in `context.task_responses`). The first failure raises `FunctionFailed`."""
    outcomes: list[TaskOutcome] = []
    responses: dict[str, dict[str, Any]] = {}

    def done(outcome: TaskOutcome) -> None:
        outcomes.append(outcome)
        if outcome.response is not None:
            responses[outcome.key] = outcome.response

    try:
        runner.run(
            list(references),
            phase=phase,
            definition=request.definition,
            instance=request.instance,
            transition_key="",
            transition_id=None,
            task_responses=responses,
            on_done=done,
            headers=request.headers,
            query=request.query,
            body=request.body,
        )
    except TaskFailure as failure:
        part = f"task {failure.task_key or '?'}"
        raise FunctionFailed(part, failure.code, failure.message) from failure
    except (VNextError, ScriptError) as exc:
        raise FunctionFailed("a task mapping", str(exc.code), str(exc)) from exc
    outputs: dict[str, Any] = {}
    for outcome, reference in zip(outcomes, _in_run_order(references), strict=True):
        if _output_handled(runner, reference, request):
            outputs[outcome.key] = outcome.patch
        else:
            outputs[outcome.key] = (outcome.response or {}).get("data")
    return TaskRun(outputs, responses)


def _in_run_order(references: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    # The order `TaskRunner.run` reports outcomes in: by `order`, stable within a group.
    return sorted(references, key=lambda reference: int(reference.get("order") or 1))


def _output_handled(runner: TaskRunner, reference: dict[str, Any], request: Request) -> bool:
    # A mapping with an output handler shapes its task's output (its object); without one, the
    # output is the task's response data.
    mapping = reference.get("mapping")
    if not isinstance(mapping, dict) or not mapping.get("code"):
        return False
    return runner.scripts.load(mapping, request.definition).has("output_handler")


@dataclass(frozen=True)
class FunctionResult:
    """What a function computed: `data`, and for a raw answer what shapes it: the output
    script's own `ScriptResponse` (status, headers) or the single task's status."""

    data: Any
    script_response: ScriptResponse | None = None
    task_status: int | None = None


def function_result(runner: TaskRunner, function: FunctionDef, request: Request) -> FunctionResult:
    """Run `function`: its tasks, then its output script if it has one (`output_handler`, else
    `handler`, with each task's output by task key as `context.body` and their standard
    responses as `context.task_responses`). Without an output script the answer is the single
    task's output (several tasks: each one's by task key)."""
    run = run_tasks(runner, function.tasks, request, phase="function")
    if function.output is None:
        if len(function.tasks) != 1:
            return FunctionResult(run.outputs)
        [(key, data)] = run.outputs.items()
        status = run.responses.get(key, {}).get("status_code")
        return FunctionResult(data, task_status=status if isinstance(status, int) else None)
    try:
        handle = runner.scripts.load(function.output, request.definition)
        name = "output_handler" if handle.has("output_handler") else "handler"
        context = script_context(
            request.instance,
            transition_key="",
            body=run.outputs,
            headers=request.headers,
            query=request.query,
            task_responses=run.responses,
            configuration=request.configuration,
        )
        returned = handle.call(name, context)
    except (ScriptError, VNextError) as exc:
        raise FunctionFailed("the output script", str(exc.code), str(exc)) from exc
    if isinstance(returned, ScriptResponse):
        return FunctionResult(returned.data, script_response=returned)
    return FunctionResult(response_data(returned))


def extension_output(runner: TaskRunner, extension: ExtensionDef, request: Request) -> Any:
    """Run an extension's task: its output (the mapping's output handler's object, else the
    task's response data)."""
    run = run_tasks(runner, (extension.task,), request, phase="extension")
    return next(iter(run.outputs.values()), None)


class ExpressionFailed(Exception):
    """A cache key or generation expression could not give a value: why."""


def expression_value(runner: TaskRunner, node: dict[str, Any], request: Request) -> str:
    """Run an expression script (`cache.keyExpression`, `cache.generationKeyExpression`):
    `handler(context)` in the script workers, with the request's context. Its value is a string
    (an integer is taken as its digits); an empty one means "none". `ExpressionFailed` when the
    script fails or gives anything else."""
    try:
        value = response_data(
            runner.scripts.call(node, request.definition, "handler", request.context())
        )
    except (ScriptError, VNextError) as exc:
        raise ExpressionFailed(f"{exc.code}: {exc}") from exc
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ExpressionFailed(f"handler() gave {type(value).__name__}, not a string")
    return str(value)


def contract_choice(
    runner: TaskRunner,
    entries: tuple[ContractEntry, ...],
    request: Request,
    *,
    slot: str,
    function_key: str,
    body: Any = None,
) -> ContractEntry | None:
    """The entry of a contract slot that serves `request` (`body`: what its rules see as
    `context.body` instead of the request's): rules run in order in the script workers (a rule
    is a condition script, `handler(context) -> bool`); a rule that fails is logged and counts as
    not holding, as vNext does; no worker to run it is the platform's failure (503)."""
    context: Any = None

    def holds(rule: dict[str, Any]) -> bool:
        nonlocal context
        if context is None:
            context = request.context(body)
        try:
            return bool(runner.scripts.call(rule, request.definition, "handler", context))
        except ScriptUnavailable as exc:
            raise VNextError(
                Codes.script(exc.code),
                f"no script worker could evaluate a rule of function {function_key}: {exc}",
            ) from exc
        except (ScriptError, VNextError) as exc:
            logger.warning(
                "a %s rule of function %s failed; the next entry is tried: %s",
                slot,
                function_key,
                exc,
            )
            return False

    return choose_contract(entries, holds)
