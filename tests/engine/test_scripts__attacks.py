# ruff: noqa: E501 - the corpus is a table of one-line attacks
"""The attack corpus: what an attacker who can publish a workflow tries with its scripts.

Every attempt runs as the engine runs scripts (a `ScriptCall` through the worker pool) and must be
refused or stopped with a `ScriptError` of the expected kind, with no effect: no file written, no
secret or environment value in any result, error or log line, and the pool serving the next call.
The classes follow the issue that found them: frames by computed name, `str.format` on the type,
writes to shared classes, `BaseException` games, C-level loops, allocations past the size guards,
state leaking between calls, modules that reach the OS, returned objects running code in the
server, and answers the server cannot store.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings

from instances.engine.script_pool import ScriptPool
from instances.engine.scripts import (
    SCRIPT_MODULES,
    ScriptCompileError,
    ScriptError,
    ScriptRefused,
    ScriptResourceLimit,
    ScriptTimeout,
)
from tests.engine import scripting
from tests.engine.scripting import handler_of

CANARY = "vnext-canary-7d1e5a"
os.environ["VNEXT_ATTACK_CANARY"] = CANARY  # in the server's environment, never a worker's
ALL_MODULES = frozenset(SCRIPT_MODULES)

COMPILE, REFUSED, TIMEOUT, RESOURCE, ERROR = (
    ScriptCompileError,
    ScriptRefused,
    ScriptTimeout,
    ScriptResourceLimit,
    ScriptError,
)


@dataclass(frozen=True)
class Attempt:
    name: str
    source: str
    expect: type[ScriptError] | tuple[type[ScriptError], ...]
    allowed: frozenset[str] = ALL_MODULES


def body(
    name: str,
    code: str,
    expect: type[ScriptError] | tuple[type[ScriptError], ...],
    *,
    imports: str = "",
) -> Attempt:
    return Attempt(name, (imports + "\n" if imports else "") + handler_of(code), expect)


GENERATOR = "def gen():\n    yield 1\n"

FRAMES = [
    body(
        "gi_frame by getattr with a computed name",
        "g = gen()\nreturn getattr(g, 'gi_' + 'frame')",
        REFUSED,
    ),
    body(
        "f_back through gi_frame",
        "g = gen()\nf = getattr(g, 'gi_frame')\nreturn getattr(f, 'f_back')",
        REFUSED,
    ),
    body(
        "f_globals by a joined name",
        "g = gen()\nname = ''.join(['f_', 'glob', 'als'])\nreturn getattr(getattr(g, 'gi_frame'), name)",
        REFUSED,
    ),
    body("get() helper walking frames", "return get(gen(), 'gi_frame.f_back.f_globals')", REFUSED),
    body(
        "has() helper probing frames",
        "if has(gen(), 'gi_frame'):\n    return 'reached'\nraise ValueError('refused quietly')",
        ERROR,
    ),
    body(
        "hasattr probing gi_frame",
        "if hasattr(gen(), 'gi_frame'):\n    return 'reached'\nraise ValueError('refused quietly')",
        ERROR,
    ),
    body("gi_code", "return getattr(gen(), 'gi_code')", REFUSED),
    body(
        "co_consts of a function's code", "f = lambda: 1\nreturn getattr(f, 'co_consts')", REFUSED
    ),
    body(
        "tb_frame of a caught exception",
        "try:\n    1 / 0\nexcept Exception as e:\n    tb = getattr(e, 'with_traceback')\n    return getattr(tb, 'tb_frame')",
        REFUSED,
    ),
    body("cr_frame of a coroutine name", "return getattr(gen(), 'cr_frame')", REFUSED),
    body("ag_frame", "return getattr(gen(), 'ag_frame')", REFUSED),
    body("gi_frame as a literal attribute", "return gen().gi_frame", COMPILE),
    body("f_globals as a literal attribute", "return gen().gi_frame.f_globals", COMPILE),
    body("mro() to reach BaseException and object", "return getattr(Exception, 'mro')()", REFUSED),
    body("__class__ by getattr", "return getattr((), '__class__')", ERROR),
    body("__globals__ of a lambda", "f = lambda: 1\nreturn getattr(f, '__glo' + 'bals__')", ERROR),
    body("__subclasses__ literal", "return ().__class__.__base__.__subclasses__()", COMPILE),
    body("__builtins__ name", "return __builtins__", COMPILE),
    body("__import__ call", "return __import__('os')", COMPILE),
    body("globals()", "return globals()", ERROR),
    body("vars()", "return vars(context)", ERROR),
    body("type() to build classes", "return type('X', (), {})", ERROR),
    body("eval", "return eval('1')", COMPILE),
    body("exec", "exec('x = 1')\nreturn 1", COMPILE),
    body("compile", "return compile('1', 'f', 'eval')", ERROR),
    body("open", "return open('/etc/passwd').read()", ERROR),
    body("breakpoint", "breakpoint()\nreturn 1", ERROR),
    body("object.__subclasses__ via getattr", "return getattr(object, '__subclasses__')()", ERROR),
    body(
        "with_traceback frames",
        "try:\n    1 / 0\nexcept Exception as e:\n    return get(e, 'with_traceback.tb_frame')",
        REFUSED,
    ),
]
for attempt in FRAMES[:11]:
    object.__setattr__(attempt, "source", GENERATOR + attempt.source)

FORMAT = [
    body("str.format on the type", "return str.format('{0.instance}', context)", REFUSED),
    body(
        "str.format_map on the type",
        "return str.format_map('{x.instance}', {'x': context})",
        REFUSED,
    ),
    body("format on an instance", "return '{0.instance}'.format(context)", REFUSED),
    body("format by getattr", "return getattr('{0.x}', 'for' + 'mat')(context)", REFUSED),
    body("format through get()", "return get('{0}', 'format')", REFUSED),
    body("bytes format on the type", "return getattr(bytes, 'format')", ERROR),
    body(
        "string.Formatter",
        "return string.Formatter().format('{0.instance}', context)",
        ERROR,
        imports="import string",
    ),
    body(
        "string.Formatter by getattr",
        "return getattr(string, 'Formatter')",
        ERROR,
        imports="import string",
    ),
    body(
        "string.Template with attribute path",
        "return string.Template('${a.b}').substitute({'a': 1})",
        ERROR,
        imports="import string",
    ),
]

WRITES = [
    body(
        "setattr on ScriptResponse",
        "setattr(ScriptResponse, 'data', 'hijacked')\nreturn 1",
        REFUSED,
    ),
    body("attribute write on ScriptResponse", "ScriptResponse.key = 'hijacked'\nreturn 1", REFUSED),
    body("delattr on ScriptResponse", "delattr(ScriptResponse, 'data')\nreturn 1", REFUSED),
    body("augmented write on a class", "ScriptResponse.status_code += 1\nreturn 1", COMPILE),
    body(
        "augmented write on a class by getattr",
        "setattr(ScriptResponse, 'status_code', getattr(ScriptResponse, 'status_code'))\nreturn 1",
        REFUSED,
    ),
    body("setattr on a helper function", "setattr(get, 'x', 1)\nreturn 1", REFUSED),
    body("setattr on the log object", "setattr(log, 'lines', None)\nreturn 1", REFUSED),
    body("setattr on a module", "setattr(math, 'pi', 3)\nreturn 1", REFUSED, imports="import math"),
    body("attribute write on a module", "math.pi = 3\nreturn 1", REFUSED, imports="import math"),
    body("delattr on a module", "delattr(json, 'dumps')\nreturn 1", REFUSED, imports="import json"),
    body("setattr on a builtin type", "setattr(dict, 'items', None)\nreturn 1", REFUSED),
    body(
        "setattr on a module's class",
        "setattr(collections.OrderedDict, 'x', 1)\nreturn 1",
        REFUSED,
        imports="import collections",
    ),
    body(
        "setattr on decimal.Context of the call",
        "decimal.getcontext().prec = 2\nreturn 1",
        REFUSED,
        imports="import decimal",
    ),
    body("setattr of an underscore name", "setattr(context, '_x', 1)\nreturn 1", REFUSED),
    body(
        "setattr on a datetime class",
        "setattr(datetime.datetime, 'now', None)\nreturn 1",
        REFUSED,
        imports="import datetime",
    ),
    body(
        "write to json.encoder dict",
        "json.encoder.ESCAPE_DCT['a'] = 'b'\nreturn 1",
        ERROR,
        imports="import json",
    ),
]

EXCEPTIONS = [
    body("raise SystemExit", "raise SystemExit(0)", ERROR),
    body("raise KeyboardInterrupt", "raise KeyboardInterrupt()", ERROR),
    body("raise GeneratorExit", "raise GeneratorExit()", ERROR),
    body("subclass BaseException", "class Escape(BaseException):\n    pass\nraise Escape()", ERROR),
    body("BaseException through mro", "base = Exception.mro()[1]\nraise base()", REFUSED),
    body(
        "swallow the time limit with bare except",
        "while True:\n    try:\n        while True:\n            pass\n    except:\n        pass",
        TIMEOUT,
    ),
    body(
        "retry forever from except",
        "n = 0\nwhile True:\n    try:\n        n += 1\n    except:\n        continue",
        TIMEOUT,
    ),
    body(
        "recursion that catches everything",
        "def f():\n    try:\n        return f()\n    except:\n        return f()\nreturn f()",
        TIMEOUT,
    ),
]

C_LEVEL = [
    body("any over iter(int, 1)", "return any(iter(int, 1))", TIMEOUT),
    body("all over a callable iterator", "return all(iter(lambda: 1, 0))", TIMEOUT),
    body("sum of an endless iterator", "return sum(iter(int, 1))", TIMEOUT),
    body("join of endless empty strings", "return ''.join(iter(str, 1))", TIMEOUT),
    body(
        "math.factorial of a million",
        "return math.factorial(10 ** 6) > 0",
        TIMEOUT,
        imports="import math",
    ),
    body(
        "catastrophic regular expression",
        "return bool(re.match('(a+)+$', 'a' * 40 + 'b'))",
        TIMEOUT,
        imports="import re",
    ),
    body(
        "nested quantifier regex on fullmatch",
        "return bool(re.fullmatch('(x|x)*y', 'x' * 40))",
        TIMEOUT,
        imports="import re",
    ),
    body(
        "decimal ln with a hundred million digits",
        "ctx = decimal.Context(prec=10 ** 8, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)\nreturn str(ctx.ln(decimal.Decimal(3)))[:5]",
        (TIMEOUT, RESOURCE),
        imports="import decimal",
    ),
    body(
        "decimal exp with huge precision",
        "ctx = decimal.Context(prec=10 ** 8, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)\nreturn str(ctx.exp(decimal.Decimal(1)))[:5]",
        (TIMEOUT, RESOURCE),
        imports="import decimal",
    ),
    body(
        "decimal.localcontext with huge precision",
        "with decimal.localcontext(prec=10 ** 8, Emax=decimal.MAX_EMAX):\n    return str(decimal.Decimal(2).sqrt())[:5]",
        (TIMEOUT, RESOURCE),
        imports="import decimal",
    ),
    body(
        "itertools.count drained in C",
        "return max(zip(itertools.count(), itertools.count()))",
        TIMEOUT,
        imports="import itertools",
    ),
    body(
        "itertools.cycle in any()",
        "return any(x > 1 for x in itertools.cycle([0]))",
        TIMEOUT,
        imports="import itertools",
    ),
    body("huge pow with modulo", "return pow(3, 10 ** 300000, 10 ** 100000 + 7) > 0", TIMEOUT),
    body(
        "statistics over an endless iterator",
        "return statistics.mean(iter(int, 1))",
        TIMEOUT,
        imports="import statistics",
    ),
    body("sorted endless generator", "return sorted(iter(int, 1))", (TIMEOUT, RESOURCE)),
    body(
        "hashlib pbkdf2 with a billion rounds",
        "return hashlib.pbkdf2_hmac('sha256', b'a', b'b', 10 ** 9).hex()",
        TIMEOUT,
        imports="import hashlib",
    ),
]

ALLOCATION = [
    body("str.ljust on an instance", "return 'x'.ljust(10 ** 9)", REFUSED),
    body("str.ljust on the type", "return str.ljust('x', 10 ** 9)", REFUSED),
    body("str.center by getattr", "return getattr('x', 'center')(10 ** 9)", REFUSED),
    body("zfill", "return '1'.zfill(10 ** 9)", REFUSED),
    body("expandtabs", "return ('\\t' * 1000).expandtabs(10 ** 6)", REFUSED),
    body("percent width", "return '%1000000000d' % 1", RESOURCE),
    body("f-string width", "return f'{1:>1000000000}'", RESOURCE),
    body("format() width", "return format(1, '>1000000000')", RESOURCE),
    body(
        "join of a repeated string", "s = 'x' * 9000000\nreturn len(','.join([s] * 9000))", RESOURCE
    ),
    body("int.to_bytes of a gigabyte", "return len((1).to_bytes(10 ** 9, 'big'))", RESOURCE),
    body("list doubling", "x = [0] * 1000000\nwhile True:\n    x = x + x", (RESOURCE, TIMEOUT)),
    body("string doubling", "x = 'x' * 1000000\nwhile True:\n    x = x + x", (RESOURCE, TIMEOUT)),
    body(
        "dict growth",
        "d = {}\ni = 0\nwhile True:\n    d[i] = 'x' * 1000\n    i += 1",
        (RESOURCE, TIMEOUT),
    ),
    body("repeat multiplication", "return 'x' * (10 ** 10)", REFUSED),
    body("list repeat", "return [0] * (10 ** 10)", REFUSED),
    body("huge power", "return 10 ** (10 ** 9)", REFUSED),
    body("huge shift", "return 1 << (10 ** 9)", REFUSED),
    body("huge range", "return list(range(10 ** 10))", REFUSED),
    body("augmented repeat", "s = 'ab'\ns *= 10 ** 9\nreturn s", REFUSED),
    body(
        "a gigabyte joined from a generator",
        "return len(''.join('x' * 5000000 for i in range(200)))",
        (RESOURCE, TIMEOUT),
    ),
    body("bytes repeat", "return (10 ** 9) * b'x'", REFUSED),
    body("an answer over the payload limit", "s = 'x' * 9000000\nreturn [s, s]", ERROR),
]

MODULES = [
    body(f"import {name}", "return 1", REFUSED, imports=f"import {name}")
    for name in (
        "os",
        "sys",
        "subprocess",
        "socket",
        "ctypes",
        "importlib",
        "io",
        "pickle",
        "marshal",
        "gc",
        "inspect",
        "threading",
        "multiprocessing",
        "signal",
        "codecs",
        "operator",
        "pydoc",
        "logging",
        "gzip",
        "bz2",
        "fileinput",
        "environ",
        "imp",
        "typing",
        "xmlrpc",
        "time",
        "random",
        "shutil",
        "pathlib",
        "tempfile",
        "django",
        "instances",
        "vnext",
        "RestrictedPython",
        "pyseccomp",
        "urllib",
        "http",
        "asyncio",
        "zoneinfo",
    )
] + [
    body("import builtins (a reserved name)", "return 1", COMPILE, imports="import builtins"),
    body("import logging.config", "return 1", REFUSED, imports="import logging.config"),
    body("import json.decoder", "return 1", REFUSED, imports="import json.decoder"),
    body(
        "from json import decoder",
        "return decoder.BACKSLASH",
        ERROR,
        imports="from json import decoder",
    ),
    body(
        "from collections import abc",
        "return abc.Mapping",
        ERROR,
        imports="from collections import abc",
    ),
    body(
        "collections.namedtuple (uses exec)",
        "return collections.namedtuple('P', 'x')",
        ERROR,
        imports="import collections",
    ),
    body("uuid.getnode (reads interfaces)", "return uuid.getnode()", ERROR, imports="import uuid"),
    body("uuid.uuid1", "return str(uuid.uuid1())", ERROR, imports="import uuid"),
    body("uuid.os", "return uuid.os.environ", ERROR, imports="import uuid"),
    body(
        "statistics.random", "return statistics.random.random()", ERROR, imports="import statistics"
    ),
    body("re.copyreg", "return re.copyreg", ERROR, imports="import re"),
    body("fractions.sys", "return fractions.sys.modules", ERROR, imports="import fractions"),
    body(
        "fractions.operator",
        "return fractions.operator.attrgetter",
        ERROR,
        imports="import fractions",
    ),
    body(
        "functools.singledispatch",
        "return functools.singledispatch",
        ERROR,
        imports="import functools",
    ),
    body(
        "hashlib private module",
        "return getattr(hashlib, '_hashlib')",
        ERROR,
        imports="import hashlib",
    ),
    body("relative import", "return 1", REFUSED, imports="from . import x"),
    body(
        "a module the workflow did not allow",
        "return statistics.mean([1])",
        REFUSED,
        imports="import statistics",
    ),
]
MODULES[-1] = Attempt(MODULES[-1].name, MODULES[-1].source, REFUSED, frozenset({"math"}))

RETURNED = [
    body("a 100,000-deep list", "x = []\nfor i in range(100000):\n    x = [x]\nreturn x", ERROR),
    body("a generator", "return (i for i in range(3))", ERROR),
    body("a module", "return math", ERROR, imports="import math"),
    body("a function", "return handler", ERROR),
    body("a class", "return ScriptResponse", ERROR),
    body("a NUL character", "return {'name': 'a\\x00b'}", ERROR),
    body("a lone surrogate", "return {'name': '\\ud800'}", ERROR),
    body("a NUL in a key", "return {'a\\x00': 1}", ERROR),
    body("NaN", "return float('nan')", ERROR),
    body("infinity", "return {'x': float('inf')}", ERROR),
    body("an integer too long to print", "return 7 ** 100000", ERROR),
    body("a set", "return {1, 2}", ERROR),
    body("a tuple key", "return {(1, 2): 3}", ERROR),
    body("bytes", "return b'raw'", ERROR),
    body("a ScriptResponse with a non-string key", "return ScriptResponse(key=['a'])", ERROR),
    body(
        "a ScriptResponse with deep data",
        "x = []\nfor i in range(1000):\n    x = [x]\nreturn ScriptResponse(data={'x': x})",
        ERROR,
    ),
]

ATTEMPTS = FRAMES + FORMAT + WRITES + EXCEPTIONS + C_LEVEL + ALLOCATION + MODULES + RETURNED


def test_the_corpus_has_at_least_a_hundred_attempts():
    assert len(ATTEMPTS) >= 100
    assert len({attempt.name for attempt in ATTEMPTS}) == len(ATTEMPTS)


def _secrets() -> list[str]:
    return [
        CANARY,
        settings.SECRET_KEY,
        str(settings.DATABASES["default"].get("PASSWORD") or CANARY),
    ]


@pytest.mark.parametrize("attempt", ATTEMPTS, ids=[attempt.name for attempt in ATTEMPTS])
def test_attempt_is_refused_or_stopped_with_no_effect(
    attempt: Attempt, pool: ScriptPool, caplog, tmp_path: Path
):
    workdir = Path(pool._workdir)
    with caplog.at_level("DEBUG"), pytest.raises(ScriptError) as caught:
        scripting.run(pool, attempt.source, timeout=0.5, allowed=attempt.allowed)
    assert isinstance(caught.value, attempt.expect), (
        f"{type(caught.value).__name__}: {caught.value}"
    )
    assert caught.value.location == scripting.LOCATION
    shown = f"{caught.value}\n{caplog.text}"
    for secret in _secrets():
        assert secret not in shown
    assert list(workdir.iterdir()) == []
    assert not Path("/tmp/vnext-probe.txt").exists()
    # The pool answers the next call, whatever the attempt did to its worker.
    assert scripting.run(pool, handler_of("return 41 + 1")) == 42


def test_returned_subclasses_reach_the_server_as_plain_values(pool: ScriptPool):
    # A str subclass whose strip() never ends, a dict subclass whose items() lies: the server
    # gets exact str/dict values built from the base types, and calls nothing of the script's.
    source = """
class Key(str):
    def strip(self, *args):
        while True:
            pass

class Lying(dict):
    def items(self):
        return [("forged", True)]

def handler(context):
    return {"key": Key("lock-1"), "data": Lying(real=1), "list": [Key("a")]}
"""
    value = scripting.run(pool, source)
    assert value == {"key": "lock-1", "data": {"real": 1}, "list": ["a"]}
    assert type(value["key"]) is str
    assert type(value["data"]) is dict
    assert value["key"].strip() == "lock-1"
