"""A script or condition task runs its input and output handlers in one worker round trip (a
`FollowUp`), with exactly what two separate calls would give: the output handler sees a fresh
context whose body is the task's standard response, each handler has its own time budget, and
a failure of either keeps its own error code."""

from __future__ import annotations

from typing import Any

import pytest

from instances.engine.errors import Codes
from instances.engine.execution import EngineConfig
from instances.engine.outcomes import PipelineFault
from instances.engine.pipeline import Engine
from instances.engine.script_pool import FollowUp, ScriptCall, ScriptPool, ScriptReply
from instances.engine.scripts import ScriptError, ScriptTimeout
from instances.engine.task_types import StandardResponse
from tests.engine.builders import Harness, script, state, transition, workflow
from tests.engine.scripting import LOCATION, context

STANDARD_BODY = StandardResponse(status_code=200).as_dict()


def follow_up_call(source: str, *, condition: bool = False, timeout: float = 0.5) -> ScriptCall:
    """input_handler(task, context), then output_handler(context) in the same exchange."""
    return ScriptCall(
        source=source,
        location=LOCATION,
        handler="input_handler",
        args=(context(), context(amount=5)),
        allowed_modules=frozenset({"json"}),
        timeout_seconds=timeout,
        return_arguments=(0,),
        then=FollowUp("output_handler", 1, STANDARD_BODY, condition=condition),
    )


class TestOneExchange:
    def test_the_output_handler_sees_a_fresh_context_whose_body_is_the_standard_response(
        self, pool: ScriptPool
    ):
        source = (
            "def input_handler(task, context):\n"
            "    task.signed = True\n"
            "    context.body['leak'] = True\n"
            "    context.instance.data['amount'] = 0\n"
            "    return {'doubled': context.instance.data['amount'] + 10}\n\n"
            "def output_handler(context):\n"
            "    return {'body': context.body, 'amount': context.instance.data['amount']}\n"
        )
        reply = pool.run(follow_up_call(source))
        assert reply.value == {"doubled": 10}
        assert reply.arguments[0]["signed"] is True
        assert reply.follow_up == {
            "body": {**STANDARD_BODY, "data": {"doubled": 10}},
            "amount": 5,  # the input handler's changes to its context do not carry over
        }
        assert reply.follow_up_error is None

    def test_a_script_response_passes_its_data_part_on(self, pool: ScriptPool):
        source = (
            "def input_handler(task, context):\n"
            "    return ScriptResponse(data={'x': 1}, headers={'h': 'v'})\n\n"
            "def output_handler(context):\n"
            "    return context.body['data']\n"
        )
        assert pool.run(follow_up_call(source)).follow_up == {"x": 1}

    @pytest.mark.parametrize(("returned", "result"), [("0", False), ("[1]", True), ("''", False)])
    def test_a_condition_task_body_holds_the_truth_of_the_input_value(
        self, pool: ScriptPool, returned: str, result: bool
    ):
        source = (
            f"def input_handler(task, context):\n    return {returned}\n\n"
            "def output_handler(context):\n    return context.body['data']\n"
        )
        assert pool.run(follow_up_call(source, condition=True)).follow_up == {"result": result}

    def test_a_failing_output_handler_is_reported_apart_from_the_input_value(
        self, pool: ScriptPool
    ):
        source = (
            "def input_handler(task, context):\n    return {'ok': 1}\n\n"
            "def output_handler(context):\n    raise ValueError('bad output')\n"
        )
        reply = pool.run(follow_up_call(source))
        assert reply.value == {"ok": 1}
        assert isinstance(reply.follow_up_error, ScriptError)
        assert "ValueError: bad output" in str(reply.follow_up_error)
        assert reply.follow_up_error.line == 5

    def test_a_failing_input_handler_raises_and_the_output_handler_never_runs(
        self, pool: ScriptPool
    ):
        source = (
            "def input_handler(task, context):\n    raise KeyError('missing')\n\n"
            "def output_handler(context):\n    while True:\n        pass\n"
        )
        with pytest.raises(ScriptError, match="KeyError"):
            pool.run(follow_up_call(source, timeout=0.3))

    def test_each_handler_has_its_own_budget_and_the_worker_survives(self, pool: ScriptPool):
        source = (
            "def input_handler(task, context):\n    return 1\n\n"
            "def output_handler(context):\n    while True:\n        pass\n"
        )
        reply = pool.run(follow_up_call(source, timeout=0.3))
        assert reply.value == 1
        assert isinstance(reply.follow_up_error, ScriptTimeout)
        fine = "def input_handler(task, c):\n    return 2\n\ndef output_handler(c):\n    return 3\n"
        assert pool.run(follow_up_call(fine)).follow_up == 3


class CountingExecutor:
    """The process pool, counting exchanges."""

    def __init__(self, inner: ScriptPool) -> None:
        self.inner = inner
        self.calls: list[ScriptCall] = []

    def run(self, call: ScriptCall) -> ScriptReply:
        self.calls.append(call)
        return self.inner.run(call)


def task_document(key: str, task_type: str) -> dict[str, Any]:
    return {
        "key": key,
        "domain": "core",
        "version": "1.0.0",
        "flow": "sys-tasks",
        "flowVersion": "1.0.0",
        "tags": ["test"],
        "attributes": {"type": task_type, "config": {}},
    }


def harness_with(source: str, task_type: str, pool: ScriptPool) -> tuple[Harness, CountingExecutor]:
    reference = {
        "order": 1,
        "task": {"key": "t", "domain": "core", "version": "1.0.0", "flow": "sys-tasks"},
        "mapping": script(source),
    }
    document = workflow(
        [state("a", 1, [transition("go", "b", onExecutionTasks=[reference])]), state("b", 2)]
    )
    harness = Harness(document, task_document("t", task_type))
    counting = CountingExecutor(pool)
    harness.engine = Engine(
        harness.store,
        harness.components,
        config=EngineConfig(script_timeout_seconds=1.0, script_executor=counting),
    )
    return harness, counting


class TestScriptTasksInTheEngine:
    def test_a_script_task_with_both_handlers_costs_one_exchange(self, pool: ScriptPool):
        source = (
            "def input_handler(task, ctx):\n    return {'n': ctx.instance.data['n'] + 1}\n\n"
            "def output_handler(context):\n    return {'n': context.body['data']['n'] * 10}\n"
        )
        harness, counting = harness_with(source, "7", pool)
        started = harness.start({"n": 1})
        counting.calls.clear()
        execution = harness.fire(started.instance.id, "go")
        assert execution.instance.data == {"n": 20}
        assert execution.instance.current_state == "b"
        assert [call.handler for call in counting.calls] == ["input_handler"]
        assert counting.calls[0].then is not None
        [row] = harness.store.tasks
        assert (row.status, row.response) == ("succeeded", {**STANDARD_BODY, "data": {"n": 2}})

    def test_a_condition_task_merges_its_output(self, pool: ScriptPool):
        source = (
            "def input_handler(task, context):\n    return context.instance.data['n'] > 3\n\n"
            "def output_handler(context):\n    return {'big': context.body['data']['result']}\n"
        )
        harness, counting = harness_with(source, "8", pool)
        started = harness.start({"n": 5})
        execution = harness.fire(started.instance.id, "go")
        assert execution.instance.data == {"n": 5, "big": True}
        assert len(counting.calls) == 1

    def test_an_output_handler_failure_keeps_the_output_mapping_code(self, pool: ScriptPool):
        source = (
            "def input_handler(task, context):\n    return {}\n\n"
            "def output_handler(context):\n    return 1 / 0\n"
        )
        harness, _ = harness_with(source, "7", pool)
        started = harness.start()
        with pytest.raises(PipelineFault) as fault:
            harness.fire(started.instance.id, "go")
        assert fault.value.code == Codes.TASK_OUTPUT_MAPPING_FAILED.code

    def test_an_input_handler_failure_of_a_script_task_is_its_500(self, pool: ScriptPool):
        source = (
            "def input_handler(task, context):\n    return 1 / 0\n\n"
            "def output_handler(context):\n    return {}\n"
        )
        harness, _ = harness_with(source, "7", pool)
        started = harness.start()
        with pytest.raises(PipelineFault) as fault:
            harness.fire(started.instance.id, "go")
        assert fault.value.code == "Task:Script:t:500"
