"""The script sandbox: compile, check and run workflow authors' Python scripts.

Scripts are compiled with RestrictedPython (no dunder access, no exec/eval), imports pass an
allow-list, every loop iteration and function call checks a wall-clock budget, and operations that
could allocate without bound (`*`, `**`, `<<`, `range`, padding methods) are size-checked first.
Compiled code is cached by content hash. One place runs scripts: `Sandbox`.
"""

from __future__ import annotations

import ast
import base64
import binascii
import builtins
import hashlib
import logging
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import CodeType, ModuleType
from typing import Any, cast

from RestrictedPython import RestrictingNodeTransformer, compile_restricted_exec, safe_builtins
from RestrictedPython.Eval import default_guarded_getitem
from RestrictedPython.Guards import (
    full_write_guard,
    guarded_iter_unpack_sequence,
    guarded_unpack_sequence,
)
from RestrictedPython.PrintCollector import PrintCollector

logger = logging.getLogger("vnext.scripts")

DEFAULT_ALLOWED_MODULES: frozenset[str] = frozenset({"math", "datetime", "decimal", "re", "json"})

# Modules that reach the interpreter, the OS, the network or the sandbox's own guards. They stay
# refused even when a workflow lists them in `allowedModules`: an allow-list entry is a request,
# not an override of the sandbox.
FORBIDDEN_MODULES: frozenset[str] = frozenset(
    {
        "os", "sys", "subprocess", "shutil", "socket", "importlib", "builtins", "ctypes", "io",
        "pathlib", "pickle", "marshal", "gc", "inspect", "types", "threading", "multiprocessing",
        "signal", "code", "codeop", "runpy", "pty", "tempfile", "glob", "fcntl", "resource",
        "posix", "nt", "asyncio", "ssl", "select", "selectors", "mmap", "sqlite3", "zipimport",
        "pkgutil", "site", "sysconfig", "operator", "codecs", "ast", "dis", "traceback", "weakref",
        "copyreg", "linecache", "tracemalloc", "faulthandler", "atexit", "http", "urllib",
        "ftplib", "smtplib", "telnetlib", "concurrent", "platform", "shelve", "dbm", "zipfile",
        "tarfile", "webbrowser", "pdb", "bdb", "trace", "cProfile", "profile", "timeit",
        "RestrictedPython", "django", "instances", "workflows", "vnext", "locks",
    }
)  # fmt: skip

MAX_SEQUENCE_LENGTH = 10_000_000
MAX_INTEGER_BITS = 1_000_000
SCRIPT_ENCODINGS = ("NAT", "B64")


class ScriptError(Exception):
    """A script failed to compile, was refused, ran out of time or raised.

    `location` names the script (its `location` field or JSON pointer), `line` the line in it.
    """

    kind = "runtime"

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
    """The script ran past its wall-clock budget."""

    kind = "timeout"


class _BudgetExpired(BaseException):
    # BaseException, so a script's `except Exception:` cannot swallow the time limit.
    pass


class _SizeRefused(BaseException):
    pass


class _Refusal(ImportError):
    # Raised inside a script for a refused import or call; reported as `ScriptRefused`.
    pass


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
    """Why `module` can never be imported by a script, or None when an allow-list may admit it."""
    top = module.split(".")[0]
    if top.startswith("_") or any(part.startswith("_") for part in module.split(".")):
        return f"module {module!r} is private"
    if top in FORBIDDEN_MODULES or module in FORBIDDEN_MODULES:
        return f"module {module!r} is never allowed in scripts"
    return None


def is_module_allowed(module: str, allowed: Iterable[str]) -> bool:
    """True when `module` (or the package it belongs to) is on the allow-list and not forbidden."""
    if forbidden_module_reason(module):
        return False
    allowed_set = set(allowed)
    parts = module.split(".")
    return any(".".join(parts[:i]) in allowed_set for i in range(1, len(parts) + 1))


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
    result = compile_restricted_exec(source, filename=location, policy=_SandboxTransformer)
    if result.errors or result.code is None:
        problems = [_parse_restricted_error(error) for error in result.errors] or [
            (None, "script does not compile")
        ]
        raise ScriptCompileError(problems, location=location)
    tree = ast.parse(source, filename=location)
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


def check_imports(compiled: CompiledScript, allowed_modules: Iterable[str]) -> list[ScriptRefused]:
    """Every import in the script that the allow-list does not admit, one error each."""
    allowed = set(allowed_modules)
    problems = []
    for module, line in compiled.imports:
        if module.startswith("."):
            reason = "relative imports are not allowed"
        elif is_module_allowed(module, allowed):
            continue
        else:
            reason = forbidden_module_reason(module) or (
                f"import of {module!r} is not allowed (allowed: {', '.join(sorted(allowed))})"
            )
        problems.append(ScriptRefused(reason, location=compiled.location, line=line))
    return problems


# --- helpers scripts get without importing ----------------------------------------------------


@dataclass
class ScriptResponse:
    """What a handler may return: data to merge, plus optional key, tags, headers, status."""

    data: Any = None
    key: str | None = None
    tags: list[str] | None = None
    headers: dict[str, str] | None = None
    status_code: int | None = None
    _guarded_writes = True


_MISSING = object()


def _step(obj: Any, part: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(part, _MISSING)
    if isinstance(obj, list | tuple) and part.lstrip("-").isdigit():
        index = int(part)
        return obj[index] if -len(obj) <= index < len(obj) else _MISSING
    if part.startswith("_"):
        return _MISSING
    return getattr(obj, part, _MISSING)


def script_get(obj: Any, path: str, default: Any = None) -> Any:
    """`get(context.instance.data, "customer.address.city", default)` for scripts."""
    current = obj
    for part in path.split("."):
        current = _step(current, part)
        if current is _MISSING or current is None:
            return default
    return current


def script_has(obj: Any, path: str) -> bool:
    """True when `path` resolves to a value (None counts as present)."""
    current = obj
    for part in path.split("."):
        current = _step(current, part)
        if current is _MISSING:
            return False
    return True


def script_as_list(value: Any) -> list[Any]:
    """None -> [], a list or tuple -> a list of it, anything else -> [value]."""
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return list(value)
    return [value]


class _ScriptLog:
    """The `log` object scripts get: `log.info("...")`, `log.warning(...)`, `log.error(...)`."""

    _guarded_writes = True

    def __init__(self, location: str) -> None:
        self._location = location

    def _emit(self, level: int, message: Any, *args: Any) -> None:
        logger.log(level, "[%s] " + str(message), self._location, *args)

    def debug(self, message: Any, *args: Any) -> None:
        self._emit(logging.DEBUG, message, *args)

    def info(self, message: Any, *args: Any) -> None:
        self._emit(logging.INFO, message, *args)

    def warning(self, message: Any, *args: Any) -> None:
        self._emit(logging.WARNING, message, *args)

    def error(self, message: Any, *args: Any) -> None:
        self._emit(logging.ERROR, message, *args)

    def __call__(self, message: Any, *args: Any) -> None:
        self.info(message, *args)


class _ModuleProxy:
    """An allowed module as scripts see it: public attributes only, no reaching other modules."""

    def __init__(self, module: ModuleType, allowed: frozenset[str]) -> None:
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "_allowed", allowed)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(f"module attribute {name!r} is private")
        value = getattr(self._module, name)
        if isinstance(value, ModuleType):
            if not is_module_allowed(value.__name__, self._allowed):
                raise AttributeError(f"module {value.__name__!r} is not allowed in scripts")
            return _ModuleProxy(value, self._allowed)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("modules are read-only in scripts")

    def __repr__(self) -> str:
        return f"<module {self._module.__name__!r} (sandboxed)>"


class _ScriptClassMeta(type):
    """Metaclass of classes defined by scripts: their instances accept attribute writes."""

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> Any:
        namespace["_guarded_writes"] = True
        return super().__new__(mcs, name, bases, namespace)


class _LoggingPrint(PrintCollector):
    """`print()` in a script goes to the log, not to the server's stdout."""

    def _call_print(self, *objects: Any, **kwargs: Any) -> None:
        logger.info("script print: %s", " ".join(str(item) for item in objects))


# --- running ----------------------------------------------------------------------------------


@dataclass
class _Budget:
    """The wall-clock deadline of the current call; once expired it stays expired."""

    seconds: float
    deadline: float = 0.0
    expired: bool = False

    def start(self) -> None:
        self.deadline = time.monotonic() + self.seconds
        self.expired = False

    def tick(self) -> None:
        if self.expired or time.monotonic() > self.deadline:
            self.expired = True
            raise _BudgetExpired()


_PADDING_METHODS = frozenset({"ljust", "rjust", "center", "zfill", "expandtabs"})


def _check_length(length: int) -> None:
    if length > MAX_SEQUENCE_LENGTH:
        raise _SizeRefused(
            f"result of {length:,} items exceeds the sandbox limit of {MAX_SEQUENCE_LENGTH:,}"
        )


def _guarded_binop(symbol: str, left: Any, right: Any) -> Any:
    if symbol == "*":
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, str | bytes | list | tuple) and isinstance(count, int):
                _check_length(len(seq) * max(count, 0))
        return left * right
    if symbol == "**":
        # The result has about bit_length(left) * right bits.
        if (
            isinstance(left, int)
            and isinstance(right, int)
            and abs(left) > 1
            and max(abs(left).bit_length() - 1, 1) * right > MAX_INTEGER_BITS
        ):
            raise _SizeRefused(f"{left} ** {right} exceeds the sandbox integer limit")
        return left**right
    # "<<"
    if isinstance(left, int) and isinstance(right, int) and right > MAX_INTEGER_BITS:
        raise _SizeRefused(f"{left} << {right} exceeds the sandbox integer limit")
    return left << right


_INPLACE = {
    "+=": lambda a, b: a + b,
    "-=": lambda a, b: a - b,
    "/=": lambda a, b: a / b,
    "//=": lambda a, b: a // b,
    "%=": lambda a, b: a % b,
    "&=": lambda a, b: a & b,
    "|=": lambda a, b: a | b,
    "^=": lambda a, b: a ^ b,
    ">>=": lambda a, b: a >> b,
    "@=": lambda a, b: a @ b,
}


def _guarded_inplace(op: str, left: Any, right: Any) -> Any:
    if op in ("*=", "**=", "<<="):
        return _guarded_binop(op[:-1], left, right)
    if op == "+=" and isinstance(left, str | bytes | list | tuple) and hasattr(right, "__len__"):
        _check_length(len(left) + len(right))
    return _INPLACE[op](left, right)


def _guarded_range(*args: int) -> range:
    result = range(*args)
    _check_length(len(result))
    return result


def _guarded_pow(base: Any, exponent: Any, modulo: Any = None) -> Any:
    if modulo is not None:
        return pow(base, exponent, modulo)
    return _guarded_binop("**", base, exponent)


def _guarded_getattr(obj: Any, name: str, *default: Any) -> Any:
    if not isinstance(name, str):
        raise TypeError("attribute name must be a string")
    if name.startswith("_"):
        raise AttributeError(f'"{name}" is an invalid attribute name because it starts with "_"')
    if isinstance(obj, str | bytes) and name in ("format", "format_map"):
        # str.format can reach attributes of its arguments ("{0.__class__}"): refused.
        raise _Refusal(f"str.{name}() is not allowed in scripts; use f-strings")
    value = getattr(obj, name, *default)
    if name in _PADDING_METHODS and isinstance(obj, str | bytes):

        def padded(width: int, *rest: Any) -> Any:
            _check_length(width if name != "expandtabs" else len(obj) * max(width, 1))
            return value(width, *rest)

        return padded
    return value


def _guarded_hasattr(obj: Any, name: str) -> bool:
    if not isinstance(name, str) or name.startswith("_"):
        return False
    return hasattr(obj, name)


def _apply(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return function(*args, **kwargs)


_EXTRA_BUILTINS = (
    "dict", "list", "tuple", "set", "frozenset", "enumerate", "zip", "map", "filter", "sum",
    "min", "max", "sorted", "reversed", "any", "all", "iter", "next", "format", "ascii", "bin",
    "StopIteration", "ValueError", "TypeError", "KeyError", "IndexError", "Exception",
    "ArithmeticError", "ZeroDivisionError", "RuntimeError", "LookupError", "AttributeError",
    "NotImplementedError", "OverflowError",
)  # fmt: skip


def _base_builtins() -> dict[str, Any]:
    names = dict(safe_builtins)
    for name in _EXTRA_BUILTINS:
        names[name] = getattr(builtins, name)
    names.update(
        range=_guarded_range,
        pow=_guarded_pow,
        getattr=_guarded_getattr,
        hasattr=_guarded_hasattr,
        ScriptResponse=ScriptResponse,
        get=script_get,
        has=script_has,
        as_list=script_as_list,
    )
    return names


_BASE_BUILTINS = _base_builtins()


@dataclass
class Sandbox:
    """Runs compiled scripts with an import allow-list and a wall-clock limit per call."""

    allowed_modules: frozenset[str] = DEFAULT_ALLOWED_MODULES
    timeout_seconds: float = 2.0
    extra_globals: Mapping[str, Any] = field(default_factory=dict)

    def load(self, compiled: CompiledScript) -> LoadedScript:
        """Execute the script's module body (definitions) and return it ready for calls."""
        budget = _Budget(self.timeout_seconds)
        namespace = self._namespace(compiled, budget)
        script = LoadedScript(compiled=compiled, namespace=namespace, budget=budget)
        script.run_guarded(lambda: exec(compiled.code, namespace))
        return script

    def run(self, compiled: CompiledScript, handler: str, *args: Any) -> Any:
        """Load `compiled` and call its `handler` with `args` in one go."""
        return self.load(compiled).call(handler, *args)

    def _namespace(self, compiled: CompiledScript, budget: _Budget) -> dict[str, Any]:
        allowed = frozenset(self.allowed_modules)

        def guarded_import(
            name: str,
            globals_: Any = None,
            locals_: Any = None,
            fromlist: Any = (),
            level: int = 0,
        ) -> Any:
            if level:
                raise _Refusal("relative imports are not allowed")
            if not is_module_allowed(name, allowed):
                raise _Refusal(
                    forbidden_module_reason(name) or f"import of {name!r} is not allowed"
                )
            # `import a.b` binds `a`; the proxy re-checks every submodule reached through it.
            return _ModuleProxy(builtins.__import__(name, {}, {}, fromlist or (), 0), allowed)

        def guarded_iter(iterable: Any) -> Iterator[Any]:
            for item in iter(iterable):
                budget.tick()
                yield item

        script_builtins = dict(_BASE_BUILTINS)
        script_builtins["__import__"] = guarded_import
        script_builtins["log"] = _ScriptLog(compiled.location)
        return {
            "__builtins__": script_builtins,
            "__name__": "vnext_script",
            "__metaclass__": _ScriptClassMeta,
            "_getattr_": _guarded_getattr,
            "_getitem_": default_guarded_getitem,
            "_getiter_": guarded_iter,
            "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
            "_unpack_sequence_": guarded_unpack_sequence,
            "_write_": full_write_guard,
            "_inplacevar_": _guarded_inplace,
            "_apply_": _apply,
            "_print_": _LoggingPrint,
            "_tick_": budget.tick,
            "_binop_": _guarded_binop,
            **self.extra_globals,
        }


@dataclass
class LoadedScript:
    """A script whose definitions are in place; `call` runs one handler under the budget."""

    compiled: CompiledScript
    namespace: dict[str, Any]
    budget: _Budget
    _instance: Any = None

    def has(self, name: str) -> bool:
        """True when the script provides handler `name`."""
        return self._resolve(name) is not None

    def call(self, name: str, *args: Any) -> Any:
        """Call handler `name` with `args`; any failure becomes a `ScriptError` naming the line."""
        handler = self._resolve(name)
        if handler is None:
            raise ScriptError(
                f"the script defines no {name!r} handler", location=self.compiled.location
            )
        return self.run_guarded(lambda: handler(*args))

    def _resolve(self, name: str) -> Callable[..., Any] | None:
        function = self.namespace.get(name)
        if callable(function) and not isinstance(function, type):
            return function
        for value in list(self.namespace.values()):
            if isinstance(value, _ScriptClassMeta) and name in vars(value):
                if not isinstance(self._instance, value):
                    self._instance = self.run_guarded(value)
                method = getattr(self._instance, name)
                return method if callable(method) else None
        return None

    def run_guarded(self, action: Callable[[], Any]) -> Any:
        """Run `action` under a fresh budget, translating every failure into a `ScriptError`."""
        location = self.compiled.location
        self.budget.start()
        try:
            result = action()
        except _BudgetExpired as exc:
            raise ScriptTimeout(
                f"script exceeded its time limit of {self.budget.seconds:g} s",
                location=location,
                line=_script_line(exc, location),
            ) from None
        except _SizeRefused as exc:
            raise ScriptRefused(
                str(exc), location=location, line=_script_line(exc, location)
            ) from None
        except _Refusal as exc:
            raise ScriptRefused(
                str(exc), location=location, line=_script_line(exc, location)
            ) from None
        except MemoryError as exc:
            raise ScriptRefused(
                "script ran out of memory", location=location, line=_script_line(exc, location)
            ) from None
        except RecursionError as exc:
            raise ScriptError(
                "maximum recursion depth exceeded",
                location=location,
                line=_script_line(exc, location),
            ) from None
        except ScriptError:
            raise
        except Exception as exc:
            raise ScriptError(
                f"{type(exc).__name__}: {exc}", location=location, line=_script_line(exc, location)
            ) from exc
        if self.budget.expired:
            # The script caught the timeout with a bare `except:` and carried on.
            raise ScriptTimeout(
                f"script exceeded its time limit of {self.budget.seconds:g} s", location=location
            )
        return result


def _script_line(exc: BaseException, location: str) -> int | None:
    frames = [
        frame for frame in traceback.extract_tb(exc.__traceback__) if frame.filename == location
    ]
    return frames[-1].lineno if frames else None
