"""What scripts can do, and the clear errors they get, through the worker pool the engine uses."""

from __future__ import annotations

import base64
import time

import pytest

from instances.engine.scripts import (
    DEFAULT_ALLOWED_MODULES,
    ScriptCompileError,
    ScriptError,
    ScriptRefused,
    ScriptResponse,
    ScriptTimeout,
    check_imports,
    compile_script,
    decode_source,
    forbidden_module_reason,
)
from tests.engine import scripting
from tests.engine.scripting import LOCATION, handler_of


@pytest.fixture
def run(pool):
    def call(source, *args, timeout=0.3, allowed=DEFAULT_ALLOWED_MODULES, handler="handler"):
        return scripting.run(pool, source, *args, timeout=timeout, allowed=allowed, handler=handler)

    return call


class TestRefusedAtCompileOrImport:
    def test_import_os_is_refused_statically_and_at_run_time(self, run):
        source = "import os\n" + handler_of("return os.getcwd()")
        compiled = compile_script(source, LOCATION)
        problems = check_imports(compiled, DEFAULT_ALLOWED_MODULES)
        assert [(p.line, p.message) for p in problems] == [(1, forbidden_module_reason("os"))]
        with pytest.raises(ScriptRefused, match="'os' is not one scripts may import") as caught:
            run(source)
        assert caught.value.location == LOCATION
        assert caught.value.line == 1

    def test_os_stays_forbidden_even_when_a_workflow_allows_it(self, run):
        assert forbidden_module_reason("os") is not None
        with pytest.raises(ScriptRefused):
            run("import os\n" + handler_of("return 1"), allowed={"os", "math"})

    def test_import_from_forbidden_package_is_refused(self, run):
        with pytest.raises(ScriptRefused, match="subprocess"):
            run(handler_of("from subprocess import run\nreturn run"))

    def test_module_not_on_the_allow_list_is_refused_until_allowed(self, run):
        source = "import statistics\n" + handler_of("return statistics.mean([1, 2, 3])")
        with pytest.raises(ScriptRefused, match="'statistics' is not allowed"):
            run(source)
        assert run(source, allowed={"statistics"}) == 2

    def test_allowed_module_cannot_reach_other_modules_through_attributes(self, run):
        # json imports codecs, which could open files.
        with pytest.raises(ScriptError, match="module 'codecs' is not allowed"):
            run("import json\n" + handler_of("return json.codecs.open('/etc/passwd').read()"))
        with pytest.raises(ScriptError, match=r"module 'json\.decoder' is not allowed"):
            run("import json\n" + handler_of("return json.decoder.BACKSLASH"))

    def test_dunder_attribute_is_a_compile_error(self):
        source = handler_of("return ().__class__.__subclasses__()")
        with pytest.raises(ScriptCompileError) as caught:
            compile_script(source, LOCATION)
        assert caught.value.line == 2
        assert "__class__" in str(caught.value)
        assert "__subclasses__" in str(caught.value)

    @pytest.mark.parametrize("call", ["eval('1 + 1')", "exec('x = 1')"])
    def test_eval_and_exec_are_compile_errors(self, call):
        with pytest.raises(ScriptCompileError, match=r"(Eval|Exec) calls are not allowed"):
            compile_script(handler_of(f"return {call}"), LOCATION)

    def test_syntax_error_names_the_line(self):
        with pytest.raises(ScriptCompileError) as caught:
            compile_script("def handler(context):\n    return (\n", LOCATION)
        assert caught.value.location == LOCATION
        assert "SyntaxError" in str(caught.value)


class TestRefusedAtRunTime:
    def test_open_is_not_available(self, run):
        with pytest.raises(ScriptError, match="name 'open' is not defined") as caught:
            run(handler_of("return open('/etc/passwd').read()"))
        assert caught.value.line == 2

    def test_getattr_of_a_dunder_is_refused(self, run):
        source = handler_of("f = lambda: 1\nreturn getattr(f, '__globals__')")
        with pytest.raises(ScriptError, match="__globals__") as caught:
            run(source)
        assert caught.value.line == 3

    def test_str_format_cannot_reach_attributes(self, run):
        with pytest.raises(ScriptRefused, match=r"str.format\(\) is not allowed"):
            run(handler_of("return '{0.__class__}'.format(1)"))

    @pytest.mark.parametrize(
        "expression",
        [
            "'x' * (10 ** 10)",
            "[0] * (10 ** 10)",
            "10 ** (10 ** 9)",
            "1 << (10 ** 9)",
            "list(range(10 ** 10))",
            "'x'.ljust(10 ** 10)",
            "pow(7, 10 ** 9)",
        ],
    )
    def test_huge_allocation_is_refused_before_it_happens(self, run, expression):
        started = time.monotonic()
        with pytest.raises(ScriptRefused, match="sandbox"):
            run(handler_of(f"return {expression}"))
        assert time.monotonic() - started < 1.0

    def test_huge_allocation_by_augmented_assignment_is_refused(self, run):
        with pytest.raises(ScriptRefused, match="sandbox limit"):
            run(handler_of("s = 'ab'\ns *= 10 ** 9\nreturn s"))


class TestTimeLimit:
    @pytest.mark.parametrize(
        "body",
        [
            "while True:\n    pass",
            "n = 0\nwhile True:\n    try:\n        n += 1\n    except:\n        pass",
            "return [1 for a in range(10 ** 7) for b in range(10 ** 7)]",
            "f = lambda n: 0 if n == 0 else f(n - 1) + f(n - 1)\nreturn f(60)",
        ],
        ids=["while-true", "swallowing-except", "nested-comprehension", "exponential-lambda"],
    )
    def test_runaway_script_is_stopped_by_the_time_limit(self, run, body):
        started = time.monotonic()
        with pytest.raises(ScriptTimeout, match=r"time limit of 0\.3 s") as caught:
            run(handler_of(body))
        elapsed = time.monotonic() - started
        assert 0.25 < elapsed < 2.0
        assert caught.value.location == LOCATION

    def test_exponential_recursion_is_stopped(self, run):
        source = (
            "def grow(n):\n    return 0 if n == 0 else grow(n - 1) + grow(n - 1)\n"
            + handler_of("return grow(60)")
        )
        with pytest.raises(ScriptTimeout):
            run(source)

    def test_infinite_recursion_is_a_clear_error(self, run):
        source = "def down(n):\n    return down(n + 1)\n" + handler_of("return down(0)")
        with pytest.raises(ScriptError, match="maximum recursion depth"):
            run(source)

    def test_the_budget_is_per_call(self, run):
        # Each call spends 60% of its 0.5 s budget: a budget carried over between calls (or
        # between scripts sharing a worker) would stop the second one.
        source = "import datetime\n" + handler_of(
            "start = datetime.datetime.now()\n"
            "spins = 0\n"
            "while (datetime.datetime.now() - start).total_seconds() < 0.3:\n"
            "    spins += 1\n"
            "return spins > 0"
        )
        assert [run(source, timeout=0.5) for _ in range(4)] == [True] * 4


class TestWhatScriptsCanDo:
    def test_allowed_modules_helpers_and_builtins(self, run):
        source = """
import math, json, re
from decimal import Decimal
from datetime import timedelta

def handler(context):
    data = {"values": sorted([3, 1, 2]), "root": math.sqrt(16)}
    data["amount"] = str(Decimal("10.50") * 2)
    data["city"] = get(context, "customer.address.city", "unknown")
    data["has_customer"] = has(context, "customer")
    data["items"] = as_list(context.get("single"))
    data["match"] = bool(re.match(r"^[a-z]+$", "abc"))
    data["wait"] = timedelta(minutes=5).total_seconds()
    return json.loads(json.dumps(data))
"""
        result = run(source, {"customer": {"address": {"city": "Istanbul"}}, "single": 7})
        assert result == {
            "values": [1, 2, 3],
            "root": 4.0,
            "amount": "21.00",
            "city": "Istanbul",
            "has_customer": True,
            "items": [7],
            "match": True,
            "wait": 300.0,
        }

    def test_what_loads_lazily_works_in_a_worker_that_dropped_its_privileges(self, run):
        source = """
import datetime

def handler(context):
    parsed = datetime.datetime.strptime("31.01.2024 10:20", "%d.%m.%Y %H:%M")
    turkish = "\u0131\u015f".encode("cp1254").hex()
    return [parsed.isoformat(), turkish, "b\u00fccher.de".encode("idna").decode()]
"""
        assert run(source) == ["2024-01-31T10:20:00", "fdfe", "xn--bcher-kva.de"]

    def test_what_c_code_of_an_allowed_module_imports_works_but_scripts_still_cannot(self, run):
        # datetime's strftime imports `time` from C; the script itself may not import it.
        source = """
import datetime

def handler(context):
    moment = datetime.datetime(2024, 1, 31, 10, 20)
    return [moment.strftime("%d.%m.%Y %H:%M"), f"{moment:%Y}", list(moment.timetuple())[:3]]
"""
        assert run(source) == ["31.01.2024 10:20", "2024", [2024, 1, 31]]
        with pytest.raises(ScriptRefused, match="'time' is not one scripts may import"):
            run("import time\n" + handler_of("return time.time()"))
        with pytest.raises(ScriptCompileError, match="_strptime"):
            run("import _strptime\n" + handler_of("return 1"))

    def test_log_lines_cannot_forge_other_log_entries(self, run, caplog):
        with caplog.at_level("INFO", logger="vnext.scripts"):
            run(handler_of("log.info('one\\nFORGED root entry')\nreturn 1"))
        assert "FORGED" in caplog.text
        assert not any(line.startswith("FORGED") for line in caplog.text.splitlines())

    def test_handlers_may_be_methods_of_one_class_with_state(self, run):
        source = """
class DoubleMapping:
    def handler(self, context):
        self.doubled = context["n"] * 2
        return ScriptResponse(data={"n": self.doubled}, key="k-1")
"""
        result = run(source, {"n": 21})
        assert result == ScriptResponse(data={"n": 42}, key="k-1")

    def test_missing_handler_is_a_clear_error(self, run):
        compiled = compile_script("def other(context):\n    return 1\n", LOCATION)
        with pytest.raises(ScriptError, match="defines no 'handler' handler"):
            run("def other(context):\n    return 1\n", {})
        assert compiled.defines("other")
        assert not compiled.defines("handler")

    def test_script_exception_names_location_and_line(self, run):
        source = handler_of("x = 1\nraise ValueError('amount must be positive')")
        with pytest.raises(ScriptError) as caught:
            run(source)
        assert str(caught.value) == f"{LOCATION}, line 3: ValueError: amount must be positive"

    def test_print_goes_to_the_server_log_with_the_location(self, run, caplog):
        with caplog.at_level("INFO", logger="vnext.scripts"):
            assert run(handler_of("print('hello', 42)\nreturn 1")) == 1
        assert f"[{LOCATION}] print: hello 42" in caplog.text

    def test_compiled_code_is_cached_by_content(self):
        source = handler_of("return 'cached'")
        assert compile_script(source, LOCATION) is compile_script(source, LOCATION)
        assert compile_script(source, LOCATION) is not compile_script(source + "\n", LOCATION)


class TestEncodings:
    def test_nat_and_b64_decode_to_the_same_source(self):
        source = handler_of("return 1")
        encoded = base64.b64encode(source.encode()).decode()
        assert decode_source(source, "NAT") == source
        assert decode_source(encoded, "B64") == source

    def test_invalid_base64_is_a_clear_error(self):
        with pytest.raises(ValueError, match="not valid base64"):
            decode_source("not base64!!", "B64")
