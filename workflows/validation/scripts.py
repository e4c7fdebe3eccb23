"""Script checks at publish time: every script is present, decodes, compiles in the sandbox,
imports only allowed modules and defines the handler its place in the definition calls."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from instances.engine.errors import Violation
from instances.engine.scripts import (
    DEFAULT_ALLOWED_MODULES,
    ScriptCompileError,
    ScriptError,
    ScriptTextMissing,
    check_imports,
    compile_script,
    forbidden_module_reason,
    script_text,
)
from workflows.documents import ComponentKind, ComponentRef, json_pointer

TASK_LIST_KEYS = frozenset({"onExecutionTasks", "onEntries", "onExits"})


class Resolver(Protocol):
    """Finds referenced components: in the batch being published, then in the registry."""

    def resolve(self, ref: ComponentRef) -> dict[str, Any] | None:
        """The referenced component's document, or None when it does not exist."""
        ...


@dataclass(frozen=True)
class ScriptSite:
    """A script object inside a definition: where it is and what calls it."""

    path: tuple[Any, ...]
    node: dict[str, Any]

    @property
    def pointer(self) -> str:
        """JSON pointer of the script object."""
        return json_pointer(*self.path)

    @property
    def location(self) -> str:
        """How errors name the script: its `location`, or its pointer when it has none."""
        location = self.node.get("location")
        return location if isinstance(location, str) and location else self.pointer

    @property
    def is_task_mapping(self) -> bool:
        """A task's input/output mapping (under onExecutionTasks/onEntries/onExits, or a
        function's `task`)."""
        path = self.path
        return (
            len(path) >= 3
            and path[-1] == "mapping"
            and (path[-3] in TASK_LIST_KEYS or (path[-2] == "task" and path[-3] == "attributes"))
        )


def iter_script_sites(document: Any, kind: str) -> Iterator[ScriptSite]:
    """Every script object in `document`: a dict with `code` plus `location` or `encoding`."""
    if kind == ComponentKind.SCHEMA:
        return

    def walk(node: Any, path: tuple[Any, ...]) -> Iterator[ScriptSite]:
        if isinstance(node, dict):
            if "code" in node and ("location" in node or "encoding" in node):
                yield ScriptSite(path, node)
                return
            for key, value in node.items():
                yield from walk(value, (*path, key))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                yield from walk(value, (*path, index))

    yield from walk(document, ())


def workflow_allowed_modules(document: Any) -> tuple[set[str], list[Violation]]:
    """The modules a workflow's scripts may import, and any allow-list entry that is refused."""
    allowed = set(DEFAULT_ALLOWED_MODULES)
    violations = []
    scripts = document.get("attributes", {}).get("scripts") if isinstance(document, dict) else None
    entries = scripts.get("allowedModules", []) if isinstance(scripts, dict) else []
    for index, module in enumerate(entries if isinstance(entries, list) else []):
        if not isinstance(module, str):
            continue
        reason = forbidden_module_reason(module)
        if reason:
            violations.append(
                Violation(json_pointer("attributes", "scripts", "allowedModules", index), reason)
            )
        else:
            allowed.add(module)
    return allowed, violations


def site_source(site: ScriptSite, resolver: Resolver) -> tuple[str | None, Violation | None]:
    """The script text of a site (REF resolved through the registry), or the reason it has none."""
    code = site.node.get("code")
    if not isinstance(code, str | dict):
        return None, None  # a wrong type is a structural violation, reported there

    def mapping(reference: dict[str, Any]) -> dict[str, Any] | None:
        ref = ComponentRef.from_reference(reference)
        return resolver.resolve(ref) if ref is not None and ref.kind == "mapping" else None

    try:
        return script_text(site.node, mapping), None
    except ScriptTextMissing as exc:
        return None, Violation(json_pointer(*site.path, "code"), str(exc))


def _expected_handlers(site: ScriptSite, resolver: Resolver, document: Any) -> tuple[str, ...]:
    last = site.path[-1] if site.path else None
    if last in ("rule", "timer", "keyExpression"):
        return ("handler",)
    if len(site.path) >= 2 and site.path[-2] == "event":
        return ("handler",)  # an event mapping (instances/events.py calls `handler`)
    if site.path[:2] == ("attributes", "output") or (
        len(site.path) >= 3 and site.path[-3] == "notifications"
    ):
        return ("handler", "output_handler")  # output mapping, notification mapping
    if site.is_task_mapping:
        if _fan_out_config(site, resolver, document) is not None:
            return ("item_input_handler",)
        return ("input_handler", "output_handler")
    return ("handler", "input_handler", "output_handler")


def _fan_out_config(site: ScriptSite, resolver: Resolver, document: Any) -> dict[str, Any] | None:
    # The config of the Fan-Out task (type 21) whose mapping `site` is, else None.
    if not site.is_task_mapping:
        return None
    task_ref = _task_reference_beside(document, site.path)
    task = resolver.resolve(task_ref) if task_ref else None
    attributes = task.get("attributes") if isinstance(task, dict) else None
    if not isinstance(attributes, dict) or str(attributes.get("type")) != "21":
        return None
    config = attributes.get("config")
    return config if isinstance(config, dict) else {}


def _fan_out_selection(config: dict[str, Any], selects: bool, pointer: str) -> Violation | None:
    # Seed 002: exactly one of the task's itemsPath and the mapping's item_selector.
    if selects == ("itemsPath" in config):
        return Violation(
            pointer,
            "a fan-out takes its items from exactly one of the task's itemsPath and the "
            "mapping's item_selector(): " + ("both are given" if selects else "neither is given"),
        )
    return None


def _task_reference_beside(document: Any, path: tuple[Any, ...]) -> ComponentRef | None:
    node = document
    for part in path[:-1]:
        node = node[part]
    return ComponentRef.from_reference(node.get("task")) if isinstance(node, dict) else None


def script_violations(
    document: Any, kind: str, resolver: Resolver, *, extra_allowed: Iterable[str] = ()
) -> list[Violation]:
    """Every script problem in `document`, each at the pointer of the offending field."""
    allowed, violations = workflow_allowed_modules(document)
    allowed.update(extra_allowed)
    for site in iter_script_sites(document, kind):
        if site.node.get("type") == "G" and not site.node.get("code"):
            continue  # a global script is resolved by name at run time
        source, problem = site_source(site, resolver)
        if problem:
            violations.append(problem)
        if source is None:
            continue
        code_pointer = json_pointer(*site.path, "code")
        try:
            compiled = compile_script(source, site.location)
        except ScriptCompileError as exc:
            violations.extend(
                Violation(code_pointer, f"line {line}: {message}" if line else message)
                for line, message in exc.problems
            )
            continue
        local = site.node.get("scripts")
        local_allowed = local.get("allowedModules", []) if isinstance(local, dict) else []
        site_allowed = set(allowed)
        for index, module in enumerate(local_allowed if isinstance(local_allowed, list) else []):
            if not isinstance(module, str):
                continue
            reason = forbidden_module_reason(module)
            if reason:
                pointer = json_pointer(*site.path, "scripts", "allowedModules", index)
                violations.append(Violation(pointer, reason))
            else:
                site_allowed.add(module)
        for refused in check_imports(compiled, site_allowed):
            violations.append(Violation(code_pointer, _describe(refused)))
        if kind == ComponentKind.MAPPING:
            continue  # helper libraries have no handler contract
        expected = _expected_handlers(site, resolver, document)
        if not any(compiled.defines(name) for name in expected):
            names = " or ".join(f"{name}()" for name in expected)
            violations.append(
                Violation(code_pointer, f"{site.location}: script must define {names}")
            )
        fan_out = _fan_out_config(site, resolver, document)
        if fan_out is not None:
            selection = _fan_out_selection(fan_out, compiled.defines("item_selector"), code_pointer)
            if selection is not None:
                violations.append(selection)
    return violations


def _describe(error: ScriptError) -> str:
    return f"line {error.line}: {error.message}" if error.line else error.message
