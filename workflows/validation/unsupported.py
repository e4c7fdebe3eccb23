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
from typing import Any

from instances.engine.errors import Violation
from workflows.documents import ComponentKind, json_pointer
from workflows.validation.scripts import Resolver

Path = tuple[str | int, ...]
Finder = Callable[[dict[str, Any], Resolver], Iterator[Path]]

WORKFLOW, TASK, FUNCTION, EXTENSION = (
    ComponentKind.WORKFLOW,
    ComponentKind.TASK,
    ComponentKind.FUNCTION,
    ComponentKind.EXTENSION,
)
EVENT_TRIGGER = 3


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


def _listed(node: dict[str, Any], field: str) -> bool:
    """A non-empty list: `[]` (and null) means "none", the upstream default."""
    value = node.get(field)
    return isinstance(value, list) and bool(value)


# --- finders, one per row -----------------------------------------------------------------------


def _state_list(field: str) -> Finder:
    """A state field that is a list of rules (notifications, alias, queryRoles); `[]` is none."""

    def find(document: dict[str, Any], resolver: Resolver) -> Iterator[Path]:
        for path, state in _states(document):
            if _listed(state, field):
                yield (*path, field)

    return find


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


# Function settings the runtime does not execute: the request/response contracts (a GET has no
# body to check, and no function catalog shows them), and the cache key sources and stores a
# Django cache has no use for (Dynamic Expresso expressions, Dapr state stores, generations).
_FUNCTION_CONTRACTS = ("inputSchema", "outputSchema", "inputView", "outputView")
_FUNCTION_CACHE_SOURCES = ("keyExpression", "generationKeyExpression", "generationKey", "storeName")


def _function_settings(document: dict[str, Any], resolver: Resolver) -> Iterator[Path]:
    """On a function component: a `verbs` entry other than GET (functions answer GET), a
    contract (`inputSchema`, `outputSchema`, `inputView`, `outputView`) and a cache key source
    or store (`cache.keyExpression|generationKeyExpression|generationKey|storeName`); null is
    none."""
    if document.get("flow") != "sys-functions":
        return
    attributes = _attributes(document)
    verbs = attributes.get("verbs")
    for index, verb in enumerate(verbs if isinstance(verbs, list) else []):
        if verb != "GET":
            yield ("attributes", "verbs", index)
    for name in _FUNCTION_CONTRACTS:
        if attributes.get(name) is not None:
            yield ("attributes", name)
    cache = _object(attributes.get("cache"))
    for name in _FUNCTION_CACHE_SOURCES:
        if cache.get(name) not in (None, ""):
            yield ("attributes", "cache", name)


# Every task type DESIGN 4.4 says the runtime executes has an executor. The Dapr types (1-4, 17,
# 20) and 5, 9, 16, 18 are not planned: they stay accepted and fail at run time with the clear
# `Task:Unsupported` (DESIGN 4.4).

TRANSITIONS = (
    "/attributes/startTransition, /attributes/states/{i}/transitions/{j}, "
    "/attributes/sharedTransitions/{j}, /attributes/cancel|exit|updateData"
)

UNSUPPORTED: tuple[UnsupportedFeature, ...] = (
    UnsupportedFeature(
        feature="custom function setting (a verb other than GET, an input/output contract, a "
        "cache key expression, generation or store)",
        kinds=frozenset({FUNCTION}),
        where="function: /attributes/verbs/{i}, /attributes/inputSchema|outputSchema|inputView|"
        "outputView, /attributes/cache/keyExpression|generationKeyExpression|generationKey|"
        "storeName",
        find=_function_settings,
        built_by="custom functions called with a body (POST/PATCH/DELETE, inputSchema "
        "validation), a function catalog showing their contracts, cache keys computed by scripts",
    ),
)


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
