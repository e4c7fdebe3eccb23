"""The Fan-Out task (type 21) in the engine, on the in-memory store: item selection (itemsPath,
item_selector, exactly one), item keys, the scriptless path, the mapping contract (item input
handler per clone, output handler None vs data None vs raising), nested fan-out refused before
any item runs, item journal rows, and one data write per batch."""

from __future__ import annotations

from typing import Any

import pytest

from instances.engine.outcomes import PipelineFault
from tests.engine.builders import Harness, script, state, transition, workflow
from tests.engine.builders import task_component as task

INNER = {"key": "inner-script", "domain": "core", "version": "1.0.0", "flow": "sys-tasks"}
FAN = {"key": "fan", "domain": "core", "version": "1.0.0", "flow": "sys-tasks"}


def fan_task(**config: Any) -> dict[str, Any]:
    return task("fan", "21", {"mode": "inline", "task": INNER, **config})


def flow(mapping: str | None = None) -> dict[str, Any]:
    """start -> ready; `go` runs the fan-out on the way to `done`."""
    reference: dict[str, Any] = {"order": 1, "task": FAN}
    if mapping is not None:
        reference["mapping"] = script(mapping)
    return workflow(
        [
            state("ready", 1, [transition("go", "done", onExecutionTasks=[reference])]),
            state("done", 3, subType=1),
        ]
    )


def harness(fan: dict[str, Any], mapping: str | None = None, *more: dict[str, Any]) -> Harness:
    return Harness(task("inner-script", "7", {}), fan, flow(mapping), *more, timeout=5.0)


def run(h: Harness, data: dict[str, Any]) -> tuple[str | None, Any]:
    """Start with `data` and fire `go`: the fault's code (None when none) and the instance."""
    started = h.start(data)
    fault = None
    try:
        h.fire(started.instance.id, "go")
    except PipelineFault as exc:
        fault = exc.code
    return fault, h.load(started.instance.id)


def test_scriptless_items_are_the_branch_body_and_packaged_by_default():
    h = harness(fan_task(itemsPath="$.order.lines", join={"resultKey": "lines"}))
    lines = [{"id": "L-1", "qty": 1}, {"key": "k-2"}, {"qty": 3}, {"id": 7}]

    _, instance = run(h, {"order": {"lines": lines}})

    assert instance.current_state == "done"
    rows = instance.data["lines"]
    assert [(r["index"], r["itemKey"], r["isSuccess"], r["data"]) for r in rows] == [
        (0, "L-1", True, lines[0]),
        (1, "k-2", True, lines[1]),
        (2, "2", True, lines[2]),  # neither id nor key: the index
        (3, "7", True, lines[3]),
    ]
    assert instance.data["linesSummary"] == {
        "total": 4, "succeeded": 4, "failed": 0, "timedOut": False
    }  # fmt: skip


def test_a_missing_path_is_an_empty_batch():
    h = harness(fan_task(itemsPath="$.nothing.here"))

    _, instance = run(h, {"other": 1})

    assert instance.current_state == "done"
    assert instance.data["fanOutResults"] == []


def test_a_path_to_something_not_an_array_faults_with_the_fan_out_code():
    h = harness(fan_task(itemsPath="$.order"))

    fault, instance = run(h, {"order": {"lines": []}})

    assert (fault, instance.status) == ("FanOut:InvalidConfiguration", "F")
    assert [i.error_code for i in h.store.incidents] == ["FanOut:InvalidConfiguration"]
    assert "resolves to a object" in h.store.incidents[0].message


ITEM_MAPPING = """
def item_input_handler(task, context, item):
    if item.value.get("boom"):
        raise ValueError("no input for " + item.item_key)
    return ScriptResponse(data={"doubled": item.value["n"] * 2, "key": item.item_key})
"""


def test_the_item_input_handler_runs_per_clone_and_a_raising_one_fails_only_its_item():
    h = harness(fan_task(itemsPath="$.items"), ITEM_MAPPING)

    _, instance = run(h, {"items": [{"n": 1}, {"n": 2, "boom": True}, {"n": 3}]})

    rows = instance.data["fanOutResults"]
    assert [(r["isSuccess"], r["data"], r["errorCode"]) for r in rows] == [
        (True, {"doubled": 2, "key": "0"}, None),
        (False, None, "Task:400007"),
        (True, {"doubled": 6, "key": "2"}, None),
    ]
    assert "no input for 1" in rows[1]["errorMessage"]
    journal = {row.task_key: row for row in h.store.tasks}
    assert journal["fan"].status == "succeeded"
    assert (journal["fan#1"].status, journal["fan#1"].error_code) == ("failed", "Task:400007")
    assert [key for key in journal if key.startswith("fan#")] == ["fan#0", "fan#1", "fan#2"]


SELECTOR = """
def item_selector(context):
    seen, picked = set(), []
    for name in ("online", "offline"):
        for doc in context.instance.data.get(name, []):
            if doc["sub"] not in seen:
                seen.add(doc["sub"])
                picked.append({"id": doc["sub"], "list": name})
    return picked

def item_input_handler(task, context, item):
    return ScriptResponse(data=item.value)
"""


def test_an_item_selector_computes_the_items():
    h = harness(fan_task(), SELECTOR)

    _, instance = run(
        h,
        {"online": [{"sub": "a"}, {"sub": "b"}], "offline": [{"sub": "b"}, {"sub": "c"}]},
    )

    assert [r["itemKey"] for r in instance.data["fanOutResults"]] == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("config", "mapping", "says"),
    [
        ({"itemsPath": "$.items"}, SELECTOR, "both are given"),
        ({}, ITEM_MAPPING, "neither is given"),
    ],
)
def test_exactly_one_of_items_path_and_item_selector(config, mapping, says):
    h = harness(fan_task(**config), mapping)

    _, instance = run(h, {"items": [{"n": 1}]})

    assert instance.status == "F"
    (incident,) = h.store.incidents
    assert incident.error_code == "FanOut:InvalidConfiguration"
    assert says in incident.message


OUTPUTS = {
    "none": "def output_handler(context, result):\n    return None\n",
    "empty": "def output_handler(context, result):\n    return ScriptResponse(data=None)\n",
    "own": (
        "def output_handler(context, result):\n"
        "    failed = [i.item_key for i in result.items if not i.is_success]\n"
        "    return {'tracking': {'total': result.total, 'ok': result.succeeded,\n"
        "                         'failed': failed, 'timedOut': result.timed_out}}\n"
    ),
    "raises": "def output_handler(context, result):\n    raise RuntimeError('bad shape')\n",
}


def mapping_with(output: str) -> str:
    return ITEM_MAPPING + "\n" + OUTPUTS[output]


def test_an_output_handler_returning_none_keeps_the_default_packaging():
    h = harness(fan_task(itemsPath="$.items"), mapping_with("none"))

    _, instance = run(h, {"items": [{"n": 1}]})

    assert instance.data["fanOutResultsSummary"]["succeeded"] == 1


def test_an_output_handler_returning_no_data_replaces_the_default_with_nothing():
    h = harness(fan_task(itemsPath="$.items"), mapping_with("empty"))

    _, instance = run(h, {"items": [{"n": 1}]})

    assert instance.current_state == "done"
    assert "fanOutResults" not in instance.data


def test_an_output_handler_shapes_the_one_write_from_the_whole_result():
    h = harness(fan_task(itemsPath="$.items"), mapping_with("own"))
    versions_before = len(h.store.data_versions)

    _, instance = run(h, {"items": [{"n": 1}, {"n": 2, "boom": True}, {"id": "x", "n": 3}]})

    assert instance.data["tracking"] == {"total": 3, "ok": 2, "failed": ["1"], "timedOut": False}
    assert "fanOutResults" not in instance.data
    # The start wrote once, the transition with its batch once: never once per item.
    assert len(h.store.data_versions) - versions_before == 2


def test_an_output_handler_that_raises_fails_the_batch_and_writes_nothing():
    h = harness(fan_task(itemsPath="$.items"), mapping_with("raises"))

    _, instance = run(h, {"items": [{"n": 1}]})

    assert instance.status == "F"
    (incident,) = h.store.incidents
    assert incident.error_code == "FanOut:OutputHandlerFailed"
    assert incident.message.startswith("FanOut task output handler failed:")
    assert "fanOutResults" not in instance.data
    assert "tracking" not in instance.data


def test_a_nested_fan_out_is_refused_before_any_item_runs():
    nested = task("fan", "21", {"mode": "inline", "itemsPath": "$.items", "task": FAN})

    h = Harness(task("inner-script", "7", {}), nested, flow(), timeout=5.0)
    _, instance = run(h, {"items": [{"n": 1}]})

    assert instance.status == "F"
    (incident,) = h.store.incidents
    assert (incident.error_code, "nested fan-out" in incident.message) == (
        "FanOut:InvalidConfiguration",
        True,
    )
    assert not [row for row in h.store.tasks if row.task_key.startswith("fan#")]


def test_a_failed_join_faults_and_says_how_many_succeeded():
    # One slot: the first item ends before the second fails (with more, the failure's early
    # stop may cancel the first while it runs: 0 of 2).
    h = harness(
        fan_task(
            itemsPath="$.items",
            join={"policy": "all"},
            execution={"maxDegreeOfParallelism": 1},
        ),
        ITEM_MAPPING,
    )

    _, instance = run(h, {"items": [{"n": 1}, {"n": 2, "boom": True}]})

    assert (instance.status, instance.current_state) == ("F", "ready")
    (incident,) = h.store.incidents
    assert incident.error_code == "FanOut:JoinFailed"
    assert "1 of 2 items succeeded" in incident.message


def test_an_item_boundary_retries_then_records_the_exhausted_attempts():
    boundary = {
        "onError": [
            {
                "action": "retry",
                "errorCodes": ["Task:400007"],
                "retryPolicy": {
                    "maxRetries": 2,
                    "initialDelay": "PT0.01S",
                    "backoffType": "fixed",
                    "useJitter": False,
                },
            }
        ]
    }
    h = harness(fan_task(itemsPath="$.items", errorBoundary=boundary), ITEM_MAPPING)

    _, instance = run(h, {"items": [{"n": 2, "boom": True}]})

    assert instance.data["fanOutResultsSummary"]["failed"] == 1
    (row,) = [row for row in h.store.tasks if row.task_key == "fan#0"]
    assert (row.status, row.attempts, row.error_code) == ("failed", 3, "Task:400007")
