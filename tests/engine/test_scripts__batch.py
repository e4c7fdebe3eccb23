"""A hop's script calls in one worker round trip: a batch of calls (`ScriptPool.run_batch`),
its context encoded once yet decoded afresh for each call, chained data patches, and a group of
script tasks that costs one exchange (counted on the pool)."""

from __future__ import annotations

from typing import Any

from instances.engine.execution import EngineConfig
from instances.engine.pipeline import Engine
from instances.engine.script_pool import (
    FollowUp,
    PoolSettings,
    ScriptCall,
    ScriptPool,
    ScriptReply,
)
from instances.engine.scripts import (
    DEFAULT_ALLOWED_MODULES,
    ScriptError,
    ScriptTimeout,
    ScriptUnavailable,
)
from tests.engine.builders import Harness, script, script_task, state, transition, workflow
from tests.engine.scripting import LOCATION, context

ADD = "def handler(context):\n    return {'n': context.instance.data['n'] + 1}\n"


def call(source: str, *args: Any, patch: str = "", timeout: float = 0.5) -> ScriptCall:
    return ScriptCall(
        source=source,
        location=LOCATION,
        handler="handler",
        args=args,
        allowed_modules=DEFAULT_ALLOWED_MODULES,
        timeout_seconds=timeout,
        patch=patch,
    )


def values(results: list[ScriptReply | ScriptError]) -> list[Any]:
    return [result.value if isinstance(result, ScriptReply) else result for result in results]


class TestRunBatch:
    def test_a_batch_is_one_round_trip(self, pool: ScriptPool):
        shared = context(n=1)
        before = pool.round_trips
        results = pool.run_batch([call(ADD, shared), call(ADD, shared), call(ADD, shared)])
        assert pool.round_trips - before == 1
        assert values(results) == [{"n": 2}] * 3

    def test_each_call_gets_its_own_copy_of_a_shared_context(self, pool: ScriptPool):
        meddle = (
            "def handler(context):\n"
            "    context.instance.data['n'] = 99\n"
            "    context.body['seen'] = True\n"
            "    return 'meddled'\n"
        )
        look = "def handler(context):\n    return [context.instance.data['n'], context.body]\n"
        shared = context(n=1)
        results = pool.run_batch([call(meddle, shared), call(look, shared)])
        assert values(results) == ["meddled", [1, {}]]
        assert shared.instance.data == {"n": 1}

    def test_a_chain_merges_each_patch_before_the_next_call(self, pool: ScriptPool):
        nested = "def handler(context):\n    return {'deep': {'b': context.instance.data['n']}}\n"
        shared = context(n=1, deep={"a": 1})
        seen = "def handler(context):\n    return context.instance.data\n"
        results = pool.run_batch(
            [call(ADD, shared, patch="result"), call(nested, shared, patch="result"),
             call(ADD, shared, patch="result"), call(seen, shared)],
            chain=0,
        )  # fmt: skip
        assert values(results) == [
            {"n": 2},
            {"deep": {"b": 2}},
            {"n": 3},
            {"n": 3, "deep": {"a": 1, "b": 2}},
        ]

    def test_a_failing_call_fails_alone_and_makes_no_patch(self, pool: ScriptPool):
        fails = "def handler(context):\n    return 1 / 0\n"
        stuck = "def handler(context):\n    while True:\n        pass\n"
        shared = context(n=1)
        results = pool.run_batch(
            [call(fails, shared, patch="result"), call(stuck, shared, timeout=0.2),
             call(ADD, shared, patch="result"), call(ADD, shared)],
            chain=0,
        )  # fmt: skip
        assert isinstance(results[0], ScriptError)
        assert isinstance(results[1], ScriptTimeout)
        assert values(results)[2:] == [{"n": 2}, {"n": 3}]

    def test_a_follow_up_patch_chains_too(self, pool: ScriptPool):
        source = (
            "def input_handler(task, context):\n    return context.instance.data['n']\n\n"
            "def output_handler(context):\n    return {'n': context.body['data'] * 10}\n"
        )
        shared = context(n=1)

        def task_call() -> ScriptCall:
            return ScriptCall(
                source=source,
                location=LOCATION,
                handler="input_handler",
                args=({}, shared),
                allowed_modules=DEFAULT_ALLOWED_MODULES,
                timeout_seconds=0.5,
                then=FollowUp("output_handler", context_position=1, body={}),
                patch="then",
            )

        first, second = pool.run_batch([task_call(), task_call()], chain=1)
        assert isinstance(first, ScriptReply)
        assert isinstance(second, ScriptReply)
        assert (first.value, first.follow_up) == (1, {"n": 10})
        assert (second.value, second.follow_up) == (10, {"n": 100})

    def test_an_answer_too_large_fails_its_call_and_keeps_the_ones_before(self):
        small = ScriptPool(PoolSettings(size=1, max_payload_bytes=64_000)).start()
        big = "def handler(context):\n    return 'x' * 100_000\n"
        shared = context(n=1)
        try:
            results = small.run_batch([call(ADD, shared), call(big, shared), call(ADD, shared)])
        finally:
            small.close()
        assert values(results)[0] == {"n": 2}
        assert isinstance(results[1], ScriptError)
        assert "larger than 64,000 bytes" in str(results[1])
        assert isinstance(results[2], ScriptError)

    def test_without_a_worker_every_call_fails_with_the_pools_error(self):
        closed = ScriptPool(PoolSettings(size=1))
        closed.close()
        shared = context(n=1)
        results = closed.run_batch([call(ADD, shared), call(ADD, shared)])
        assert [type(result) for result in results] == [ScriptUnavailable] * 2


def script_task_ref(expression: str) -> dict[str, Any]:
    source = (
        "def input_handler(task, context):\n    return context.instance.data.get('n', 0)\n\n"
        f"def output_handler(context):\n    return {expression}\n"
    )
    return {
        "order": 1,
        "task": {"key": "script-task", "domain": "core", "version": "1.0.0", "flow": "sys-tasks"},
        "mapping": script(source),
    }


class TestAHopWithSeveralScripts:
    def test_a_group_of_script_tasks_costs_one_round_trip(self, pool: ScriptPool):
        tasks = [
            script_task_ref("{'n': context.body['data'] + 1}"),
            script_task_ref("{'n': context.body['data'] * 10, 'tens': True}"),
            script_task_ref("{'last': context.instance.data}"),
        ]
        document = workflow(
            [state("a", 1, [transition("go", "b", onExecutionTasks=tasks)]), state("b", 2)]
        )
        harness = Harness(document, script_task())
        harness.engine = Engine(
            harness.store,
            harness.components,
            config=EngineConfig(script_timeout_seconds=1.0, script_executor=pool),
        )
        started = harness.start({"n": 1})
        before = pool.round_trips
        execution = harness.fire(started.instance.id, "go")
        assert pool.round_trips - before == 1
        # Each task saw the outputs of the ones before it merged.
        assert execution.instance.data == {"n": 20, "tens": True, "last": {"n": 20, "tens": True}}
        assert execution.instance.current_state == "b"
        assert [row.status for row in harness.store.tasks] == ["succeeded"] * 3

    def test_the_rules_of_automatic_transitions_are_one_round_trip(self, pool: ScriptPool):
        def rule(expression: str) -> dict[str, str]:
            return script(f"def handler(context):\n    {expression}\n")

        automatic = [
            transition("first", "one", 1, rule=rule("return False")),
            transition("second", "two", 1, rule=rule("return context.instance.data['n'] > 0")),
            # Never asked: the second rule holds.
            transition("third", "three", 1, rule=rule("while True:\n        pass")),
            # Never loaded either: a rule that does not compile fails only when reached.
            transition("fourth", "three", 1, rule=rule("return (")),
        ]
        document = workflow(
            [
                state("a", 1, [transition("go", "gate")]),
                state("gate", 2, automatic),
                *(state(key, 3, subType=1) for key in ("one", "two", "three")),
            ]
        )
        harness = Harness(document)
        harness.engine = Engine(
            harness.store,
            harness.components,
            config=EngineConfig(script_timeout_seconds=1.0, script_executor=pool),
        )
        started = harness.start({"n": 1})
        before = pool.round_trips
        execution = harness.fire(started.instance.id, "go")
        assert pool.round_trips - before == 1
        assert execution.instance.current_state == "two"
