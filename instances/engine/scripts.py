"""Workflow scripts at compile time, shared by publish-time validation, the server and the
script workers: source decoding, RestrictedPython compilation (cached by content hash), the
closed list of modules scripts may import, and the errors every layer reports.

Scripts never run in the server process: `instances.engine.script_pool` sends each call to a
worker process (`instances.engine.script_worker`), which runs it with the guards of
`instances.engine.sandbox`.
"""

from __future__ import annotations

import ast
import base64
import binascii
import hashlib
import keyword
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import CodeType
from typing import Any, cast

from RestrictedPython import RestrictingNodeTransformer, compile_restricted_exec

# The closed list of modules a script may ever import, each reviewed: pure computation, no I/O, no
# process or interpreter state, no way to walk attributes by a computed name. A workflow's
# `attributes.scripts.allowedModules` picks from this list; anything else is refused at publish.
# Where a module also holds something unsafe, `MODULE_ATTRIBUTES` narrows what scripts see of it.
SCRIPT_MODULES: frozenset[str] = frozenset(
    {
        "math", "cmath", "datetime", "decimal", "fractions", "re", "json", "statistics",
        "itertools", "functools", "string", "base64", "hashlib", "hmac", "bisect", "heapq",
        "unicodedata", "collections", "uuid",
    }
)  # fmt: skip

# Every workflow's scripts may import these without listing them.
DEFAULT_ALLOWED_MODULES: frozenset[str] = frozenset({"math", "datetime", "decimal", "re", "json"})

# Modules of the closed list of which scripts see only the named attributes:
# - string: `Formatter` walks attributes of its arguments by name (`{0.x.y}`); constants only.
# - collections: `namedtuple` builds classes with exec; `abc` is a module.
# - uuid: `uuid1`/`getnode` read the network interfaces, possibly by running a program.
# - functools: the caches and wrappers, not `singledispatch` registries shared by reference.
MODULE_ATTRIBUTES: dict[str, frozenset[str]] = {
    "string": frozenset(
        {
            "ascii_letters", "ascii_lowercase", "ascii_uppercase", "digits", "hexdigits",
            "octdigits", "punctuation", "printable", "whitespace", "capwords", "Template",
        }
    ),
    "collections": frozenset({"Counter", "OrderedDict", "defaultdict", "deque", "ChainMap"}),
    "uuid": frozenset(
        {
            "UUID", "uuid3", "uuid4", "uuid5", "NAMESPACE_DNS", "NAMESPACE_URL", "NAMESPACE_OID",
            "NAMESPACE_X500",
        }
    ),
    "functools": frozenset(
        {"reduce", "partial", "lru_cache", "cache", "cmp_to_key", "total_ordering", "wraps"}
    ),
}  # fmt: skip

MAX_SOURCE_CHARACTERS = 256 * 1024


class ScriptError(Exception):
    """A script failed to compile, was refused, ran out of time or raised.

    `location` names the script (its `location` field or JSON pointer), `line` the line in it;
    `code` is the public error code a fault of this kind reports.
    """

    kind = "runtime"
    code = "Script:100001"

    def __init__(self, message: str, *, location: str, line: int | None = None) -> None:
        self.message = message
        self.location = location
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.location}, line {self.line}" if self.line else self.location
        return f"{where}: {self.message}"


class ScriptCompileError(ScriptError):
    """The script does not compile, or breaks a sandbox rule visible in its source."""

    kind = "compile"

    def __init__(self, problems: list[tuple[int | None, str]], *, location: str) -> None:
        self.problems = problems
        first_line, first_message = problems[0]
        super().__init__(first_message, location=location, line=first_line)

    def __str__(self) -> str:
        return "; ".join(
            f"{self.location}, line {line}: {message}" if line else f"{self.location}: {message}"
            for line, message in self.problems
        )


class ScriptRefused(ScriptError):
    """The script tried something the sandbox does not allow (an import, a huge allocation)."""

    kind = "refused"


class ScriptTimeout(ScriptError):
    """The script ran past its wall-clock deadline (its worker is replaced if it was stuck)."""

    kind = "timeout"
    code = "Script:Timeout"


class ScriptResourceLimit(ScriptError):
    """The script's worker ran out of memory or died; the worker was replaced."""

    kind = "resource"
    code = "Script:ResourceLimit"


class ScriptUnavailable(ScriptError):
    """No script worker could take the call in time (all busy, or none could be started)."""

    kind = "unavailable"
    code = "Script:Unavailable"


ERROR_KINDS: dict[str, type[ScriptError]] = {
    error.kind: error
    for error in (ScriptError, ScriptRefused, ScriptTimeout, ScriptResourceLimit, ScriptUnavailable)
}


def decode_source(code: str, encoding: str | None) -> str:
    """Return script text from a definition's `code` field (`NAT` plain text or `B64` base64)."""
    encoding = (encoding or "B64").upper()
    if encoding == "NAT":
        return code
    if encoding == "B64":
        try:
            return base64.b64decode(code, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise ValueError(f"code is not valid base64-encoded UTF-8 text ({exc})") from exc
    raise ValueError(f"encoding {encoding!r} cannot be decoded here (REF is resolved first)")


class ScriptTextMissing(ValueError):
    """A script object has no usable source (empty, unresolvable REF, undecodable)."""


def script_text(
    node: dict[str, Any], mapping: Callable[[dict[str, Any]], dict[str, Any] | None]
) -> str:
    """The source of a definition's script object: `code` decoded per `encoding`; for `REF`,
    the code of the `sys-mappings` component `mapping(reference)` returns.

    Raises `ScriptTextMissing` saying why there is none."""
    code = node.get("code")
    encoding = str(node.get("encoding") or "B64").upper()
    if encoding == "REF":
        if not isinstance(code, dict):
            raise ScriptTextMissing("REF code must reference a sys-mappings component")
        component = mapping(code)
        if component is None:
            name = f"mapping:{code.get('domain')}/{code.get('key')}@{code.get('version')}"
            raise ScriptTextMissing(f"referenced mapping {name} does not exist")
        attributes = component.get("attributes") or {}
        code, encoding = attributes.get("code"), str(attributes.get("encoding") or "B64")
    if not isinstance(code, str) or not code.strip():
        location = node.get("location")
        raise ScriptTextMissing(
            "script missing" + (f" ({location} has no code)" if location else "")
        )
    try:
        return decode_source(code, encoding)
    except ValueError as exc:
        raise ScriptTextMissing(str(exc)) from exc


def forbidden_module_reason(module: str) -> str | None:
    """Why `module` can never be imported by a script, or None when it is on the closed list
    (a workflow may then allow it)."""
    if module in SCRIPT_MODULES:
        return None
    if any(part.startswith("_") for part in module.split(".")):
        return f"module {module!r} is private"
    return (
        f"module {module!r} is not one scripts may import "
        f"(the platform's list: {', '.join(sorted(SCRIPT_MODULES))})"
    )


def is_module_allowed(module: str, allowed: Iterable[str]) -> bool:
    """True when `module` is on the closed list and on the workflow's allow-list. Submodules
    (`json.decoder`) are not importable unless listed themselves."""
    return module in SCRIPT_MODULES and module in set(allowed)


# --- helper libraries ----------------------------------------------------------------------------

# The package a script may also import its helpers from: `from helpers import rsa_crypto`.
HELPERS_PACKAGE = "helpers"


def helper_module_name(key: str) -> str:
    """The name scripts import a helper by: its `sys-mappings` key with each `-` written `_`
    (`rsa-crypto` is `import rsa_crypto` or `from helpers import rsa_crypto`)."""
    return key.replace("-", "_")


def helper_name_problem(name: str) -> str | None:
    """Why `name` cannot be a helper's module name, or None. Not an identifier, a keyword, a
    private name, `helpers`, and the name of a standard library module (`os`, `json`, ...) are
    refused: an import of such a name always means the module, never a helper."""
    if not (name.isascii() and name.isidentifier()) or keyword.iskeyword(name):
        return f"{name!r} is not a Python module name"
    if name.startswith("_"):
        return f"{name!r} is private (starts with '_')"
    if name == HELPERS_PACKAGE:
        return f"{name!r} is the package scripts import helpers from"
    if name in sys.stdlib_module_names or name in SCRIPT_MODULES:
        return f"{name!r} is the name of a standard library module"
    return None


def helper_key_problem(key: str) -> str | None:
    """Why a helper with `key` cannot be imported by name, or None (see `helper_module_name`)."""
    name = helper_module_name(key)
    problem = helper_name_problem(name)
    if problem is None:
        return None
    return (
        f"helper key {key!r} cannot be imported: its module name {problem} (a key is imported "
        "with '-' written '_', and must then be a public Python name that is not a standard "
        "library module)"
    )


def helper_location(reference: Mapping[str, Any]) -> str:
    """How errors and compiled code name a helper: `mapping:<domain>/<key>@<version>`."""
    return (
        f"mapping:{reference.get('domain', '')}/{reference.get('key', '')}"
        f"@{reference.get('version', '')}"
    )


def helper_of_import(module: str) -> str | None:
    """The helper name an import statement asks for (`rsa_crypto` for `import rsa_crypto`,
    `import helpers.rsa_crypto` and `from helpers import rsa_crypto`), else None."""
    if module.startswith(HELPERS_PACKAGE + "."):
        return module[len(HELPERS_PACKAGE) + 1 :]
    return module if "." not in module and helper_name_problem(module) is None else None


def import_refusal(
    module: str, allowed: Iterable[str], helpers: Collection[str] = ()
) -> str | None:
    """Why a script (or helper) may not import `module`, or None. `allowed` is its module
    allow-list, `helpers` the names of the helpers declared for it. The publish-time check and
    the worker's import both ask here, so both refuse with the same words."""
    if module.startswith("."):
        return "relative imports are not allowed"
    if module == HELPERS_PACKAGE:
        return None if helpers else "no helpers are declared for this script (scripts.helpers)"
    wanted = helper_of_import(module)
    if wanted is not None and wanted in helpers:
        return None
    if wanted is not None:
        declared = ", ".join(sorted(helpers)) or "none"
        module_too = not module.startswith(HELPERS_PACKAGE + ".")
        return (
            f"import of {wanted!r} is refused: "
            + ("it is not a module scripts may import, and " if module_too else "")
            + f"no helper {wanted!r} is declared for this script (scripts.helpers of the script "
            f"or of its workflow; declared: {declared})"
        )
    if is_module_allowed(module, allowed):
        return None
    return forbidden_module_reason(module) or (
        f"import of {module!r} is not allowed (allowed: {', '.join(sorted(allowed))})"
    )


# --- compilation -------------------------------------------------------------------------------


def _call(name: str, args: list[ast.expr], like: ast.AST) -> ast.Call:
    node = ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=args, keywords=[])
    return ast.fix_missing_locations(ast.copy_location(node, like))


class _SandboxTransformer(RestrictingNodeTransformer):
    """RestrictedPython's policy plus budget checks and size-guarded arithmetic."""

    _GUARDED_OPERATORS = {ast.Mult: "*", ast.Pow: "**", ast.LShift: "<<"}

    def _tick(self, like: ast.AST) -> ast.Expr:
        return ast.fix_missing_locations(
            ast.copy_location(ast.Expr(_call("_tick_", [], like)), like)
        )

    def visit_While(self, node: ast.While) -> Any:
        node = cast(ast.While, super().visit_While(node))
        node.body.insert(0, self._tick(node))
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> Any:
        node = cast(ast.FunctionDef, super().visit_FunctionDef(node))
        node.body.insert(0, self._tick(node))
        return node

    def visit_Lambda(self, node: ast.Lambda) -> Any:
        node = cast(ast.Lambda, super().visit_Lambda(node))
        # `_tick_() or body`: _tick_ returns None, so the lambda still yields its body.
        node.body = ast.copy_location(
            ast.BoolOp(op=ast.Or(), values=[_call("_tick_", [], node), node.body]), node.body
        )
        return node

    def visit_BinOp(self, node: ast.BinOp) -> Any:
        node = cast(ast.BinOp, super().visit_BinOp(node))
        symbol = self._GUARDED_OPERATORS.get(type(node.op))
        if symbol is None:
            return node
        return _call("_binop_", [ast.Constant(symbol), node.left, node.right], node)


@dataclass(frozen=True)
class CompiledScript:
    """A compiled script with what its source shows: imports and the handlers it defines."""

    location: str
    source_hash: str
    code: CodeType
    imports: tuple[tuple[str, int], ...]
    handlers: frozenset[str]

    def defines(self, name: str) -> bool:
        """True when `name` is a module-level function or a method of a module-level class."""
        return name in self.handlers


_cache_lock = threading.Lock()
_compiled_cache: OrderedDict[tuple[str, str], CompiledScript] = OrderedDict()
_CACHE_SIZE = 2048


def source_hash(source: str) -> str:
    """The content hash compiled scripts are cached by."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def compile_script(source: str, location: str) -> CompiledScript:
    """Compile `source` under the sandbox policy, reusing the cached result for the same content.

    Raises `ScriptCompileError` listing every problem found (syntax, dunder names, exec/eval ...).
    """
    key = (source_hash(source), location)
    with _cache_lock:
        cached = _compiled_cache.get(key)
        if cached is not None:
            _compiled_cache.move_to_end(key)
            return cached
    compiled = _compile_uncached(source, location, key[0])
    with _cache_lock:
        _compiled_cache[key] = compiled
        if len(_compiled_cache) > _CACHE_SIZE:
            _compiled_cache.popitem(last=False)
    return compiled


def _compile_uncached(source: str, location: str, digest: str) -> CompiledScript:
    if not source.strip():
        raise ScriptCompileError([(None, "script is empty")], location=location)
    if len(source) > MAX_SOURCE_CHARACTERS:
        raise ScriptCompileError(
            [(None, f"script is longer than {MAX_SOURCE_CHARACTERS:,} characters")],
            location=location,
        )
    try:
        result = compile_restricted_exec(source, filename=location, policy=_SandboxTransformer)
        tree = ast.parse(source, filename=location) if result.code is not None else None
    except (RecursionError, MemoryError, ValueError) as exc:
        # Nesting too deep for the compiler, or a NUL character in the source.
        raise ScriptCompileError(
            [(None, f"script cannot be compiled: {type(exc).__name__}: {exc}")],
            location=location,
        ) from None
    if result.errors or result.code is None or tree is None:
        problems = [_parse_restricted_error(error) for error in result.errors] or [
            (None, "script does not compile")
        ]
        raise ScriptCompileError(problems, location=location)
    return CompiledScript(
        location=location,
        source_hash=digest,
        code=result.code,
        imports=tuple(_imports_of(tree)),
        handlers=frozenset(_handlers_of(tree)),
    )


def _parse_restricted_error(error: str) -> tuple[int | None, str]:
    # RestrictedPython reports "Line 3: message".
    if error.startswith("Line "):
        head, _, message = error.partition(": ")
        number = head[5:]
        if number.isdigit():
            return int(number), message
    return None, error


def _imports_of(tree: ast.Module) -> Iterator[tuple[str, int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module == HELPERS_PACKAGE:
            # `from helpers import a, b` asks for the helpers a and b.
            for alias in node.names:
                yield f"{HELPERS_PACKAGE}.{alias.name}", node.lineno
        elif isinstance(node, ast.ImportFrom):
            yield ("." * node.level) + (node.module or ""), node.lineno


def _handlers_of(tree: ast.Module) -> Iterator[str]:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            yield node.name
        elif isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, ast.FunctionDef):
                    yield member.name


def check_imports(
    compiled: CompiledScript, allowed_modules: Iterable[str], helpers: Collection[str] = ()
) -> list[ScriptRefused]:
    """Every import in the script that neither the allow-list nor its declared `helpers` (their
    module names) admit, one error each."""
    allowed = set(allowed_modules)
    problems = []
    for module, line in compiled.imports:
        reason = import_refusal(module, allowed, helpers)
        if reason is not None:
            problems.append(ScriptRefused(reason, location=compiled.location, line=line))
    return problems


@dataclass(frozen=True)
class ScriptHelper:
    """A helper library resolved for a script: a `sys-mappings` component's code, compiled under
    the same policy as scripts (its location is `helper_location` of its reference), and the
    name the script imports it by."""

    name: str
    source: str
    compiled: CompiledScript


@dataclass
class ScriptResponse:
    """What a handler may return: data to merge, plus optional key, tags, headers, status."""

    data: Any = None
    key: str | None = None
    tags: list[str] | None = None
    headers: dict[str, str] | None = None
    status_code: int | None = None
    _guarded_writes = True


@dataclass(frozen=True)
class CronSchedule:
    """A timer script's recurring answer: fire at each occurrence of the five-field cron
    `expression` in the IANA zone `time_zone` (checked and computed by `engine.cron`)."""

    expression: str
    time_zone: str = "UTC"

    def to_json(self) -> dict[str, str]:
        """The schedule as a timer job's payload and the state function show it."""
        return {"cron": self.expression, "timeZone": self.time_zone}


class TimerSchedule:
    """What timer scripts build their answer with, as vNext's `TimerSchedule` does:
    `TimerSchedule.from_cron("0 9 * * 1-5", "Europe/Istanbul")` (alias `from_cron_expression`),
    `from_duration(timedelta(hours=1))` or `from_duration("PT1H")`, `from_date_time(aware)`
    (alias `from_datetime`) and `immediate()`. A timer may also return those values directly."""

    @staticmethod
    def from_cron(expression: str, time_zone: str = "UTC") -> CronSchedule:
        """Fire at every occurrence of `expression` in `time_zone` (the server checks both)."""
        if not isinstance(expression, str) or not isinstance(time_zone, str):
            raise TypeError("TimerSchedule.from_cron takes an expression and a zone name, as text")
        return CronSchedule(expression, time_zone)

    from_cron_expression = from_cron

    @staticmethod
    def from_duration(duration: Any) -> Any:
        """Fire once, `duration` (a timedelta or ISO 8601 text such as 'PT5M') from now."""
        if isinstance(duration, str):
            return duration
        if not isinstance(duration, timedelta):
            raise TypeError("TimerSchedule.from_duration takes a timedelta or ISO 8601 text")
        return duration

    @staticmethod
    def from_date_time(moment: Any) -> Any:
        """Fire once, at the aware datetime `moment`."""
        if not isinstance(moment, datetime) or moment.tzinfo is None:
            raise TypeError("TimerSchedule.from_date_time takes an aware datetime (UTC)")
        return moment

    from_datetime = from_date_time

    @staticmethod
    def immediate() -> timedelta:
        """Fire as soon as the job runner gets to it."""
        return timedelta(0)
