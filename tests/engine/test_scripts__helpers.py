"""Helper libraries (`scripts.helpers`, seed 001 "Scripts (Helpers & Allowed Assemblies)"): a
`sys-mappings` component's Python code that a script imports by the helper's key (`rsa-crypto`
as `rsa_crypto`). Helpers are compiled under the scripts' policy and run in the script's worker,
within its guards, allow-list and time budget, as fresh modules each call; a script imports only
the helpers declared for it (its own `scripts.helpers` and its workflow's)."""

from __future__ import annotations

from typing import Any

import pytest

from instances.engine.outcomes import PipelineFault
from instances.engine.script_pool import PoolSettings, ScriptCall, ScriptPool, source_key
from instances.engine.scripts import (
    DEFAULT_ALLOWED_MODULES,
    ScriptCompileError,
    ScriptError,
    ScriptHelper,
    ScriptRefused,
    ScriptTimeout,
    compile_script,
    helper_key_problem,
    helper_location,
    helper_module_name,
)
from instances.status import InstanceStatus
from tests.engine import scripting
from tests.engine.builders import Harness, script, script_task, state, transition, workflow
from tests.engine.scripting import LOCATION, handler_of

LIMITS = "def over(amount, limit=1000):\n    return amount > limit\n"
FORMAT = "def money(amount):\n    return f'{amount:.2f} TRY'\n"


def helper(name: str, source: str, version: str = "1.0.0") -> ScriptHelper:
    """A resolved helper as the engine hands it to the pool."""
    location = helper_location({"domain": "core", "key": name, "version": version})
    return ScriptHelper(helper_module_name(name), source, compile_script(source, location))


def call(
    pool: ScriptPool,
    source: str,
    *helpers: ScriptHelper,
    data: dict[str, Any] | None = None,
    allowed: frozenset[str] = DEFAULT_ALLOWED_MODULES,
    timeout: float = 0.5,
) -> Any:
    """Run `handler(context)` of `source` with `helpers` declared, and return its value."""
    request = ScriptCall(
        source=source,
        location=LOCATION,
        handler="handler",
        args=(scripting.context(**(data or {})),),
        allowed_modules=allowed,
        timeout_seconds=timeout,
        helpers=helpers,
    )
    return pool.run(request).value


@pytest.fixture
def single_worker():
    """A pool of one worker: consecutive calls surely share its process and its caches."""
    started = ScriptPool(PoolSettings(size=1, grace_seconds=0.3, wait_seconds=20)).start()
    yield started
    started.close()


class TestNames:
    @pytest.mark.parametrize(
        ("key", "name"), [("rsa-crypto", "rsa_crypto"), ("limits", "limits"), ("a-b_c", "a_b_c")]
    )
    def test_a_key_is_imported_with_each_dash_written_underscore(self, key, name):
        assert helper_module_name(key) == name
        assert helper_key_problem(key) is None

    @pytest.mark.parametrize(
        ("key", "why"),
        [
            ("2fa-codes", "not a Python module name"),
            ("class", "not a Python module name"),
            ("rsa.crypto", "not a Python module name"),
            ("-private", "private"),
            ("helpers", "the package scripts import helpers from"),
            ("json", "standard library module"),
            ("os", "standard library module"),
        ],
    )
    def test_a_key_that_makes_no_importable_name_is_refused(self, key, why):
        problem = helper_key_problem(key)
        assert problem is not None
        assert why in problem


class TestImporting:
    @pytest.mark.parametrize(
        "imports",
        [
            "import limits\nover = limits.over",
            "from limits import over",
            "from helpers import limits\nover = limits.over",
            "import helpers.limits\nover = helpers.limits.over",
            "import helpers.limits as lim\nover = lim.over",
            "from helpers.limits import over",
        ],
    )
    def test_every_import_form_reaches_the_declared_helper(self, pool, imports):
        source = imports + "\n" + handler_of("return over(context.instance.data['amount'])")
        assert call(pool, source, helper("limits", LIMITS), data={"amount": 1500}) is True
        assert call(pool, source, helper("limits", LIMITS), data={"amount": 10}) is False

    def test_a_dashed_key_is_imported_by_its_module_name(self, pool):
        source = "import rsa_crypto\n" + handler_of("return rsa_crypto.money(12.5)")
        assert call(pool, source, helper("rsa-crypto", FORMAT)) == "12.50 TRY"

    def test_a_helper_uses_allowed_modules_and_other_declared_helpers(self, pool):
        stats = (
            "import statistics\nimport limits\n\n"
            "def mean_over(values):\n    return limits.over(statistics.mean(values), 10)\n"
        )
        source = "from helpers import stats\n" + handler_of("return stats.mean_over([5, 20, 30])")
        helpers = (helper("stats", stats), helper("limits", LIMITS))
        allowed = DEFAULT_ALLOWED_MODULES | {"statistics"}
        assert call(pool, source, *helpers, allowed=allowed) is True
        # The helper runs under the script's allow-list, which here lacks statistics.
        with pytest.raises(ScriptRefused, match="'statistics' is not allowed") as caught:
            call(pool, source, *helpers)
        assert "in helper 'stats', line 1" in caught.value.message

    def test_an_undeclared_helper_is_refused_with_the_script_error_code(self, pool):
        source = "import limits\n" + handler_of("return limits.over(5)")
        with pytest.raises(ScriptRefused, match="no helper 'limits' is declared") as caught:
            call(pool, source, helper("money-format", FORMAT))
        assert (caught.value.code, caught.value.line) == ("Script:100001", 1)
        with pytest.raises(ScriptRefused, match="no helper 'limits' is declared"):
            call(pool, "from helpers import limits\n" + handler_of("return 1"))

    def test_a_helper_another_call_declared_stays_out_of_reach(self, single_worker):
        source = "import limits\n" + handler_of("return limits.over(5000)")
        assert call(single_worker, source, helper("limits", LIMITS)) is True
        # The worker has compiled `limits`; a call that does not declare it cannot import it.
        with pytest.raises(ScriptRefused, match="no helper 'limits' is declared"):
            call(single_worker, source)

    def test_a_circular_import_of_helpers_is_refused(self, pool):
        ping = helper("ping", "import pong\n\ndef f():\n    return 1\n")
        pong = helper("pong", "import ping\n\ndef g():\n    return 2\n")
        with pytest.raises(ScriptRefused, match="circular import of helpers"):
            call(pool, "import ping\n" + handler_of("return ping.f()"), ping, pong)

    def test_a_helper_that_raises_names_itself_and_its_line(self, pool):
        failing = helper("parse", "def amount(text):\n    return int(text)\n")
        source = "import parse\n" + handler_of("return parse.amount('twelve')")
        with pytest.raises(ScriptError, match="ValueError") as caught:
            call(pool, source, failing)
        assert caught.value.line == 3  # the script's line that called the helper
        assert "(in helper 'parse', line 2)" in caught.value.message


class TestSandbox:
    @pytest.mark.parametrize(
        ("code", "error", "words"),
        [
            ("import os\n\ndef f():\n    return os.getcwd()\n", ScriptRefused, "'os'"),
            ("import subprocess\n", ScriptRefused, "'subprocess'"),
            ("def f():\n    return open('/etc/passwd').read()\n", ScriptError, "open"),
            ("def f():\n    return getattr(f, '__globals__')\n", ScriptError, "__globals__"),
            ("def f():\n    return getattr(f, 'f_back')\n", ScriptRefused, "f_back"),
            ("def f():\n    return ''.format\n", ScriptRefused, "format"),
        ],
    )
    def test_a_helper_is_refused_at_run_time_exactly_like_a_script(self, pool, code, error, words):
        source = "import evil\n" + handler_of("return evil.f()")
        with pytest.raises(error, match=words):
            call(pool, source, helper("evil", code))

    @pytest.mark.parametrize(
        "code",
        [
            "def f():\n    return ().__class__.__subclasses__()\n",
            "def f():\n    return eval('1')\n",
            "def f(:\n",
        ],
    )
    def test_a_helper_that_breaks_the_compile_policy_never_compiles(self, pool, code):
        location = helper_location({"domain": "core", "key": "evil", "version": "1.0.0"})
        with pytest.raises(ScriptCompileError) as caught:
            compile_script(code, location)
        assert caught.value.location == "mapping:core/evil@1.0.0"
        # Nor does the worker, whatever the server sends it.
        forged = ScriptHelper(
            "evil", code, compile_script("def f():\n    return 1\n", location + "#forged")
        )
        with pytest.raises(ScriptCompileError):
            call(pool, "import evil\n" + handler_of("return evil.f()"), forged)

    def test_a_helper_module_is_read_only(self, pool):
        limits = helper("limits", LIMITS)
        with pytest.raises(ScriptRefused, match="may not change a module"):
            call(pool, "import limits\n" + handler_of("limits.over = None\nreturn 1"), limits)
        with pytest.raises(ScriptError, match="invalid attribute name"):
            call(pool, "import limits\n" + handler_of("return getattr(limits, '_name')"), limits)

    def test_helper_code_spends_the_script_s_time_budget(self, pool):
        spin = helper("spin", "def forever():\n    while True:\n        pass\n")
        with pytest.raises(ScriptTimeout):
            call(pool, "import spin\n" + handler_of("return spin.forever()"), spin, timeout=0.3)
        # A helper whose module body never ends is stopped the same way.
        stuck = helper("stuck", "while True:\n    pass\n")
        with pytest.raises(ScriptTimeout):
            call(pool, "import stuck\n" + handler_of("return 1"), stuck, timeout=0.3)


class TestIsolationBetweenCalls:
    COUNTER = "SEEN = []\n\ndef remember(value):\n    SEEN.append(value)\n    return list(SEEN)\n"

    def test_helper_state_does_not_survive_into_another_workflow_s_call(self, single_worker):
        # Two workflows share the helper component (same content, same worker cache).
        shared = helper("memory", self.COUNTER)
        first = "import memory\n" + handler_of("return memory.remember('secret of flow A')")
        second = "import memory\n" + handler_of("return memory.remember('flow B')")
        assert call(single_worker, first, shared) == ["secret of flow A"]
        assert call(single_worker, second, shared) == ["flow B"]
        assert call(single_worker, first, shared) == ["secret of flow A"]

    def test_within_one_call_a_helper_runs_once_for_every_importer(self, pool):
        counter = helper("memory", self.COUNTER)
        other = helper("other", "import memory\n\ndef note():\n    return memory.remember(2)\n")
        source = "import memory\nfrom helpers import other\n" + handler_of(
            "memory.remember(1)\nreturn other.note()"
        )
        assert call(pool, source, counter, other) == [1, 2]

    def test_a_helper_evicted_from_the_worker_is_sent_again(self, single_worker):
        fresh = helper("fresh", "def value():\n    return 'resent'\n")
        [worker] = single_worker._all.values()
        # The pool believes the worker has it; the worker does not, asks, and gets it.
        worker.known_sources.add(
            source_key({"hash": fresh.compiled.source_hash, "location": fresh.compiled.location})
        )
        assert call(
            single_worker, "import fresh\n" + handler_of("return fresh.value()"), fresh
        ) == ("resent")


# --- through the engine --------------------------------------------------------------------------


def mapping_component(key: str, source: str, version: str = "1.0.0") -> dict[str, Any]:
    """A `sys-mappings` helper component with plain-text code."""
    return {
        "key": key,
        "domain": "core",
        "version": version,
        "flow": "sys-mappings",
        "flowVersion": "1.0.0",
        "tags": ["test"],
        "attributes": {"name": "Helper", "code": source, "encoding": "NAT"},
    }


def helper_ref(key: str, version: str = "1.0.0") -> dict[str, str]:
    return {"key": key, "domain": "core", "version": version, "flow": "sys-mappings"}


def with_helpers(node: dict[str, Any], *keys: str) -> dict[str, Any]:
    """`node` (a script object) declaring the helpers `keys` itself."""
    return {**node, "scripts": {"helpers": [helper_ref(key) for key in keys]}}


RULE_OVER = "import limits\n" + handler_of("return limits.over(context.instance.data['amount'])")
MAPPING_MONEY = "from helpers import money_format\n" + handler_of(
    "return {'shown': money_format.money(context.instance.data['amount'])}"
)


def approval(rule: dict[str, Any], mapping: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """draft -submit-> check, which moves on its own to `manual` when `rule` holds, else to
    `auto`; the submit transition's mapping is `mapping`."""
    return workflow(
        [
            state("draft", 1, [transition("submit", "check", mapping=mapping)]),
            state(
                "check",
                2,
                [
                    transition("escalate", "manual", 1, rule=rule),
                    transition("pass", "auto", 1, triggerKind=10),
                ],
            ),
            state("manual", 3),
            state("auto", 3),
        ],
        **extra,
    )


def test_a_rule_and_a_mapping_call_the_workflow_s_helpers():
    document = approval(
        script(RULE_OVER),
        script(MAPPING_MONEY),
        scripts={"helpers": [helper_ref("limits"), helper_ref("money-format")]},
    )
    harness = Harness(
        document, mapping_component("limits", LIMITS), mapping_component("money-format", FORMAT)
    )
    started = harness.start({"amount": 2500})
    harness.fire(started.instance.id, "submit")
    instance = harness.load(started.instance.id)
    assert instance.current_state == "manual"
    assert instance.data["shown"] == "2500.00 TRY"


def test_a_script_s_own_helpers_are_its_alone():
    document = approval(
        with_helpers(script(RULE_OVER), "limits"),
        with_helpers(script(MAPPING_MONEY), "money-format"),
    )
    components = (mapping_component("limits", LIMITS), mapping_component("money-format", FORMAT))
    harness = Harness(document, *components)
    started = harness.start({"amount": 10})
    harness.fire(started.instance.id, "submit")
    instance = harness.load(started.instance.id)
    assert (instance.current_state, instance.data["shown"]) == ("auto", "10.00 TRY")

    # The mapping declares only money-format: importing limits there fails the transition.
    greedy = "import limits\n" + MAPPING_MONEY
    document = approval(
        with_helpers(script(RULE_OVER), "limits"), with_helpers(script(greedy), "money-format")
    )
    harness = Harness(document, *components)
    started = harness.start({"amount": 10})
    with pytest.raises(PipelineFault) as caught:
        harness.fire(started.instance.id, "submit")
    assert caught.value.code == "Script:100001"
    assert "no helper 'limits' is declared" in caught.value.message
    instance = harness.load(started.instance.id)
    assert (instance.current_state, instance.status) == ("draft", InstanceStatus.FAULTED)


def test_a_task_mapping_imports_its_helper():
    mapping = with_helpers(
        script(
            "import money_format\n\n"
            "def input_handler(task, context):\n    return ScriptResponse()\n\n"
            "def output_handler(context):\n"
            "    return {'fee': money_format.money(context.instance.data['amount'] / 100)}\n"
        ),
        "money-format",
    )
    task = {
        "order": 1,
        "task": {"key": "script-task", "domain": "core", "version": "1.0.0", "flow": "sys-tasks"},
        "mapping": mapping,
    }
    document = workflow(
        [
            state("draft", 1, [transition("charge", "done", onExecutionTasks=[task])]),
            state("done", 3),
        ]
    )
    harness = Harness(document, script_task(), mapping_component("money-format", FORMAT))
    started = harness.start({"amount": 250})
    harness.fire(started.instance.id, "charge")
    assert harness.load(started.instance.id).data["fee"] == "2.50 TRY"


def test_a_missing_helper_or_a_name_clash_fails_the_script():
    missing = approval(
        script(RULE_OVER), script(MAPPING_MONEY), scripts={"helpers": [helper_ref("limits")]}
    )
    harness = Harness(missing)  # limits was never published
    started = harness.start({"amount": 1})
    with pytest.raises(PipelineFault) as caught:
        harness.fire(started.instance.id, "submit")
    assert caught.value.code == "Script:100001"
    assert "mapping:core/limits@1.0.0 does not exist" in caught.value.message

    clash = approval(
        script(RULE_OVER),
        with_helpers(script(MAPPING_MONEY), "money_format"),
        scripts={"helpers": [helper_ref("money-format")]},
    )
    harness = Harness(
        clash,
        mapping_component("money-format", FORMAT),
        mapping_component("money_format", FORMAT),
    )
    started = harness.start({"amount": 1})
    with pytest.raises(PipelineFault) as caught:
        harness.fire(started.instance.id, "submit")
    assert caught.value.code == "Script:100001"
    assert "are both imported as 'money_format'" in caught.value.message
