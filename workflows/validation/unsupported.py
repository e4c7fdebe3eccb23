"""The one table of vNext features this runtime accepts in the format but does not execute yet.

A definition that uses one is refused at publish (400 `App:900006`), with one violation at every
place it is used: "<feature> is not supported by this version". Nothing is accepted and then
silently ignored (DESIGN.md section 9). Each row names the work that will build its feature; that
work deletes the row (and `tests/workflows/test_validation__unsupported.py` keeps the table honest
against the engine's executors).

A field that is present with an empty or neutral value is not a use of its feature: the upstream
exports carry `"errorBoundary": null`, `"roles": []`, `"subFlow": null`, `"extensions": []` and
the like everywhere. Each finder says which values count as a use.

Every finder reads the document defensively: a structurally broken document gets its structural
violations from the JSON Schema and no exception from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Any

from instances.engine.errors import Violation
from workflows.documents import ComponentKind, ComponentRef, json_pointer
from workflows.validation.scripts import Resolver

Path = tuple[str | int, ...]
Finder = Callable[[dict[str, Any], Resolver], Iterator[Path]]

WORKFLOW, TASK, FUNCTION, EXTENSION = (
    ComponentKind.WORKFLOW,
    ComponentKind.TASK,
    ComponentKind.FUNCTION,
    ComponentKind.EXTENSION,
)
# Component kinds whose documents can hold script objects (a schema's body is a JSON Schema).
SCRIPTED_KINDS = frozenset(
    {WORKFLOW, TASK, FUNCTION, EXTENSION, ComponentKind.VIEW, ComponentKind.MAPPING}
)
EVENT_TRIGGER = 3
MASKING = ("mask", "replace")


@dataclass(frozen=True)
class UnsupportedFeature:
    """One row: a feature, where a document uses it, and what will build it."""

    feature: str
    kinds: frozenset[str]
    where: str  # the JSON pointer patterns `find` yields, for people
    find: Finder
    built_by: str

    @property
    def message(self) -> str:
        """The violation message of every use."""
        return f"{self.feature} is not supported by this version"


# --- walking a workflow -------------------------------------------------------------------------


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _items(value: Any, path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    if isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(item, dict):
                yield (*path, index), item


def _attributes(document: dict[str, Any]) -> dict[str, Any]:
    return _object(document.get("attributes"))


def _states(document: dict[str, Any]) -> Iterator[tuple[Path, dict[str, Any]]]:
    yield from _items(_attributes(document).get("states"), ("attributes", "states"))


def _transitions(document: dict[str, Any]) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every transition: start, each state's, shared, cancel, exit, updateData."""
    attributes = _attributes(document)
    if isinstance(attributes.get("startTransition"), dict):
        yield ("attributes", "startTransition"), attributes["startTransition"]
    for path, state in _states(document):
        yield from _items(state.get("transitions"), (*path, "transitions"))
    yield from _items(attributes.get("sharedTransitions"), ("attributes", "sharedTransitions"))
    for name in ("cancel", "exit", "updateData"):
        if isinstance(attributes.get(name), dict):
            yield ("attributes", name), attributes[name]


def _task_references(document: dict[str, Any]) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every onExecutionTasks, onEntries and onExits item."""
    for path, transition in _transitions(document):
        yield from _items(transition.get("onExecutionTasks"), (*path, "onExecutionTasks"))
    for path, state in _states(document):
        for name in ("onEntries", "onExits"):
            yield from _items(state.get(name), (*path, name))


def _view_definitions(document: dict[str, Any]) -> Iterator[tuple[Path, dict[str, Any]]]:
    """The `view` of every state and transition that has one."""
    for path, node in chain(_states(document), _transitions(document)):
        if isinstance(node.get("view"), dict):
            yield (*path, "view"), node["view"]


def _listed(node: dict[str, Any], field: str) -> bool:
    """A non-empty list: `[]` (and null) means "none", the upstream default."""
    value = node.get(field)
    return isinstance(value, list) and bool(value)


# --- finders, one per row -----------------------------------------------------------------------


def _boundary_timeouts(document: dict[str, Any], resolver: Resolver) -> Iterator[Path]:
    """`onTimeout` of a workflow, state or task-level error boundary (`null` is none). The
    vNext runtime documents it as not implemented either."""
    holders = chain(
        [(("attributes",), _attributes(document))], _states(document), _task_references(document)
    )
    for path, node in holders:
        boundary = node.get("errorBoundary")
        if isinstance(boundary, dict) and boundary.get("onTimeout") is not None:
            yield (*path, "errorBoundary", "onTimeout")


def _state_list(field: str) -> Finder:
    """A state field that is a list of rules (notifications, alias, queryRoles); `[]` is none."""

    def find(document: dict[str, Any], resolver: Resolver) -> Iterator[Path]:
        for path, state in _states(document):
            if _listed(state, field):
                yield (*path, field)

    return find


def _schema_rules(document: dict[str, Any], resolver: Resolver) -> Iterator[Path]:
    """Inside a schema component's JSON Schema: `x-encryption` of a type other than `hash`
    (encryption at rest) or hashing with an algorithm other than sha256, and `x-masking` with an
    operator other than `mask` / `replace` (the reads apply those, and sha256 hashing)."""

    def walk(node: Any, path: Path) -> Iterator[Path]:
        if isinstance(node, dict):
            encryption = node.get("x-encryption")
            if isinstance(encryption, dict) and encryption.get("type") != "hash":
                yield (*path, "x-encryption", "type")
            elif isinstance(encryption, dict):
                params = encryption.get("params")
                algorithm = (
                    params.get("algorithm", "sha256") if isinstance(params, dict) else "sha256"
                )
                if str(algorithm).lower() != "sha256":
                    yield (*path, "x-encryption", "params", "algorithm")
            masking = node.get("x-masking")
            if isinstance(masking, dict) and masking.get("operator", "mask") not in MASKING:
                yield (*path, "x-masking", "operator")
            for key, value in node.items():
                if key not in ("x-encryption", "x-masking"):
                    yield from walk(value, (*path, key))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                yield from walk(value, (*path, index))

    yield from walk(_attributes(document).get("schema"), ("attributes", "schema"))


def _workflow_object(field: str) -> Finder:
    """A workflow-level object (output, event); `null` is none."""

    def find(document: dict[str, Any], resolver: Resolver) -> Iterator[Path]:
        if isinstance(_attributes(document).get(field), dict):
            yield ("attributes", field)

    return find


def _event_transitions(document: dict[str, Any], resolver: Resolver) -> Iterator[Path]:
    """A transition with an `event` (it can then be fired by an event), or with triggerType 3 and
    no event (reported at the trigger). `event: null` on a non-event transition is none."""
    for path, transition in _transitions(document):
        if isinstance(transition.get("event"), dict):
            yield (*path, "event")
        elif transition.get("triggerType") == EVENT_TRIGGER:
            yield (*path, "triggerType")


def _extensions(document: dict[str, Any], resolver: Resolver) -> Iterator[Path]:
    """An extension component; a workflow's `extensions`/`features` references; the extension
    names a view definition asks for (`view.extensions`, also in `rules[]` and `default`).
    `[]` is none."""
    if document.get("flow") == "sys-extensions":
        yield ()
        return
    attributes = _attributes(document)
    for field in ("extensions", "features"):
        if _listed(attributes, field):
            yield ("attributes", field)
    for path, view in _view_definitions(document):
        forms = chain(
            [(path, view), ((*path, "default"), _object(view.get("default")))],
            _items(view.get("rules"), (*path, "rules")),
        )
        for form_path, form in forms:
            if _listed(form, "extensions"):
                yield (*form_path, "extensions")


def _view_rules(document: dict[str, Any], resolver: Resolver) -> Iterator[Path]:
    """A view definition in its conditional form (`rules` + `default`): the view function only
    serves the plain `{view, loadData}` form."""
    for path, view in _view_definitions(document):
        if _listed(view, "rules"):
            yield (*path, "rules")


def _functions(document: dict[str, Any], resolver: Resolver) -> Iterator[Path]:
    """A function component, and a workflow's `functions` references (`[]` is none): only the
    built-in state, data, view and schema functions are served."""
    if document.get("flow") == "sys-functions":
        yield ()
    elif _listed(_attributes(document), "functions"):
        yield ("attributes", "functions")


# Values of `timer.reset` meaning "never reset", which is what the runtime does: the workflow
# timeout is an absolute budget from the start (upstream reads the field nowhere either).
NO_RESET = frozenset({"", "never", "none", "false"})


def _timer_resets(document: dict[str, Any], resolver: Resolver) -> Iterator[Path]:
    """`timer.reset` naming a reset strategy (not one of `NO_RESET`), on the workflow timeout
    or on the timeout a SubFlow state's `overrides` gives its child."""
    timeouts: list[tuple[Path, Any]] = [
        (("attributes", "timeout"), _attributes(document).get("timeout"))
    ]
    for path, state in _states(document):
        overrides = _object(_object(state.get("subFlow")).get("overrides"))
        timeouts.append(((*path, "subFlow", "overrides", "timeout"), overrides.get("timeout")))
    for path, timeout in timeouts:
        reset = _object(_object(timeout).get("timer")).get("reset")
        if isinstance(reset, str) and reset.strip().lower() not in NO_RESET:
            yield (*path, "timer", "reset")


def _script_helpers(document: dict[str, Any], resolver: Resolver) -> Iterator[Path]:
    """`scripts.helpers` of the workflow or of any script object (mapping, rule, timer, ...);
    `[]` is none. `allowedModules` is executed; `allowedAssemblies` names .NET assemblies."""

    def walk(node: Any, path: Path) -> Iterator[Path]:
        if isinstance(node, dict):
            scripts = node.get("scripts")
            is_script = bool({"code", "location", "encoding"} & set(node))
            is_holder = is_script or path == ("attributes",)
            if is_holder and isinstance(scripts, dict) and _listed(scripts, "helpers"):
                yield (*path, "scripts", "helpers")
            for key, value in node.items():
                if key != "scripts":
                    yield from walk(value, (*path, key))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                yield from walk(value, (*path, index))

    yield from walk(document, ())


def _subflow_overrides(document: dict[str, Any], resolver: Resolver) -> Iterator[Path]:
    """A SubFlow state's view, transition-role and state-query-role overrides
    (`subFlow.viewOverrides`, `subFlow.overrides.views|transitions|states`); `{}` and null are
    none. `overrides.timeout` is executed."""
    for path, state in _states(document):
        subflow = _object(state.get("subFlow"))
        if _object(subflow.get("viewOverrides")):
            yield (*path, "subFlow", "viewOverrides")
        overrides = _object(subflow.get("overrides"))
        for name in ("views", "transitions", "states"):
            if _object(overrides.get(name)):
                yield (*path, "subFlow", "overrides", name)


def _task_type(task_type: str) -> Finder:
    """A task component of `task_type` (at its `type`), and every task reference of a workflow
    that resolves to one (at its `task`): a task published before this table still counts."""

    def is_of_type(document: Any) -> bool:
        return str(_object(_object(document).get("attributes")).get("type")) == task_type

    def find(document: dict[str, Any], resolver: Resolver) -> Iterator[Path]:
        if document.get("flow") == "sys-tasks":
            if is_of_type(document):
                yield ("attributes", "type")
            return
        for path, reference in _task_references(document):
            ref = ComponentRef.from_reference(reference.get("task"))
            if ref is not None and ref.kind == TASK and is_of_type(resolver.resolve(ref)):
                yield (*path, "task")

    return find


def _task_row(task_type: str, name: str, built_by: str) -> UnsupportedFeature:
    return UnsupportedFeature(
        feature=f"{name} (task type {task_type})",
        kinds=frozenset({TASK, WORKFLOW}),
        where=(
            "task: /attributes/type; workflow: any onExecutionTasks/onEntries/onExits item "
            ".../task that resolves to such a task"
        ),
        find=_task_type(task_type),
        built_by=built_by,
    )


# Task types DESIGN 4.4 says the runtime executes that have no executor yet (each fails with
# `Task:Unsupported` at run time). The Dapr types (1-4, 17, 20) and 5, 9, 16, 18 are not planned:
# they stay accepted and fail at run time with that clear code (DESIGN 4.4).
_TASKS: dict[str, tuple[str, str]] = {
    "10": ("notification task", "notification tasks (DESIGN 4.4)"),
}

STATES = "/attributes/states/{i}"
TRANSITIONS = (
    "/attributes/startTransition, /attributes/states/{i}/transitions/{j}, "
    "/attributes/sharedTransitions/{j}, /attributes/cancel|exit|updateData"
)

UNSUPPORTED: tuple[UnsupportedFeature, ...] = (
    UnsupportedFeature(
        feature="field encryption at rest (x-encryption other than hash) or a masking operator "
        "other than mask/replace",
        kinds=frozenset({ComponentKind.SCHEMA}),
        where="schema: /attributes/schema/.../x-encryption/type, .../x-masking/operator",
        find=_schema_rules,
        built_by="encryption at rest of master-schema fields with managed keys; x-roles, "
        "x-masking mask/replace and x-encryption hash are applied to data reads",
    ),
    UnsupportedFeature(
        feature="error boundary timeout policy (errorBoundary.onTimeout)",
        kinds=frozenset({WORKFLOW}),
        where=(
            "/attributes/errorBoundary/onTimeout, /attributes/states/{i}/errorBoundary/onTimeout, "
            "{transition or state}/onExecutionTasks|onEntries|onExits/{k}/errorBoundary/onTimeout"
        ),
        find=_boundary_timeouts,
        built_by="error-boundary timeout policies (not implemented upstream either; onError rules "
        "already match `Task:Http:Timeout` and `Script:Timeout`)",
    ),
    UnsupportedFeature(
        feature="extension",
        kinds=frozenset({WORKFLOW, EXTENSION}),
        where=(
            "extension component: the document (pointer ''); workflow: /attributes/extensions, "
            "/attributes/features, {state or transition}/view/extensions "
            "(also view/default/extensions, view/rules/{k}/extensions)"
        ),
        find=_extensions,
        built_by="extensions: run sys-extensions tasks into the `extensions` of instance and "
        "data responses",
    ),
    UnsupportedFeature(
        feature="conditional view (view.rules)",
        kinds=frozenset({WORKFLOW}),
        where="{state or transition}/view/rules",
        find=_view_rules,
        built_by="view rules: pick the view whose rule holds, else `default` (vnext-schema "
        "viewDefinition)",
    ),
    UnsupportedFeature(
        feature="custom function",
        kinds=frozenset({WORKFLOW, FUNCTION}),
        where="function component: the document (pointer ''); workflow: /attributes/functions",
        find=_functions,
        built_by="custom functions: GET .../functions/{name} runs a sys-functions task",
    ),
    UnsupportedFeature(
        feature="timer reset (timer.reset)",
        kinds=frozenset({WORKFLOW}),
        where="/attributes/timeout/timer/reset, "
        f"{STATES}/subFlow/overrides/timeout/timer/reset (a value other than never/none/false/"
        "empty)",
        find=_timer_resets,
        built_by="workflow timeout reset strategies (re-arming the timeout)",
    ),
    UnsupportedFeature(
        feature="script helpers (scripts.helpers)",
        kinds=SCRIPTED_KINDS,
        where="/attributes/scripts/helpers, {any script object}/scripts/helpers",
        find=_script_helpers,
        built_by="script helper libraries (sys-mappings) loaded beside a script "
        "(seed 001 'Scripts (Helpers & Allowed Assemblies)')",
    ),
    UnsupportedFeature(
        feature="subflow view and role override",
        kinds=frozenset({WORKFLOW}),
        where=f"{STATES}/subFlow/viewOverrides, {STATES}/subFlow/overrides/views|transitions|"
        "states",
        find=_subflow_overrides,
        built_by="subflow overrides of the child's views and roles, with role checks "
        "(seed 001 SubFlow state; `overrides.timeout` is executed)",
    ),
    *(_task_row(task_type, name, built_by) for task_type, (name, built_by) in _TASKS.items()),
)
UNSUPPORTED_TASK_TYPES = tuple(_TASKS)


def unsupported_violations(document: Any, kind: str, resolver: Resolver) -> list[Violation]:
    """One violation at every place `document` uses a feature of `UNSUPPORTED`."""
    if not isinstance(document, dict):
        return []
    return [
        Violation(json_pointer(*path), row.message)
        for row in UNSUPPORTED
        if kind in row.kinds
        for path in row.find(document, resolver)
    ]
