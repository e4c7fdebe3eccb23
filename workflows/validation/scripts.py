"""Script checks at publish time: every script is present, decodes, compiles in the sandbox,
imports only allowed modules and declared helpers, and defines the handler its place in the
definition calls. Every helper library a workflow or script declares (`scripts.helpers`) exists,
has a key that makes a module name no other helper of the script takes, and compiles and imports
under the same rules as the scripts that may import it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from instances.engine.cron import static_cron_problems
from instances.engine.errors import Violation
from instances.engine.scripts import (
    DEFAULT_ALLOWED_MODULES,
    SCRIPT_MODULES,
    CompiledScript,
    ScriptCompileError,
    ScriptError,
    ScriptRefused,
    ScriptTextMissing,
    check_imports,
    compile_script,
    forbidden_module_reason,
    helper_key_problem,
    helper_location,
    helper_module_name,
    helper_of_import,
    script_text,
)
from instances.engine.task_types.notification import notification_channels
from instances.status import TaskType
from workflows.documents import ComponentKind, ComponentRef, json_pointer
from workflows.validation.structural import script_object_paths

TASK_LIST_KEYS = frozenset({"onExecutionTasks", "onEntries", "onExits"})
# Where a Python task (type 23) has its code: its config is the script object.
PYTHON_TASK_CODE = ("attributes", "config")


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
    """Every script object in `document`: each object where the vNext schema puts one (a rule,
    a mapping, a timer, a lock key, ...), with or without `code`, and each object shaped like
    one (`code` with `location` or `encoding`) where the schema leaves the place open. A
    schema component's body is a JSON Schema: it holds none."""
    if kind == ComponentKind.SCHEMA:
        return
    found = False
    for path, node in script_object_paths(document, kind):
        found = found or path == PYTHON_TASK_CODE
        yield ScriptSite(path, node)
    config = document.get("attributes", {}).get("config") if _is_python_task(document) else None
    if kind == ComponentKind.TASK and isinstance(config, dict) and not found:
        yield ScriptSite(PYTHON_TASK_CODE, config)  # a Python task's code, without `encoding`


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


SCRIPT_MISSING = "script missing"

# Where a script is an optional mapping: with none, the engine runs the default (a task with its
# own config, the payload merged as sent, ...). The older docs' `{"type": "G"}`, with neither
# code nor location, is that "none". A rule, timer or key expression is never optional.
MAPPING_SITES = frozenset({"mapping", "output", "sourceMapping"})


def _python_twin(location: str) -> str:
    # What import_components reads for a location (workflows/loader.py: script_file_for).
    return location[: -len(".csx")] + ".py" if location.endswith(".csx") else location


def missing_script_message(site: ScriptSite) -> str:
    """Why a site without code is refused, and what to do about it."""
    location = site.node.get("location")
    if isinstance(location, str) and location:
        return (
            f"{SCRIPT_MISSING} ({location} has no code): give `code`, or import the folder with "
            f"`manage.py import_components`, which reads {_python_twin(location)} beside the "
            "JSON file"
        )
    return f"{SCRIPT_MISSING}: give `code` (with `encoding` NAT, B64 or REF)"


def is_platform_mapping(site: ScriptSite) -> bool:
    """A mapping site written `{"type": "G"}` (no code, no location): the engine runs the
    default a missing mapping means."""
    node = site.node
    return (
        bool(site.path)
        and site.path[-1] in MAPPING_SITES
        and node.get("type") == "G"
        and not node.get("code")
        and not node.get("location")
    )


def site_source(site: ScriptSite, resolver: Resolver) -> tuple[str | None, Violation | None]:
    """The script text of a site (REF resolved through the registry), or the reason it has none:
    a site without `code` at the site's pointer, an empty or unusable `code` at the code's."""
    if "code" not in site.node:
        return None, Violation(site.pointer, missing_script_message(site))
    code = site.node["code"]
    if not isinstance(code, str | dict):
        return None, None  # a wrong type is a structural violation, reported there

    def mapping(reference: dict[str, Any]) -> dict[str, Any] | None:
        ref = ComponentRef.from_reference(reference)
        return resolver.resolve(ref) if ref is not None and ref.kind == "mapping" else None

    try:
        return script_text(site.node, mapping), None
    except ScriptTextMissing as exc:
        message = str(exc)
        if message.startswith(SCRIPT_MISSING) and str(site.node.get("encoding")) != "REF":
            message = missing_script_message(site)
        return None, Violation(json_pointer(*site.path, "code"), message)


def _expected_handlers(site: ScriptSite, resolver: Resolver, document: Any) -> tuple[str, ...]:
    last = site.path[-1] if site.path else None
    if site.path == PYTHON_TASK_CODE and _is_python_task(document):
        return ("main",)  # a Python task's code (task type 23)
    if last in ("rule", "timer", "keyExpression", "generationKeyExpression"):
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
        channels = _notification_channels(site, resolver, document)
        if channels is not None:
            # A notification task's mapping shapes its channels' messages; the state channel
            # needs none (an `enrich` only adds headers to it).
            return ("channel_handler",) if set(channels) - {"state"} else ("enrich",)
        return ("input_handler", "output_handler")
    return ("handler", "input_handler", "output_handler")


def _is_python_task(document: Any) -> bool:
    attributes = document.get("attributes") if isinstance(document, dict) else None
    return isinstance(attributes, dict) and str(attributes.get("type")) == TaskType.PYTHON


def _notification_channels(site: ScriptSite, resolver: Resolver, document: Any) -> list[str] | None:
    # The channels of the Notification task (type 10) whose mapping `site` is, else None.
    task_ref = _task_reference_beside(document, site.path)
    task = resolver.resolve(task_ref) if task_ref else None
    attributes = task.get("attributes") if isinstance(task, dict) else None
    if not isinstance(attributes, dict) or str(attributes.get("type")) != TaskType.NOTIFICATION:
        return None
    return notification_channels(attributes.get("config"))


def _fan_out_config(site: ScriptSite, resolver: Resolver, document: Any) -> dict[str, Any] | None:
    # The config of the Fan-Out task (type 21) whose mapping `site` is, else None.
    if not site.is_task_mapping:
        return None
    task_ref = _task_reference_beside(document, site.path)
    task = resolver.resolve(task_ref) if task_ref else None
    attributes = task.get("attributes") if isinstance(task, dict) else None
    if not isinstance(attributes, dict) or str(attributes.get("type")) != TaskType.FAN_OUT:
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


@dataclass(frozen=True)
class DeclaredHelper:
    """A `scripts.helpers` entry: the module name scripts import it by, the component it
    references, where it is declared, and its compiled code (None when it has none)."""

    name: str
    ref: ComponentRef
    path: tuple[Any, ...]
    compiled: CompiledScript | None

    @property
    def pointer(self) -> str:
        """JSON pointer of the entry."""
        return json_pointer(*self.path)


def declared_helpers(
    holder: Any,
    path: tuple[Any, ...],
    resolver: Resolver,
    inherited: dict[str, DeclaredHelper],
    violations: list[Violation],
) -> tuple[dict[str, DeclaredHelper], list[DeclaredHelper]]:
    """The helpers visible where `holder` (the workflow's attributes, or a script object at
    `path`) declares `scripts.helpers` on top of `inherited` (the workflow's), and those it
    declares itself. Each entry's problem (a key that makes no module name, a name another
    helper takes, a missing component, code that does not decode or compile) is appended to
    `violations` at the entry's pointer. A script may declare its workflow's helper again."""
    visible = dict(inherited)
    own: dict[str, DeclaredHelper] = {}
    scripts = holder.get("scripts") if isinstance(holder, dict) else None
    entries = scripts.get("helpers") if isinstance(scripts, dict) else None
    for index, entry in enumerate(entries if isinstance(entries, list) else []):
        entry_path = (*path, "scripts", "helpers", index)
        pointer = json_pointer(*entry_path)
        ref = ComponentRef.from_reference(entry)
        if ref is None or ref.kind != ComponentKind.MAPPING:
            continue  # not a sys-mappings reference: a structural violation, reported there
        problem = helper_key_problem(ref.key)
        if problem is not None:
            violations.append(Violation(pointer, problem))
            continue
        name = helper_module_name(ref.key)
        earlier = visible.get(name)
        if earlier is not None and (name in own or earlier.ref != ref):
            violations.append(
                Violation(
                    pointer,
                    f"helper {ref} would be imported as {name!r}, the name of helper "
                    f"{earlier.ref} declared at {earlier.pointer}",
                )
            )
            continue
        if earlier is not None:
            continue  # the workflow's own helper, declared again by the script
        compiled, problems = _compiled_helper(entry, resolver, pointer)
        violations += problems
        visible[name] = own[name] = DeclaredHelper(name, ref, entry_path, compiled)
    return visible, list(own.values())


def _compiled_helper(
    entry: dict[str, Any], resolver: Resolver, pointer: str
) -> tuple[CompiledScript | None, list[Violation]]:
    # A helper's code compiled as the engine compiles it, or why it cannot be. A missing
    # component is reported by the reference check (semantic.py), at the same pointer.
    location = helper_location(entry)
    ref = ComponentRef.from_reference(entry)
    component = resolver.resolve(ref) if ref is not None else None
    if component is None:
        return None, []
    try:
        source = script_text(
            {"encoding": "REF", "code": entry, "location": location}, lambda _: component
        )
        return compile_script(source, location), []
    except ScriptTextMissing as exc:
        return None, [Violation(pointer, f"helper {location}: {exc}")]
    except ScriptCompileError as exc:
        return None, [
            Violation(pointer, f"helper {location}: " + (f"line {line}: " if line else "") + text)
            for line, text in exc.problems
        ]


def _helper_import_violations(
    helpers: Iterable[DeclaredHelper], allowed: set[str], visible: dict[str, DeclaredHelper]
) -> list[Violation]:
    # A helper may import what the scripts that may import it may: their modules and helpers.
    return [
        Violation(helper.pointer, f"helper {helper.compiled.location}: {_describe(refused)}")
        for helper in helpers
        if helper.compiled is not None
        for refused in check_imports(helper.compiled, allowed, visible)
    ]


def _mapping_component_imports(compiled: CompiledScript) -> list[ScriptRefused]:
    # A sys-mappings component is checked again by every workflow that uses it, against that
    # workflow's allow-list and helpers: here, only what no workflow could allow is refused.
    possible_helpers = {
        name for module, _ in compiled.imports if (name := helper_of_import(module)) is not None
    }
    return check_imports(compiled, SCRIPT_MODULES, possible_helpers)


def _site_allowed(site: ScriptSite, allowed: set[str], violations: list[Violation]) -> set[str]:
    # The workflow's modules plus the script's own `scripts.allowedModules`.
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
    return site_allowed


def script_violations(
    document: Any, kind: str, resolver: Resolver, *, extra_allowed: Iterable[str] = ()
) -> list[Violation]:
    """Every script problem in `document`, each at the pointer of the offending field."""
    allowed, violations = workflow_allowed_modules(document)
    allowed.update(extra_allowed)
    workflow_helpers: dict[str, DeclaredHelper] = {}
    if kind == ComponentKind.WORKFLOW and isinstance(document, dict):
        workflow_helpers, own = declared_helpers(
            document.get("attributes"), ("attributes",), resolver, {}, violations
        )
        violations += _helper_import_violations(own, allowed, workflow_helpers)
    for site in iter_script_sites(document, kind):
        site_allowed = _site_allowed(site, allowed, violations)
        site_helpers, own = declared_helpers(
            site.node, site.path, resolver, workflow_helpers, violations
        )
        violations += _helper_import_violations(own, site_allowed, site_helpers)
        if is_platform_mapping(site):
            continue
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
        if kind == ComponentKind.MAPPING:
            refusals = _mapping_component_imports(compiled)
        else:
            refusals = check_imports(compiled, site_allowed, site_helpers)
        violations.extend(Violation(code_pointer, _describe(refused)) for refused in refusals)
        violations.extend(
            Violation(code_pointer, f"line {line}: {reason}")
            for line, reason in static_cron_problems(source)
        )
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
