"""Inside a script worker: run one call of a workflow script under RestrictedPython's guards.

This is the first layer of defence, not the boundary (the worker process is: see
`instances.engine.script_worker`). It gives scripts clear errors for what they may not do:
- no name or attribute starting with `_`, no frame, code, traceback or generator attribute
  (`gi_`, `f_`, `tb_`, `co_`, `cr_`, `ag_`, `mro`), also when the name is computed
  (`getattr`, `hasattr`, `get`, `has`);
- no `str.format`/`format_map` (they walk attributes of their arguments), on instances and on the
  type; padding methods and `*`, `**`, `<<`, `range` refuse results over 10 million items;
- writes only to the script's own objects: never to a class it did not define, a module, a
  function or a platform object; no `_` names;
- no `BaseException` beyond `Exception` in the builtins (`SystemExit`, `KeyboardInterrupt`, ...);
- modules from the closed list only, read-only, handing out no module the workflow did not allow
  and copies of their mutable values;
- helper libraries (`scripts.helpers`) only when declared for the script: compiled under the same
  policy, executed with the same guards, allow-list and budget, as fresh read-only modules each
  call (nothing one call leaves in a helper is seen by the next);
- a wall-clock budget checked on every loop iteration and function call (the server enforces the
  hard deadline by killing the worker); each call in a fresh decimal context and a fresh module
  namespace, so nothing of one call is seen by the next.
"""

from __future__ import annotations

import builtins
import collections
import copy
import decimal
import sys
import time
import traceback
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from RestrictedPython import safe_builtins
from RestrictedPython.Eval import default_guarded_getitem
from RestrictedPython.Guards import guarded_iter_unpack_sequence, guarded_unpack_sequence
from RestrictedPython.PrintCollector import PrintCollector

from instances.engine.script_wire import ScriptObject, WireError, encode_result, plain
from instances.engine.scripts import (
    HELPERS_PACKAGE,
    MODULE_ATTRIBUTES,
    CompiledScript,
    ScriptError,
    ScriptRefused,
    ScriptResourceLimit,
    ScriptResponse,
    ScriptTimeout,
    TimerSchedule,
    helper_of_import,
    import_refusal,
    is_module_allowed,
)

MAX_SEQUENCE_LENGTH = 10_000_000
MAX_INTEGER_BITS = 1_000_000
MAX_LOG_LINES = 100
MAX_LOG_LINE = 2000

# Attributes of frames, code objects, tracebacks, generators and coroutines: the way from any
# function back to the interpreter's globals. Refused on every object, by any spelling.
_INTERPRETER_PREFIXES = ("gi_", "f_", "tb_", "co_", "cr_", "ag_")
_INTERPRETER_NAMES = frozenset({"mro"})
_INTERPRETER_TYPES = (
    types.FrameType,
    types.CodeType,
    types.TracebackType,
    types.GeneratorType,
    types.CoroutineType,
    types.AsyncGeneratorType,
)
_PADDING_METHODS = frozenset({"ljust", "rjust", "center", "zfill", "expandtabs"})
_FORMAT_METHODS = frozenset({"format", "format_map"})


class _BudgetExpired(BaseException):
    # BaseException, so a script's `except Exception:` cannot swallow the time limit.
    pass


class _SizeRefused(BaseException):
    pass


class _Refusal(ImportError):
    # Raised inside a script for a refused import or call; reported as `ScriptRefused`.
    pass


# --- helpers scripts get without importing ----------------------------------------------------

_MISSING = object()


def _step(obj: Any, part: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(part, _MISSING)
    if isinstance(obj, list | tuple) and part.lstrip("-").isdigit():
        index = int(part)
        return obj[index] if -len(obj) <= index < len(obj) else _MISSING
    return guarded_getattr(obj, part, _MISSING)


def script_get(obj: Any, path: str, default: Any = None) -> Any:
    """`get(context.instance.data, "customer.address.city", default)` for scripts."""
    current = obj
    for part in str(path).split("."):
        current = _step(current, part)
        if current is _MISSING or current is None:
            return default
    return current


def script_has(obj: Any, path: str) -> bool:
    """True when `path` resolves to a value (None counts as present)."""
    current = obj
    for part in str(path).split("."):
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


class ScriptLog:
    """The `log` object scripts get: `log.info("...")`, `log.warning(...)`, `log.error(...)`.
    Lines are collected and handed to the server with the call's answer."""

    _guarded_writes = True

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def _emit(self, level: str, message: Any, *args: Any) -> None:
        if len(self.lines) >= MAX_LOG_LINES:
            return
        text = str(message)
        if args:
            try:
                text = text % tuple(args)
            except (TypeError, ValueError):
                text = " ".join([text, *map(str, args)])
        self.lines.append((level, text[:MAX_LOG_LINE]))

    def debug(self, message: Any, *args: Any) -> None:
        self._emit("debug", message, *args)

    def info(self, message: Any, *args: Any) -> None:
        self._emit("info", message, *args)

    def warning(self, message: Any, *args: Any) -> None:
        self._emit("warning", message, *args)

    def error(self, message: Any, *args: Any) -> None:
        self._emit("error", message, *args)

    def __call__(self, message: Any, *args: Any) -> None:
        self.info(message, *args)


class _ScriptClassMeta(type):
    """Metaclass of classes defined by scripts: they and their instances accept writes."""

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> Any:
        namespace["_guarded_writes"] = True
        return super().__new__(mcs, name, bases, namespace)


# --- guards ------------------------------------------------------------------------------------


def _check_length(length: int) -> None:
    if length > MAX_SEQUENCE_LENGTH:
        raise _SizeRefused(
            f"result of {length:,} items exceeds the sandbox limit of {MAX_SEQUENCE_LENGTH:,}"
        )


def _refuse_attribute(obj: Any, name: Any) -> None:
    if not isinstance(name, str):
        raise TypeError("attribute name must be a string")
    if name.startswith("_"):
        raise AttributeError(f'"{name}" is an invalid attribute name because it starts with "_"')
    if name.startswith(_INTERPRETER_PREFIXES) or name in _INTERPRETER_NAMES:
        raise _Refusal(f"attribute {name!r} is not available to scripts")
    if isinstance(obj, _INTERPRETER_TYPES):
        raise _Refusal(f"attributes of a {type(obj).__name__} are not available to scripts")
    if name in _FORMAT_METHODS and _is_text(obj):
        # str.format can reach attributes of its arguments ("{0.x}"): refused.
        raise _Refusal(f"str.{name}() is not allowed in scripts; use f-strings")


def _is_text(obj: Any) -> bool:
    if isinstance(obj, type):
        return issubclass(obj, str | bytes | bytearray)
    return isinstance(obj, str | bytes | bytearray)


def guarded_getattr(obj: Any, name: Any, *default: Any) -> Any:
    """`getattr` and `obj.name` in scripts."""
    _refuse_attribute(obj, name)
    value = getattr(obj, name, *default)
    if name in _PADDING_METHODS and _is_text(obj):
        return _size_checked_padding(obj, name, value)
    return value


def _size_checked_padding(obj: Any, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    unbound = isinstance(obj, type)

    def padded(*args: Any, **kwargs: Any) -> Any:
        text, rest = (args[0], args[1:]) if unbound and args else (obj, args)
        width = rest[0] if rest else kwargs.get("width", kwargs.get("tabsize", 8))
        if isinstance(width, int):
            _check_length(width if name != "expandtabs" else len(text) * max(width, 1))
        return method(*args, **kwargs)

    return padded


def _guarded_hasattr(obj: Any, name: Any) -> bool:
    try:
        _refuse_attribute(obj, name)
    except (AttributeError, TypeError, _Refusal):
        return False
    return hasattr(obj, name)


class _ReadOnly:
    """What the write guard hands back for an object scripts may not change."""

    def __init__(self, target: Any) -> None:
        object.__setattr__(self, "_target", target)

    def _refuse(self, *args: Any) -> None:
        target = object.__getattribute__(self, "_target")
        raise _Refusal(f"a script may not change {_describe(target)}")

    __setattr__ = __delattr__ = __setitem__ = __delitem__ = _refuse


def _describe(target: Any) -> str:
    if isinstance(target, type):
        return f"the class {target.__name__}"
    if isinstance(target, types.ModuleType | _ModuleProxy | _HelperModule | _HelperPackage):
        return "a module"
    return f"a {type(target).__name__} object"


def write_guard(target: Any) -> Any:
    """`_write_`: scripts write to dicts, lists, their own classes and instances, and the
    context objects they were given; never to other classes, modules or functions."""
    kind = type(target)
    if kind is dict or kind is list:
        return target
    if isinstance(target, type):
        return target if isinstance(target, _ScriptClassMeta) else _ReadOnly(target)
    if isinstance(kind, _ScriptClassMeta) or isinstance(target, _WRITABLE):
        return target
    return _ReadOnly(target)


# Objects a script builds or is given for its own use, which it may change.
_WRITABLE = (dict, list, bytearray, collections.deque, ScriptObject, ScriptResponse)


def _guarded_setattr(obj: Any, name: Any, value: Any) -> None:
    if not isinstance(name, str) or name.startswith("_"):
        raise _Refusal(f"a script may not set the attribute {name!r}")
    setattr(write_guard(obj), name, value)


def _guarded_delattr(obj: Any, name: Any) -> None:
    if not isinstance(name, str) or name.startswith("_"):
        raise _Refusal(f"a script may not delete the attribute {name!r}")
    delattr(write_guard(obj), name)


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


_INPLACE: dict[str, Callable[[Any, Any], Any]] = {
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


def _apply(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return function(*args, **kwargs)


# --- modules -----------------------------------------------------------------------------------


class _ModuleProxy:
    """An allowed module as scripts see it: read-only public attributes (only those listed in
    `MODULE_ATTRIBUTES` where the module has a list); a submodule only when the workflow allows
    it by its full name; mutable values (lists, dicts, decimal contexts) as copies."""

    __slots__ = ("_allowed", "_exposed", "_module")

    def __init__(self, module: types.ModuleType, allowed: frozenset[str]) -> None:
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "_allowed", allowed)
        object.__setattr__(self, "_exposed", MODULE_ATTRIBUTES.get(module.__name__))

    def __getattr__(self, name: str) -> Any:
        module = object.__getattribute__(self, "_module")
        exposed = object.__getattribute__(self, "_exposed")
        if name.startswith("_") or (exposed is not None and name not in exposed):
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r} here")
        value = getattr(module, name)
        if isinstance(value, types.ModuleType):
            allowed = object.__getattribute__(self, "_allowed")
            if not is_module_allowed(value.__name__, allowed):
                raise AttributeError(f"module {value.__name__!r} is not allowed in scripts")
            return _ModuleProxy(value, allowed)
        if isinstance(value, dict | list | set | bytearray | decimal.Context):
            return copy.deepcopy(value)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise _Refusal("modules are read-only in scripts")

    def __delattr__(self, name: str) -> None:
        raise _Refusal("modules are read-only in scripts")

    def __repr__(self) -> str:
        return f"<module {object.__getattribute__(self, '_module').__name__!r} (sandboxed)>"


class _HelperModule:
    """A helper library as scripts see it: the public names its code defined in this call,
    read-only (its own objects stay as writable as a script's own)."""

    __slots__ = ("_name", "_namespace")

    def __init__(self, name: str, namespace: dict[str, Any]) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_namespace", namespace)

    def __getattr__(self, name: str) -> Any:
        helper = object.__getattribute__(self, "_name")
        namespace = object.__getattribute__(self, "_namespace")
        if name.startswith("_") or name not in namespace:
            raise AttributeError(f"helper {helper!r} has no attribute {name!r}")
        return namespace[name]

    def __setattr__(self, name: str, value: Any) -> None:
        raise _Refusal("helpers are read-only in scripts")

    def __delattr__(self, name: str) -> None:
        raise _Refusal("helpers are read-only in scripts")

    def __repr__(self) -> str:
        return f"<helper {object.__getattribute__(self, '_name')!r}>"


class _HelperPackage:
    """The `helpers` package: the helpers declared for the script, by name."""

    __slots__ = ("_loader",)

    def __init__(self, loader: _Helpers) -> None:
        object.__setattr__(self, "_loader", loader)

    def __getattr__(self, name: str) -> Any:
        loader = object.__getattribute__(self, "_loader")
        if name.startswith("_") or name not in loader.compiled:
            raise AttributeError(f"no helper {name!r} is declared for this script")
        return loader.load(name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise _Refusal("helpers are read-only in scripts")

    def __delattr__(self, name: str) -> None:
        raise _Refusal("helpers are read-only in scripts")

    def __repr__(self) -> str:
        return f"<package {HELPERS_PACKAGE!r} (sandboxed)>"


class _Helpers:
    """The helpers one call may import, loaded on first import within the call: each helper's
    code runs once per call, in a fresh namespace with the script's guards, allow-list, budget
    and log, and may itself import the other declared helpers (a cycle is refused)."""

    def __init__(
        self,
        compiled: Mapping[str, CompiledScript],
        allowed: frozenset[str],
        budget: _Budget,
        log: ScriptLog,
    ) -> None:
        self.compiled = dict(compiled)
        self.allowed = allowed
        self.budget = budget
        self.log = log
        self.loaded: dict[str, _HelperModule] = {}
        self.loading: set[str] = set()
        self.package = _HelperPackage(self)

    @property
    def locations(self) -> dict[str, str]:
        """Helper name by the location its code objects carry (for error lines)."""
        return {compiled.location: name for name, compiled in self.compiled.items()}

    def load(self, name: str) -> _HelperModule:
        """The helper `name` as a module of this call, running its code the first time."""
        module = self.loaded.get(name)
        if module is not None:
            return module
        if name in self.loading:
            raise _Refusal(f"helper {name!r} imports itself (a circular import of helpers)")
        compiled = self.compiled[name]
        self.loading.add(name)
        try:
            namespace = _namespace(self.allowed, self.budget, self.log, self)
            namespace["__name__"] = f"{HELPERS_PACKAGE}.{name}"
            exec(compiled.code, namespace)
        finally:
            self.loading.discard(name)
        module = self.loaded[name] = _HelperModule(name, namespace)
        return module

    def import_(self, module: str, fromlist: Any) -> Any:
        """What `import <module>` (or `from <module> import ...`) of a declared helper gives
        (the import is admitted: see `import_refusal`)."""
        if module == HELPERS_PACKAGE:
            return self.package
        name = helper_of_import(module)
        assert name is not None
        helper = self.load(name)
        # `import helpers.x` binds `helpers`; `from helpers.x import f` reads from x.
        if module.startswith(HELPERS_PACKAGE + ".") and not fromlist:
            return self.package
        return helper


class _LoggingPrint(PrintCollector):
    """`print()` in a script goes to the call's log lines, not to any stream."""

    def __init__(self, log: ScriptLog, _getattr_: Any = None) -> None:
        super().__init__(_getattr_)
        self.log = log

    def _call_print(self, *objects: Any, **kwargs: Any) -> None:
        self.log.info("print: " + " ".join(str(item) for item in objects))


# --- builtins -------------------------------------------------------------------------------

# Exceptions a script may not raise or name: they end interpreters and escape `except Exception`.
_REMOVED_BUILTINS = frozenset(
    {"BaseException", "SystemExit", "KeyboardInterrupt", "GeneratorExit", "setattr", "delattr"}
)
_EXTRA_BUILTINS = (
    "dict", "list", "tuple", "set", "frozenset", "enumerate", "zip", "map", "filter", "sum",
    "min", "max", "sorted", "reversed", "any", "all", "iter", "next", "format", "ascii", "bin",
    "StopIteration", "ValueError", "TypeError", "KeyError", "IndexError", "Exception",
    "ArithmeticError", "ZeroDivisionError", "RuntimeError", "LookupError", "AttributeError",
    "NotImplementedError", "OverflowError",
)  # fmt: skip


def _base_builtins() -> dict[str, Any]:
    names = {k: v for k, v in safe_builtins.items() if k not in _REMOVED_BUILTINS}
    for name in _EXTRA_BUILTINS:
        names[name] = getattr(builtins, name)
    names.update(
        range=_guarded_range,
        pow=_guarded_pow,
        getattr=guarded_getattr,
        hasattr=_guarded_hasattr,
        setattr=_guarded_setattr,
        delattr=_guarded_delattr,
        ScriptResponse=ScriptResponse,
        TimerSchedule=TimerSchedule,
        get=script_get,
        has=script_has,
        as_list=script_as_list,
    )
    return names


_BASE_BUILTINS = _base_builtins()


# Python's default decimal context, never handed to a script itself: each call gets a copy.
_DECIMAL_DEFAULTS = decimal.Context(
    prec=28,
    rounding=decimal.ROUND_HALF_EVEN,
    Emin=-999999,
    Emax=999999,
    capitals=1,
    clamp=0,
    flags=[],
    traps=[decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow],
)


def fresh_decimal_context() -> decimal.Context:
    """The decimal context every call starts in: Python's defaults, a new copy each time (a
    copy has its own flags and traps: nothing one call sets is seen by the next)."""
    return _DECIMAL_DEFAULTS.copy()


# --- running -----------------------------------------------------------------------------------


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


# Modules that C code of the allowed modules imports on use (see guarded_import).
_C_LAZY_IMPORTS = frozenset({"time", "_strptime"})


def _namespace(
    allowed: frozenset[str], budget: _Budget, log: ScriptLog, helpers: _Helpers
) -> dict[str, Any]:
    def guarded_import(
        name: str, globals_: Any = None, locals_: Any = None, fromlist: Any = (), level: int = 0
    ) -> Any:
        if level:
            raise _Refusal("relative imports are not allowed")
        if type(fromlist) is list and not fromlist and name in _C_LAZY_IMPORTS:
            # PyImport_Import from C code of an allowed module (datetime's strftime imports
            # `time`, and from 3.13 strptime imports `_strptime` on every call) goes through the
            # calling frame's __import__ with an empty list, then reads sys.modules itself. A
            # script's own import passes None or a tuple, so it still meets the checks below.
            return sys.modules.get(name) or builtins.__import__(name)
        # `from helpers import a, b` asks for the helpers a and b, as the publish check reads it.
        asked = [name]
        if name == HELPERS_PACKAGE and fromlist:
            asked = [f"{HELPERS_PACKAGE}.{item}" for item in fromlist]
        for module in asked:
            refusal = import_refusal(module, allowed, helpers.compiled)
            if refusal is not None:
                raise _Refusal(refusal)
        if not is_module_allowed(name, allowed):
            # Admitted and not a module: a helper declared for this script.
            return helpers.import_(name, fromlist)
        return _ModuleProxy(builtins.__import__(name, {}, {}, (), 0), allowed)

    def guarded_iter(iterable: Any) -> Iterator[Any]:
        for item in iter(iterable):
            budget.tick()
            yield item

    def printer(_getattr_: Any = None) -> _LoggingPrint:
        return _LoggingPrint(log, _getattr_)

    script_builtins = dict(_BASE_BUILTINS)
    script_builtins["__import__"] = guarded_import
    script_builtins["log"] = log
    return {
        "__builtins__": script_builtins,
        "__name__": "vnext_script",
        "__metaclass__": _ScriptClassMeta,
        "_getattr_": guarded_getattr,
        "_getitem_": default_guarded_getitem,
        "_getiter_": guarded_iter,
        "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
        "_unpack_sequence_": guarded_unpack_sequence,
        "_write_": write_guard,
        "_inplacevar_": _guarded_inplace,
        "_apply_": _apply,
        "_print_": printer,
        "_tick_": budget.tick,
        "_binop_": _guarded_binop,
    }


def _resolve(namespace: dict[str, Any], name: str, run: Callable[..., Any]) -> Any:
    function = namespace.get(name)
    if callable(function) and not isinstance(function, type):
        return function
    for value in list(namespace.values()):
        if isinstance(value, _ScriptClassMeta) and name in vars(value):
            method = getattr(run(value), name)
            return method if callable(method) else None
    return None


@dataclass
class CallOutcome:
    """What one call produced: the tagged result and returned arguments, or the error; plus
    the script's log lines."""

    result: dict[str, Any] | None = None
    arguments: list[Any] | None = None
    error: ScriptError | None = None
    log: list[tuple[str, str]] | None = None
    exhausted_memory: bool = False


def run_call(
    compiled: CompiledScript,
    handler: str,
    args: list[Any],
    *,
    allowed_modules: frozenset[str],
    timeout_seconds: float,
    return_arguments: tuple[int, ...] = (),
    helpers: Mapping[str, CompiledScript] | None = None,
) -> CallOutcome:
    """Execute the script's module body in a fresh namespace and call `handler(*args)`, then
    convert what it returned (and the arguments listed in `return_arguments`) to plain JSON.
    `helpers` are the helper libraries the script may import, by module name; each one it
    imports runs within this call's budget, in a namespace of this call."""
    log = ScriptLog()
    budget = _Budget(timeout_seconds)
    location = compiled.location
    outcome = CallOutcome(log=log.lines)
    loader = _Helpers(helpers or {}, allowed_modules, budget, log)
    budget.start()
    try:
        with decimal.localcontext(fresh_decimal_context()):
            namespace = _namespace(allowed_modules, budget, log, loader)
            exec(compiled.code, namespace)
            function = _resolve(namespace, handler, lambda cls: cls())
            if function is None:
                raise ScriptError(f"the script defines no {handler!r} handler", location=location)
            value = function(*args)
            if budget.expired:
                # The script caught the timeout with a bare `except:` and carried on.
                raise _BudgetExpired()
            outcome.result = encode_result(value)
            outcome.arguments = [plain(args[index]) for index in return_arguments]
    except BaseException as exc:  # every failure of a script becomes its error
        outcome.error = _script_error(exc, location, budget)
        outcome.exhausted_memory = isinstance(exc, MemoryError)
        if not isinstance(exc, ScriptError):
            _name_helper_line(outcome.error, exc, loader.locations)
    return outcome


def _name_helper_line(error: ScriptError, exc: BaseException, helpers: dict[str, str]) -> None:
    # A failure inside helper code: say which helper and line, beside the script's own line.
    try:
        frames = [
            (frame.f_code.co_filename, line) for frame, line in traceback.walk_tb(exc.__traceback__)
        ]
    except Exception:  # a traceback is a hint, never a second failure
        return
    known = [(where, line) for where, line in frames if where in helpers or where == error.location]
    if known and known[-1][0] in helpers:
        where, line = known[-1]
        error.message = f"{error.message} (in helper {helpers[where]!r}, line {line})"


def _script_error(exc: BaseException, location: str, budget: _Budget) -> ScriptError:
    line = _script_line(exc, location)
    if isinstance(exc, ScriptError):
        return exc
    if isinstance(exc, _BudgetExpired):
        return ScriptTimeout(
            f"script exceeded its time limit of {budget.seconds:g} s", location=location, line=line
        )
    if isinstance(exc, _SizeRefused | _Refusal):
        return ScriptRefused(str(exc), location=location, line=line)
    if isinstance(exc, MemoryError):
        return ScriptResourceLimit("script ran out of memory", location=location, line=line)
    if isinstance(exc, RecursionError):
        return ScriptError("maximum recursion depth exceeded", location=location, line=line)
    if isinstance(exc, WireError):
        return ScriptError(
            f"the script returned a value that cannot be used: {exc}", location=location
        )
    if not isinstance(exc, Exception):
        return ScriptRefused(
            f"{type(exc).__name__} is not allowed in scripts", location=location, line=line
        )
    return ScriptError(f"{type(exc).__name__}: {_message(exc)}", location=location, line=line)


def _message(exc: BaseException) -> str:
    try:
        return str(exc)[:MAX_LOG_LINE]
    except Exception:  # str() of a script's own exception may fail in any way
        return "(message unavailable)"


def _script_line(exc: BaseException, location: str) -> int | None:
    # Frames are read directly: no source lines are looked up (that would read files).
    try:
        lines = [
            line
            for frame, line in traceback.walk_tb(exc.__traceback__)
            if frame.f_code.co_filename == location
        ]
    except Exception:  # a traceback is a hint, never a second failure
        return None
    return lines[-1] if lines else None
