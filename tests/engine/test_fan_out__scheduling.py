"""The fan-out batch scheduler (seed 002) with stand-in item work: both bulkheads hold, the
timeouts and the join's early stop settle items with their codes, results come back in index
order, and an item's retry pause ends with its batch."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from instances.engine.fan_out import (
    BatchResult,
    Bulkhead,
    FanOutConfig,
    FanOutItem,
    ItemControl,
    ItemResult,
    JoinPolicy,
    run_batch,
)
from instances.engine.task_types import TaskFailure

INNER = {"key": "inner", "domain": "core", "flow": "sys-tasks", "version": "1.0.0"}


def config(**overrides: object) -> FanOutConfig:
    values: dict[str, object] = {"inner": INNER, **overrides}
    return FanOutConfig(**values)  # type: ignore[arg-type]


def items(count: int) -> list[FanOutItem]:
    return [FanOutItem(index, {"n": index}, str(index)) for index in range(count)]


class Probe:
    """Item work that sleeps `seconds[index]` (default `default`) and fails the indexes in
    `failing`, recording how many items ran at once."""

    def __init__(
        self, default: float = 0.05, seconds: dict[int, float] | None = None, failing=()
    ) -> None:
        self.default = default
        self.seconds = seconds or {}
        self.failing = set(failing)
        self.running = 0
        self.peak = 0
        self.started: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, item: FanOutItem, control: ItemControl) -> ItemResult:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.started.append(item.index)
        try:
            time.sleep(self.seconds.get(item.index, self.default))
        finally:
            with self.lock:
                self.running -= 1
        if item.index in self.failing:
            return ItemResult(item.index, item.key, False, error_code="Task:Http:500", attempts=1)
        return ItemResult(item.index, item.key, True, data=item.value, attempts=1)


def codes(result: BatchResult) -> list[str | None]:
    return [item.error_code for item in result.items]


def test_results_come_back_in_index_order_whatever_order_items_end_in():
    probe = Probe(seconds={0: 0.2, 1: 0.01, 2: 0.1})

    result = run_batch(items(3), config(max_parallel=3), Bulkhead(8), probe)

    assert [item.index for item in result.items] == [0, 1, 2]
    assert [item.data for item in result.items] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert result.summary() == {"total": 3, "succeeded": 3, "failed": 0, "timedOut": False}


def test_max_degree_of_parallelism_bounds_one_batch():
    probe = Probe(default=0.05)

    run_batch(items(12), config(max_parallel=3), Bulkhead(64), probe)

    assert probe.peak == 3


def test_the_process_wide_bulkhead_bounds_every_batch_together(caplog):
    bulkhead = Bulkhead(4)
    probe = Probe(default=0.05)
    results: list[BatchResult] = []

    def batch() -> None:
        results.append(run_batch(items(10), config(max_parallel=3), bulkhead, probe))

    caplog.set_level(logging.WARNING, "instances.engine.fan_out")
    threads = [threading.Thread(target=batch) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert probe.peak == 4  # 3 batches x 3 slots would be 9
    assert [r.succeeded for r in results] == [10, 10, 10]
    assert bulkhead.running == 0
    saturated = [r for r in caplog.records if r.getMessage().startswith("FanOutBulkheadSaturated")]
    assert 1 <= len(saturated) <= 3  # at most once per batch


def test_an_item_past_its_own_limit_is_item_timeout_and_the_rest_go_on():
    probe = Probe(default=0.01, seconds={1: 0.6})

    result = run_batch(items(3), config(max_parallel=3, item_timeout=0.2), Bulkhead(8), probe)

    assert codes(result) == [None, "FanOut:ItemTimeout", None]
    assert result.timed_out is False
    assert 150 <= result.items[1].duration_ms < 600


def test_a_batch_past_its_limit_cuts_running_and_queued_items_as_batch_timeout():
    probe = Probe(default=1.0, seconds={0: 0.05})

    result = run_batch(
        items(4), config(max_parallel=1, item_timeout=5, batch_timeout=0.5), Bulkhead(8), probe
    )

    assert codes(result) == [
        None,
        "FanOut:BatchTimeout",
        "FanOut:BatchTimeout",
        "FanOut:BatchTimeout",
    ]
    assert result.timed_out is True
    assert probe.started == [0, 1]  # the queued items never ran
    assert result.items[3].attempts == 0


def test_join_all_stops_early_at_the_first_failure():
    probe = Probe(default=0.5, seconds={0: 0.01}, failing={0})

    started = time.monotonic()
    result = run_batch(items(5), config(max_parallel=2, policy=JoinPolicy.ALL), Bulkhead(8), probe)

    assert time.monotonic() - started < 0.4
    assert codes(result) == [
        "Task:Http:500",
        "FanOut:ItemCancelled",  # running when the join was decided
        "FanOut:ItemNotStarted",
        "FanOut:ItemNotStarted",
        "FanOut:ItemNotStarted",
    ]
    assert result.joined(JoinPolicy.ALL, 1) is False


def test_first_success_stops_early_at_the_first_success():
    probe = Probe(default=0.5, seconds={1: 0.01})

    result = run_batch(
        items(4), config(max_parallel=2, policy=JoinPolicy.FIRST_SUCCESS), Bulkhead(8), probe
    )

    assert codes(result) == [
        "FanOut:ItemCancelled",
        None,
        "FanOut:ItemNotStarted",
        "FanOut:ItemNotStarted",
    ]
    assert result.joined(JoinPolicy.FIRST_SUCCESS, 1) is True


def test_an_item_abandoned_by_its_batch_keeps_its_slots_until_it_really_ends():
    # A timed-out item's thread still runs: the next item of a one-slot batch waits for it,
    # so the target never sees more than the limit.
    probe = Probe(default=0.01, seconds={0: 0.4})

    result = run_batch(items(2), config(max_parallel=1, item_timeout=0.1), Bulkhead(8), probe)

    assert codes(result) == ["FanOut:ItemTimeout", None]
    assert probe.peak == 1


def test_a_retry_pause_ends_when_the_item_runs_out_of_time():
    pauses: list[bool] = []

    def work(item: FanOutItem, control: ItemControl) -> ItemResult:
        pauses.append(control.pause(5.0))  # longer than the item has
        return ItemResult(item.index, item.key, False, error_code="Task:Http:503", attempts=1)

    result = run_batch(items(1), config(item_timeout=1), Bulkhead(8), work)

    assert pauses == [False]
    assert codes(result) == ["Task:Http:503"]


@pytest.mark.parametrize(
    ("policy", "succeeded", "failed", "timed_out", "joined"),
    [
        (JoinPolicy.ALL, 0, 0, False, True),  # empty batch: vacuous success
        (JoinPolicy.ALL, 3, 0, True, False),  # timed out
        (JoinPolicy.ALL, 2, 1, False, False),
        (JoinPolicy.ALL_SETTLED, 0, 0, False, True),
        (JoinPolicy.ALL_SETTLED, 0, 3, True, True),
        (JoinPolicy.QUORUM, 0, 0, False, False),  # empty: 0 never meets minSuccess >= 1
        (JoinPolicy.QUORUM, 2, 2, True, True),  # whatever timedOut says
        (JoinPolicy.QUORUM, 1, 2, False, False),
        (JoinPolicy.FIRST_SUCCESS, 0, 0, False, False),
        (JoinPolicy.FIRST_SUCCESS, 1, 2, True, True),
        (JoinPolicy.FIRST_SUCCESS, 0, 2, False, False),
    ],
)
def test_the_join_table_of_seed_002(policy, succeeded, failed, timed_out, joined):
    rows = [ItemResult(i, str(i), True) for i in range(succeeded)]
    rows += [ItemResult(succeeded + i, "x", False) for i in range(failed)]

    assert (
        BatchResult(rows, timed_out=timed_out).joined(policy, 2 if policy == "quorum" else 1)
        is joined
    )


def test_a_bulkhead_of_zero_is_refused():
    with pytest.raises(ValueError, match=">= 1"):
        Bulkhead(0)


def test_config_defaults_are_seed_002s():
    parsed = FanOutConfig.parse({"task": INNER, "itemsPath": "$.items"})

    assert (parsed.max_parallel, parsed.item_timeout, parsed.batch_timeout) == (4, 30.0, 120.0)
    assert (parsed.policy, parsed.result_key, parsed.item_alias) == (
        JoinPolicy.ALL_SETTLED,
        "fanOutResults",
        "item",
    )
    assert parsed.boundary.defined is False


def test_min_success_is_read_for_quorum_only():
    ignored = FanOutConfig.parse({"task": INNER, "join": {"policy": "all", "minSuccess": 0}})
    quorum = FanOutConfig.parse({"task": INNER, "join": {"policy": "quorum", "minSuccess": 3}})

    assert (ignored.min_success, quorum.min_success) == (1, 3)


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"mode": "durable"}, "only 'inline'"),
        ({"task": {"key": "inner"}}, "key, domain, flow and version"),
        ({"itemsPath": "items"}, "must start with '$.'"),
        ({"execution": {"maxDegreeOfParallelism": 0}}, "maxDegreeOfParallelism must be"),
        ({"execution": {"itemTimeoutSeconds": 50, "batchTimeoutSeconds": 10}}, "exceeds"),
        ({"join": {"policy": "most"}}, "not one of the four"),
        ({"join": {"policy": "quorum"}}, "minSuccess must be"),
    ],
)
def test_a_config_publishing_would_refuse_fails_cleanly_at_run_time(config, says):
    with pytest.raises(TaskFailure) as caught:
        FanOutConfig.parse({"task": INNER, **config})

    assert caught.value.code == "FanOut:InvalidConfiguration"
    assert says in caught.value.message
