"""Publish-time checks of custom functions and extensions (vNext "Custom Functions", "Extension
Management") the JSON Schema cannot express: what a workflow declares can be called and run,
and what a function component runs is unambiguous: its contract slots have no entry that could
never be chosen, its cache expressions and contract rules are scripts defining `handler`, and
its cache store is one of this deployment's Django caches. That each referenced component exists
(and is a schema or view where the JSON Schema says so), and that each script object with a
`location` or `encoding` compiles and defines its handler, is checked with every other reference
and script."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.conf import settings

from instances.engine.errors import Violation
from instances.engine.functions import BUILT_IN_FUNCTIONS
from instances.engine.scripts import (
    DEFAULT_ALLOWED_MODULES,
    ScriptCompileError,
    ScriptTextMissing,
    check_imports,
    compile_script,
)
from instances.engine.scripts import script_text as _script_text
from workflows.documents import ComponentKind, json_pointer

Path = tuple[str | int, ...]


def _dicts(value: Any, path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    if isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(item, dict):
                yield (*path, index), item


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def function_and_extension_violations(document: Any, kind: str) -> list[Violation]:
    """The function and extension findings of a workflow or function component."""
    if not isinstance(document, dict):
        return []
    if kind == ComponentKind.WORKFLOW:
        return [*_declared_functions(document), *_declared_extensions(document)]
    if kind == ComponentKind.FUNCTION:
        return [
            *_function_tasks(document),
            *_function_contracts(document),
            *_function_cache(document),
        ]
    return []


def _declared_functions(document: dict[str, Any]) -> Iterator[Violation]:
    """`attributes.functions`: sys-functions references, each key once, none shadowed by a
    built-in function (its route always wins: the custom one could never be called)."""
    seen: set[str] = set()
    attributes = _object(document.get("attributes"))
    for path, reference in _dicts(attributes.get("functions"), ("attributes", "functions")):
        flow = reference.get("flow")
        if isinstance(flow, str) and flow != "sys-functions":
            yield Violation(
                json_pointer(*path, "flow"), f"a function reference names sys-functions, not {flow}"
            )
        key = reference.get("key")
        if not isinstance(key, str):
            continue
        if key in BUILT_IN_FUNCTIONS:
            yield Violation(
                json_pointer(*path, "key"),
                f"{key!r} is a built-in function: a custom function of that name could never "
                "be called",
            )
        elif key in seen:
            yield Violation(
                json_pointer(*path, "key"),
                f"function {key!r} is declared twice: a call by name would be ambiguous",
            )
        seen.add(key)


def _declared_extensions(document: dict[str, Any]) -> Iterator[Violation]:
    """`attributes.extensions` and `features`: sys-extensions references, each key once over
    both lists; and every name a view asks for (`view.extensions`, its default's and rules')
    is one of them (a name is requested by key: the declaration pins its version)."""
    attributes = _object(document.get("attributes"))
    declared: set[str] = set()
    for name in ("extensions", "features"):
        for path, reference in _dicts(attributes.get(name), ("attributes", name)):
            flow = reference.get("flow")
            if isinstance(flow, str) and flow != "sys-extensions":
                yield Violation(
                    json_pointer(*path, "flow"),
                    f"an extension reference names sys-extensions, not {flow}",
                )
            key = reference.get("key")
            if not isinstance(key, str):
                continue
            if key in declared:
                yield Violation(
                    json_pointer(*path, "key"),
                    f"extension {key!r} is declared twice (extensions and features are one list)",
                )
            declared.add(key)
    for path, names in _view_extension_names(attributes):
        for index, value in enumerate(names):
            if isinstance(value, str) and value not in declared:
                yield Violation(
                    json_pointer(*path, index),
                    f"extension {value!r} is not declared in attributes.extensions or "
                    "attributes.features",
                )


def _view_extension_names(attributes: dict[str, Any]) -> Iterator[tuple[Path, list[Any]]]:
    """Every `extensions` list of a state's or transition's view (plain form, default, rules)."""
    holders: list[tuple[Path, dict[str, Any]]] = []
    for path, state in _dicts(attributes.get("states"), ("attributes", "states")):
        holders.append((path, state))
        holders.extend(_dicts(state.get("transitions"), (*path, "transitions")))
    holders.extend(_dicts(attributes.get("sharedTransitions"), ("attributes", "sharedTransitions")))
    for name in ("startTransition", "cancel", "exit", "updateData"):
        if isinstance(attributes.get(name), dict):
            holders.append((("attributes", name), attributes[name]))
    for path, holder in holders:
        view = holder.get("view")
        if not isinstance(view, dict):
            continue
        entries: list[tuple[Path, dict[str, Any]]] = [((*path, "view"), view)]
        if isinstance(view.get("default"), dict):
            entries.append(((*path, "view", "default"), view["default"]))
        entries.extend(_dicts(view.get("rules"), (*path, "view", "rules")))
        for entry_path, entry in entries:
            if isinstance(entry.get("extensions"), list):
                yield (*entry_path, "extensions"), entry["extensions"]


def _function_tasks(document: dict[str, Any]) -> Iterator[Violation]:
    """A function runs `task` or `onExecutionTasks`, not both; and its output script tells its
    tasks' outputs apart by task key, so no task runs twice."""
    attributes = _object(document.get("attributes"))
    listed = attributes.get("onExecutionTasks")
    if isinstance(listed, list) and listed and isinstance(attributes.get("task"), dict):
        yield Violation(
            json_pointer("attributes", "task"),
            "a function runs its task or its onExecutionTasks, not both",
        )
    seen: set[str] = set()
    for path, reference in _dicts(listed, ("attributes", "onExecutionTasks")):
        key = _object(reference.get("task")).get("key")
        if not isinstance(key, str):
            continue
        if key in seen:
            yield Violation(
                json_pointer(*path, "task", "key"),
                f"task {key!r} runs twice: the output script sees each task's output by key",
            )
        seen.add(key)


CONTRACT_SLOTS = {
    "inputSchema": "schema",
    "outputSchema": "schema",
    "inputView": "view",
    "outputView": "view",
}


def _slot_entries(value: Any, kind: str, path: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The rule entries of a contract slot in its list forms (`[...]`, `{schemas|views: [...]}`),
    with their paths; a plain reference has none."""
    if isinstance(value, dict) and isinstance(value.get(f"{kind}s"), list):
        return list(_dicts(value[f"{kind}s"], (*path, f"{kind}s")))
    return list(_dicts(value, path))


def _function_contracts(document: dict[str, Any]) -> Iterator[Violation]:
    """Each rule-entry slot (`inputSchema`, `outputSchema`, `inputView`, `outputView`): the
    first entry without a rule always matches, so no entry may follow it (it could never be
    chosen); each rule is a condition script defining handler()."""
    attributes = _object(document.get("attributes"))
    for name, kind in CONTRACT_SLOTS.items():
        entries = _slot_entries(attributes.get(name), kind, ("attributes", name))
        fallback: Path | None = None
        for path, entry in entries:
            if fallback is not None:
                yield Violation(
                    json_pointer(*path),
                    f"never chosen: the entry at {json_pointer(*fallback)} has no rule and "
                    "always matches (the rule-less fallback comes last)",
                )
                continue
            rule = entry.get("rule")
            if rule is None:
                fallback = path
            elif isinstance(rule, dict):
                yield from _expression_script(rule, (*path, "rule"))


def _function_cache(document: dict[str, Any]) -> Iterator[Violation]:
    """`cache.keyExpression` and `cache.generationKeyExpression` are scripts defining handler()
    (it returns the key, or the generation's name); `cache.storeName` is an alias of the
    deployment's `CACHES` (operators add one per store); `cache.consistency` is Eventual (what
    Django's cache gives), never Strong."""
    cache = _object(_object(document.get("attributes")).get("cache"))
    for name in ("keyExpression", "generationKeyExpression"):
        node = cache.get(name)
        if isinstance(node, dict):
            yield from _expression_script(node, ("attributes", "cache", name))
    if cache.get("consistency") == "Strong":
        # Django's cache gives no read-your-writes across processes (a process-local store, a
        # replicated one): accepting "Strong" would promise what the runtime does not do.
        yield Violation(
            json_pointer("attributes", "cache", "consistency"),
            "Strong consistency is not offered: the function cache is Django's cache, eventual "
            "across processes (use Eventual, the default, or no cache)",
        )
    store = cache.get("storeName")
    if isinstance(store, str) and store and store not in settings.CACHES:
        known = ", ".join(sorted(settings.CACHES))
        yield Violation(
            json_pointer("attributes", "cache", "storeName"),
            f"no cache store {store!r} here: CACHES has {known} (an operator adds a store "
            "as an alias of Django's CACHES)",
        )


def _expression_script(node: dict[str, Any], path: Path) -> Iterator[Violation]:
    """An expression or rule script that is not a script object the script checks reach (no
    `location`, no `encoding`): it still compiles and defines handler(). Dynamic Expresso
    expressions do not run here: a Python handler(context) does."""
    if "location" in node or "encoding" in node or not isinstance(node.get("code"), str):
        return  # checked with every other script (or a structural violation)
    pointer = json_pointer(*path, "code")
    try:
        source = _script_text(node, lambda reference: None)
        compiled = compile_script(source, json_pointer(*path))
    except ScriptTextMissing as exc:
        yield Violation(pointer, str(exc))
        return
    except ScriptCompileError as exc:
        for line, message in exc.problems:
            yield Violation(pointer, f"line {line}: {message}" if line else message)
        return
    for refused in check_imports(compiled, DEFAULT_ALLOWED_MODULES):
        where = f"line {refused.line}: " if refused.line else ""
        yield Violation(pointer, where + refused.message)
    if not compiled.defines("handler"):
        yield Violation(pointer, f"{json_pointer(*path)}: script must define handler()")
