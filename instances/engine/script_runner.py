"""Running a definition's script objects: decode (REF through the registry), compile (cached;
for the handler list and early errors), then call a handler in the script worker pool. Also the
context objects scripts receive (`context.instance.data`, `context.body`, ...).

Scripts never run in this process: each call is a round trip to a worker
(`instances.engine.script_pool`) that gets JSON arguments and answers with a JSON value.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from instances.engine.definition import WorkflowDefinition
from instances.engine.errors import Codes, ErrorCode, VNextError
from instances.engine.ports import Components
from instances.engine.records import InstanceSnapshot
from instances.engine.script_pool import FollowUp, ScriptCall, ScriptReply, script_pool
from instances.engine.script_wire import ScriptObject
from instances.engine.scripts import (
    CompiledScript,
    ScriptError,
    ScriptHelper,
    ScriptResourceLimit,
    ScriptResponse,
    ScriptTextMissing,
    ScriptTimeout,
    ScriptUnavailable,
    compile_script,
    helper_key_problem,
    helper_location,
    helper_module_name,
    script_text,
)

__all__ = [
    "CREDENTIAL_HEADERS",
    "DEFAULT_HEADER_DENY_PATTERNS",
    "HeaderDenyList",
    "ScriptExecutor",
    "ScriptHandle",
    "ScriptObject",
    "ScriptRunner",
    "instance_view",
    "response_data",
    "script_context",
    "script_headers",
    "stopped_code",
]

# Request headers scripts never see (and job rows never store), whatever patterns an operator
# configures: the caller's own credentials.
CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "x-api-key", "proxy-authorization"})
# Names that look like a credential besides (`X-Auth-Token`, `X-Amz-Security-Token`,
# `X-CSRFToken`, `X-Session-Id`, ...): case-insensitive shell patterns, the default of
# `VNEXT["HEADER_DENY_PATTERNS"]`.
DEFAULT_HEADER_DENY_PATTERNS = (
    "*auth*",
    "*token*",
    "*secret*",
    "*session*",
    "*csrf*",
    "*key*",
    "*cookie*",
)


class HeaderDenyList:
    """Request header names kept from scripts and job rows: the credential headers and every
    name matching one of `patterns` (`fnmatch` patterns, case-insensitive)."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(p.strip().lower() for p in patterns if p and p.strip())
        expression = "|".join(fnmatch.translate(p) for p in self.patterns)
        self._matches = re.compile(expression).match if expression else None

    @classmethod
    def default(cls) -> HeaderDenyList:
        """The list of `DEFAULT_HEADER_DENY_PATTERNS`."""
        return _DEFAULT_DENY_LIST

    def denies(self, name: str) -> bool:
        """True when the header `name` is kept back."""
        lowered = name.lower()
        return lowered in CREDENTIAL_HEADERS or bool(self._matches and self._matches(lowered))

    def strip(self, headers: Mapping[str, str] | None) -> dict[str, str]:
        """`headers` with lower-case names, without the ones this list denies."""
        return {k.lower(): v for k, v in (headers or {}).items() if not self.denies(k)}


_DEFAULT_DENY_LIST = HeaderDenyList(DEFAULT_HEADER_DENY_PATTERNS)


def script_headers(
    headers: Mapping[str, str] | None, deny: HeaderDenyList | None = None
) -> dict[str, str]:
    """A request's headers (lower-case names) as scripts see them: without credentials or
    anything `deny` (default: `DEFAULT_HEADER_DENY_PATTERNS`) keeps back."""
    return (deny or _DEFAULT_DENY_LIST).strip(headers)


class ScriptExecutor(Protocol):
    """Runs one script call somewhere isolated (the worker pool in production). A script
    gets copies of the call's arguments: the context holds the engine's own instance data and
    request body (the pool copies them by sending them as JSON)."""

    def run(self, call: ScriptCall) -> ScriptReply:
        """Run `call`; raise the `ScriptError` it ends with."""
        ...


@runtime_checkable
class BatchScriptExecutor(ScriptExecutor, Protocol):
    """An executor that also runs several calls in one round trip (the worker pool)."""

    def run_batch(
        self, calls: Sequence[ScriptCall], *, chain: int | None = None, until_true: bool = False
    ) -> list[ScriptReply | ScriptError]:
        """Run `calls` in order; each one's reply or the `ScriptError` it ended with."""
        ...


def instance_view(instance: InstanceSnapshot) -> ScriptObject:
    """`context.instance`: id, key, data, data_version (`"1.0.2"`), state, status, domain,
    flow, version. The data is the instance's own, not a copy: what crosses to a
    worker is a copy (JSON), so no script can change it (see `ScriptExecutor`)."""
    return ScriptObject(
        id=str(instance.id),
        key=instance.key,
        data=instance.data,
        data_version=instance.data_version_text,
        state=instance.current_state,
        status=str(instance.status),
        domain=instance.domain,
        flow=instance.workflow_key,
        version=instance.workflow_version,
        tags=list(instance.tags),
    )


def script_context(
    instance: InstanceSnapshot,
    *,
    transition_key: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    query: dict[str, Any] | None = None,
    task_responses: dict[str, Any] | None = None,
    event_payload: Any = None,
    configuration: dict[str, Any] | None = None,
) -> ScriptObject:
    """The `context` argument of every handler. `configuration` holds the values the operator
    chose to show scripts (`VNEXT_SCRIPT_CONFIGURATION`), never settings or secrets. Like the
    data, `body` is the request's own: only copies of both reach a script."""
    return ScriptObject(
        instance=instance_view(instance),
        body=body if body is not None else {},
        headers=dict(headers or {}),
        query=dict(query or {}),
        transition=ScriptObject(key=transition_key),
        task_responses=dict(task_responses or {}),
        event_payload=event_payload,
        configuration=dict(configuration or {}),
    )


def stopped_code(exc: ScriptError, default: ErrorCode) -> ErrorCode:
    """The code of a failed handler call: a script the platform had to stop (deadline, memory,
    no worker) keeps its own code, so an error boundary can tell it from a handler that
    raised (`default`)."""
    if isinstance(exc, ScriptTimeout | ScriptResourceLimit | ScriptUnavailable):
        return Codes.script(exc.code)
    return default


def response_data(value: Any) -> Any:
    """The data part of what a handler returned: a `ScriptResponse`'s `data`, else the value."""
    return value.data if isinstance(value, ScriptResponse) else value


@dataclass
class ScriptHandle:
    """A definition's script ready to call: its source, the modules it may import, the helper
    libraries it may import and the handlers it defines."""

    runner: ScriptRunner
    compiled: CompiledScript
    source: str
    allowed_modules: frozenset[str]
    helpers: tuple[ScriptHelper, ...] = ()

    def has(self, name: str) -> bool:
        """True when the script provides handler `name` (a function or a method of its class)."""
        return self.compiled.defines(name)

    def call(self, name: str, *args: Any, updates: tuple[int, ...] = ()) -> Any:
        """Call handler `name` with `args` in a worker and return its value. The context objects
        at the positions in `updates` take the attribute values the handler left them with."""
        return self._exchange(name, args, updates, None).value

    def call_then(
        self, name: str, *args: Any, updates: tuple[int, ...] = (), then: FollowUp
    ) -> ScriptReply:
        """`call`, then the follow-up handler `then` in the same worker round trip. The reply
        holds the first handler's value, and the follow-up's value or the `ScriptError` it
        ended with (the first handler's error is raised, and no follow-up runs)."""
        if not self.has(then.handler):
            raise ScriptError(
                f"the script defines no {then.handler!r} handler", location=self.compiled.location
            )
        return self._exchange(name, args, updates, then)

    def prepare(
        self,
        name: str,
        *args: Any,
        updates: tuple[int, ...] = (),
        then: FollowUp | None = None,
        patch: str = "",
    ) -> ScriptCall:
        """The call of handler `name` with `args` (and follow-up `then`), to run with others
        in one round trip (`ScriptRunner.run_batch`); `patch` as in `ScriptCall.patch`."""
        for handler in (name, then.handler if then else name):
            if not self.has(handler):
                raise ScriptError(
                    f"the script defines no {handler!r} handler", location=self.compiled.location
                )
        return ScriptCall(
            source=self.source,
            location=self.compiled.location,
            handler=name,
            args=args,
            allowed_modules=self.allowed_modules,
            timeout_seconds=self.runner.timeout_seconds,
            return_arguments=updates,
            digest=self.compiled.source_hash,
            then=then,
            helpers=self.helpers,
            patch=patch,
        )

    def _exchange(
        self, name: str, args: tuple[Any, ...], updates: tuple[int, ...], then: FollowUp | None
    ) -> ScriptReply:
        call = self.prepare(name, *args, updates=updates, then=then)
        reply = self.runner.executor.run(call)
        apply_updates(call, reply)
        return reply


def apply_updates(call: ScriptCall, reply: ScriptReply) -> None:
    """Give the context objects of `call` at its `return_arguments` the attribute values the
    handler left them with."""
    for position, state in zip(call.return_arguments, reply.arguments, strict=False):
        target = call.args[position]
        if isinstance(target, ScriptObject) and isinstance(state, dict):
            vars(target).clear()
            vars(target).update(_plain_attributes(state))


def _is_rule(check: Any) -> bool:
    # A rule script of `ScriptRunner.first_holding`: a script object with code.
    return isinstance(check, dict) and bool(check.get("code"))


def _helper_references(scripts: Any) -> list[dict[str, Any]]:
    """The `helpers` references of a `scripts` object (`{helpers, allowedModules, ...}`)."""
    entries = scripts.get("helpers") if isinstance(scripts, dict) else None
    return [entry for entry in entries or () if isinstance(entry, dict)]


def _plain_attributes(state: dict[str, Any]) -> dict[str, Any]:
    # What a script left on a context object comes back as data: a name that would shadow the
    # object's own methods (`get`) or reach its internals (`_...`) is dropped.
    return {
        name: value
        for name, value in state.items()
        if not name.startswith("_") and not hasattr(ScriptObject, name)
    }


@dataclass
class ScriptRunner:
    """Loads definition script objects and calls their handlers through a `ScriptExecutor`."""

    components: Components
    timeout_seconds: float = 2.0
    script_executor: ScriptExecutor | None = None

    @property
    def executor(self) -> ScriptExecutor:
        """The executor calls go to: the one given, else the process-wide worker pool."""
        return self.script_executor or script_pool()

    def load(self, node: dict[str, Any], definition: WorkflowDefinition) -> ScriptHandle:
        """Decode and compile (cached by content) a script object of `definition`."""
        source = self._source(node)
        location = str(node.get("location") or f"{definition.key}:script")
        compiled = compile_script(source, location)
        local = node.get("scripts") if isinstance(node.get("scripts"), dict) else {}
        extra = frozenset(m for m in (local or {}).get("allowedModules", []) if isinstance(m, str))
        # The workflow's helpers (`attributes.scripts.helpers`), then the script's own.
        workflow_scripts = definition.attributes.get("scripts")
        references = [*_helper_references(workflow_scripts), *_helper_references(local)]
        helpers = self._helpers(references, definition) if references else ()
        return ScriptHandle(self, compiled, source, definition.allowed_modules | extra, helpers)

    @property
    def batches(self) -> bool:
        """True when the executor runs a batch in one round trip, `chain` included."""
        return isinstance(self.executor, BatchScriptExecutor)

    def run_batch(
        self, calls: list[ScriptCall], *, chain: int | None = None, until_true: bool = False
    ) -> list[ScriptReply | ScriptError]:
        """Run `calls` in one worker round trip (see `ScriptPool.run_batch`), each call's
        reply or error; an executor that cannot batch (see `batches`) runs them one by one
        (`chain` needs one that can: a `ValueError` otherwise)."""
        executor = self.executor
        if isinstance(executor, BatchScriptExecutor):
            results = executor.run_batch(calls, chain=chain, until_true=until_true)
        elif chain is not None:
            raise ValueError("chained calls need an executor that batches (`batches`)")
        else:
            results = []
            for call in calls:
                try:
                    results.append(executor.run(call))
                except ScriptError as exc:
                    results.append(exc)
                last = results[-1]
                if until_true and (isinstance(last, ScriptError) or last.value):
                    break
        for call, result in zip(calls, results, strict=False):  # until_true: fewer results
            if isinstance(result, ScriptReply):
                apply_updates(call, result)
        return results

    def first_holding(
        self, checks: list[Any], definition: WorkflowDefinition, context: ScriptObject
    ) -> int | None:
        """The index of the first of `checks` that holds, None when none does: a rule script
        (a node with `code`) holds when its `handler(context)` returns a true value, `True`
        holds, anything else does not. The rules before the first plain true are asked in order, in
        one worker round trip, the context encoded once; the error of a rule that fails
        before one holds is raised."""
        settled = next((i for i, check in enumerate(checks) if check is True), None)
        before = len(checks) if settled is None else settled
        rules: list[int] = []
        calls: list[ScriptCall] = []
        broken: ScriptError | VNextError | None = None
        for index in range(before):
            if not _is_rule(checks[index]):
                continue
            try:
                calls.append(self.load(checks[index], definition).prepare("handler", context))
            except (ScriptError, VNextError) as exc:
                # A rule that does not load fails only when it is reached: the rules before it
                # are asked first, and one of them may hold.
                broken = exc
                break
            rules.append(index)
        for index, result in zip(rules, self.run_batch(calls, until_true=True), strict=False):
            if isinstance(result, ScriptError):
                raise result
            if result.value:
                return index
        if broken is not None:
            raise broken
        return settled

    def call(
        self, node: dict[str, Any], definition: WorkflowDefinition, handler: str, *args: Any
    ) -> Any:
        """Load the script and call `handler(*args)`."""
        return self.load(node, definition).call(handler, *args)

    def _helpers(
        self, references: list[dict[str, Any]], definition: WorkflowDefinition
    ) -> tuple[ScriptHelper, ...]:
        """The helper libraries `references` name (the workflow's, then the script's own),
        each resolved at the exact version referenced (published versions never change) and
        compiled; kept with the definition."""
        memo_key = "script-helpers:" + "|".join(helper_location(ref) for ref in references)
        cached = definition.memo.get(memo_key)
        if cached is not None:
            return tuple(cached)
        helpers: dict[str, ScriptHelper] = {}
        for reference in references:
            location = helper_location(reference)
            key = str(reference.get("key", ""))
            problem = helper_key_problem(key)
            if problem is not None:
                raise VNextError(Codes.SCRIPT_FAILED, problem)
            name = helper_module_name(key)
            taken = helpers.get(name)
            if taken is not None:
                if taken.compiled.location == location:
                    continue  # the same helper, declared by the workflow and by the script
                raise VNextError(
                    Codes.SCRIPT_FAILED,
                    f"helpers {taken.compiled.location} and {location} are both imported as "
                    f"{name!r}",
                )
            source = self._source({"encoding": "REF", "code": reference, "location": location})
            helpers[name] = ScriptHelper(name, source, compile_script(source, location))
        resolved = tuple(helpers.values())
        definition.memo[memo_key] = resolved
        return resolved

    def _source(self, node: dict[str, Any]) -> str:
        try:
            return script_text(node, lambda ref: self.components.component("mapping", ref))
        except ScriptTextMissing as exc:
            raise VNextError(Codes.SCRIPT_FAILED, str(exc)) from exc
