"""The Fan-Out task (type 21, seed 002): resolve a collection from the instance data at run time,
run one inner task per item in parallel, and join the item results into one task output, which
the pipeline merges into the instance data once, whatever the batch's size.

- Items come from `itemsPath` (a `$.a.b` property path: a missing path or a null is an empty
  batch, any other value that is not an array fails the task) or from the mapping's
  `item_selector(context)`, exactly one of the two.
- The inner task is resolved once per batch and cloned per item; the mapping's
  `item_input_handler(task, context, item)` shapes each clone (its return value is audit only).
  Without a mapping the item is the branch context's body; a Script, Condition or Python inner
  task computes on it (on the mapping's value when there is one).
- Two bulkheads, taken in order: the batch's `maxDegreeOfParallelism` and the process-wide
  `Bulkhead` (`VNEXT["FAN_OUT_MAX_CONCURRENT_ITEMS"]`). An item holds its slots until its thread
  really ends, so the target never sees more calls than the limits allow, not even from an item
  the batch already gave up on (an HTTP inner task's timeout is capped at the item's time left).
- Each item's failure goes to the fan-out's own `errorBoundary` (retry with its policy, ignore,
  log, abort), inside the item's time; an item whose retries are exhausted is a Failed row.
- The join policy (all, allSettled, quorum, firstSuccess) makes the task's own success; `all`
  stops early at the first failure, `firstSuccess` at the first success.
- The output is the mapping's `output_handler(context, result)` value, or (handler absent or
  returning None) the default packaging `{resultKey: [...], resultKeySummary: {...}}`. A failed
  join still carries that output; a handler that raises fails the batch with no output.

Error codes of item rows, by precedence: `FanOut:ItemTimeout` (the item's own limit),
`FanOut:BatchTimeout`, `FanOut:ItemCancelled` (running when the join stopped early),
`FanOut:ItemNotStarted` (still queued when the join stopped early), else the inner task's own
code, `FanOut:ItemFailed` when it has none.
"""

from __future__ import annotations

import copy
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from instances.engine.boundaries import (
    BoundaryAction,
    BoundaryLevel,
    BoundaryLevels,
    TaskError,
    error_type_of,
    parse_boundary,
)
from instances.engine.errors import Codes, ErrorCode
from instances.engine.script_runner import ScriptHandle, response_data, stopped_code
from instances.engine.script_wire import ScriptObject
from instances.engine.scripts import ScriptError
from instances.engine.task_types import PURE_TASK_TYPES
from instances.engine.task_types.base import StandardResponse, TaskFailure
from instances.engine.telemetry import (
    FAN_OUT_BATCHES,
    FAN_OUT_ITEMS,
    FAN_OUT_SATURATED,
    FAN_OUT_SECONDS,
)
from instances.status import TaskType

logger = logging.getLogger(__name__)

DEFAULT_RESULT_KEY = "fanOutResults"
DEFAULT_MAX_CONCURRENT_ITEMS = 64
# The shortest timeout an HTTP inner task is given when its item is nearly out of time.
_MIN_CALL_SECONDS = 0.05

# Inner task types that compute on the item mapping's value (or the item itself): the pure ones
# and the Python task (its `main(input)`).
_COMPUTES_ON_INPUT = PURE_TASK_TYPES | {TaskType.PYTHON}


class JoinPolicy(StrEnum):
    """`join.policy`: how item results make the task's own success."""

    ALL = "all"
    ALL_SETTLED = "allSettled"
    QUORUM = "quorum"
    FIRST_SUCCESS = "firstSuccess"


@dataclass(frozen=True)
class FanOutConfig:
    """A fan-out task's `config`, with seed 002's defaults."""

    inner: dict[str, Any]
    items_path: str | None = None
    item_alias: str = "item"
    max_parallel: int = 4
    item_timeout: float = 30.0
    batch_timeout: float = 120.0
    policy: JoinPolicy = JoinPolicy.ALL_SETTLED
    min_success: int = 1
    result_key: str = DEFAULT_RESULT_KEY
    boundary: BoundaryLevels = field(default_factory=BoundaryLevels)

    @staticmethod
    def parse(config: Any) -> FanOutConfig:
        """The config of a published fan-out task. Publishing refuses what is wrong here; a
        task published before a rule existed still fails cleanly (`FanOut:InvalidConfiguration`)."""
        if not isinstance(config, dict):
            raise _invalid("the fan-out task has no config")
        if config.get("mode", "inline") != "inline":
            raise _invalid(f"mode {config.get('mode')!r} is not supported: only 'inline'")
        inner = config.get("task")
        if not isinstance(inner, dict) or not all(
            inner.get(name) for name in ("key", "domain", "flow", "version")
        ):
            raise _invalid("the inner task reference needs key, domain, flow and version")
        items_path = config.get("itemsPath")
        if items_path is not None and (
            not isinstance(items_path, str) or not items_path.startswith("$.")
        ):
            raise _invalid(f"itemsPath {items_path!r} must start with '$.'")
        execution = _section(config, "execution")
        join = _section(config, "join")
        try:
            policy = JoinPolicy(join.get("policy", JoinPolicy.ALL_SETTLED))
        except ValueError:
            raise _invalid(f"join policy {join.get('policy')!r} is not one of the four") from None
        parsed = FanOutConfig(
            inner=inner,
            items_path=items_path,
            item_alias=str(config.get("itemAlias") or "item"),
            max_parallel=_positive(execution, "maxDegreeOfParallelism", 4),
            item_timeout=float(_positive(execution, "itemTimeoutSeconds", 30)),
            batch_timeout=float(_positive(execution, "batchTimeoutSeconds", 120)),
            policy=policy,
            # Other policies ignore minSuccess (seed 002), whatever it says.
            min_success=_positive(join, "minSuccess", 0) if policy is JoinPolicy.QUORUM else 1,
            result_key=str(join.get("resultKey") or DEFAULT_RESULT_KEY),
            boundary=BoundaryLevels(
                ((BoundaryLevel.TASK, parse_boundary(config.get("errorBoundary"))),)
            ),
        )
        if parsed.item_timeout > parsed.batch_timeout:
            raise _invalid("itemTimeoutSeconds exceeds batchTimeoutSeconds")
        return parsed


def _section(config: dict[str, Any], name: str) -> dict[str, Any]:
    value = config.get(name)
    return value if isinstance(value, dict) else {}


def _positive(source: dict[str, Any], name: str, default: int) -> int:
    value = source.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _invalid(f"{name} must be an integer >= 1, not {value!r}")
    return value


def _invalid(message: str) -> TaskFailure:
    return TaskFailure(Codes.FAN_OUT_INVALID, message)


def items_at(data: Any, path: str) -> list[Any]:
    """The items `itemsPath` selects from `data`: a missing segment (or a null) is an empty
    batch; a value that is not an array fails the task."""
    node = data
    for segment in path[2:].split("."):
        if not isinstance(node, dict) or segment not in node:
            return []
        node = node[segment]
    if node is None:
        return []
    if not isinstance(node, list):
        raise _invalid(f"itemsPath {path} resolves to a {_json_type(node)}, not an array")
    return node


def _json_type(value: Any) -> str:
    names = {bool: "boolean", int: "number", float: "number", str: "string", dict: "object"}
    return names.get(type(value), type(value).__name__)


def item_key(value: Any, index: int) -> str:
    """An item's key: its `id`, else its `key` (strings, or integers written as text), else
    its zero-based index."""
    if isinstance(value, dict):
        for name in ("id", "key"):
            candidate = value.get(name)
            if isinstance(candidate, str) and candidate:
                return candidate
            if isinstance(candidate, int) and not isinstance(candidate, bool):
                return str(candidate)
    return str(index)


@dataclass(frozen=True)
class FanOutItem:
    """One item of a batch (`item.index`, `item.value`, `item.item_key` in scripts)."""

    index: int
    value: Any
    key: str

    def as_script_object(self) -> ScriptObject:
        """The `item` argument of `item_input_handler`."""
        return ScriptObject(index=self.index, value=copy.deepcopy(self.value), item_key=self.key)


@dataclass
class ItemResult:
    """How one item ended (seed 002's FanOutItemResult), with its journal details."""

    index: int
    key: str
    is_success: bool
    data: Any = None
    error_code: str | None = None
    error_message: str | None = None
    duration_ms: int = 0
    attempts: int = 0
    # The inner task's standard response (the item's journal row).
    response: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The item's entry of the default output."""
        return {
            "index": self.index,
            "itemKey": self.key,
            "isSuccess": self.is_success,
            "data": self.data,
            "errorCode": self.error_code,
            "errorMessage": self.error_message,
            "durationMs": self.duration_ms,
        }

    def as_script_object(self) -> ScriptObject:
        """The item as `output_handler` sees it in `result.items`."""
        return ScriptObject(
            index=self.index,
            item_key=self.key,
            is_success=self.is_success,
            data=copy.deepcopy(self.data),
            error_code=self.error_code,
            error_message=self.error_message,
            duration_ms=self.duration_ms,
        )


@dataclass
class BatchResult:
    """Every item's result in index order, and whether the batch ran out of time."""

    items: list[ItemResult]
    timed_out: bool = False
    duration_ms: int = 0

    @property
    def total(self) -> int:
        """How many items the batch had."""
        return len(self.items)

    @property
    def succeeded(self) -> int:
        """How many items succeeded (an ignored failure counts as a success)."""
        return sum(1 for item in self.items if item.is_success)

    @property
    def failed(self) -> int:
        """How many items did not succeed."""
        return self.total - self.succeeded

    def summary(self) -> dict[str, Any]:
        """`{resultKey}Summary`."""
        return {
            "total": self.total,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "timedOut": self.timed_out,
        }

    def joined(self, policy: JoinPolicy, min_success: int) -> bool:
        """True when `policy` holds: the fan-out task succeeded. An empty batch meets `all` and
        `allSettled` and fails the thresholds (0 successes never reach one)."""
        if policy is JoinPolicy.ALL:
            return self.failed == 0 and not self.timed_out
        if policy is JoinPolicy.QUORUM:
            return self.succeeded >= min_success
        if policy is JoinPolicy.FIRST_SUCCESS:
            return self.succeeded >= 1
        return True

    def as_script_object(self) -> ScriptObject:
        """The `result` argument of `output_handler`."""
        return ScriptObject(
            total=self.total,
            succeeded=self.succeeded,
            failed=self.failed,
            timed_out=self.timed_out,
            items=[item.as_script_object() for item in self.items],
        )


def default_output(result: BatchResult, result_key: str) -> dict[str, Any]:
    """The default packaging: every item's result under `result_key` and the summary under
    `{result_key}Summary`."""
    return {
        result_key: [item.as_dict() for item in result.items],
        f"{result_key}Summary": result.summary(),
    }


class Bulkhead:
    """The process-wide limit on running fan-out items, shared by every batch of every
    instance and workflow in the process, and the threads those items run on."""

    def __init__(self, limit: int) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"the fan-out bulkhead needs a limit >= 1, not {limit!r}")
        self.limit = limit
        self.running = 0
        self._lock = threading.Lock()
        # Batches that found no slot: woken when one is given back. Only they are: an item's
        # end wakes its own batch, never every batch in the process.
        self._waiting: set[_Batch] = set()
        self._pool: ThreadPoolExecutor | None = None

    def take(self, batch: _Batch) -> bool:
        """Take a slot for an item of `batch`; False (and `batch` woken at the next slot given
        back) when all are taken."""
        with self._lock:
            if self.running < self.limit:
                self.running += 1
                return True
            self._waiting.add(batch)
            return False

    def give_back(self) -> None:
        """An item ended: free its slot and wake the batches waiting for one."""
        with self._lock:
            self.running -= 1
            waiting, self._waiting = self._waiting, set()
        for batch in waiting:
            batch.wake()

    def start(self, work: Callable[[], None]) -> None:
        """Run `work` on an item thread; the caller holds a slot (`take`)."""
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    # At most `limit` items run at once, so `limit` threads never queue work.
                    self._pool = ThreadPoolExecutor(self.limit, thread_name_prefix="fan-out")
        self._pool.submit(work)


class ItemControl:
    """What an item's work may ask of its batch: the time it has left, and a wait that ends
    early when the batch is over."""

    def __init__(self, deadline: float, batch_over: threading.Event) -> None:
        self.deadline = deadline
        self._batch_over = batch_over

    def remaining(self) -> float:
        """Seconds until the item's (or its batch's) limit."""
        return self.deadline - time.monotonic()

    def pause(self, seconds: float) -> bool:
        """Wait `seconds` before a retry; False when the item or its batch ran out of time
        (or the batch ended) before that."""
        if seconds >= self.remaining():
            return False
        return not self._batch_over.wait(seconds)

    @property
    def abandoned(self) -> bool:
        """True once the batch no longer waits for this item."""
        return self._batch_over.is_set()


ItemWork = Callable[[FanOutItem, ItemControl], ItemResult]


def run_batch(
    items: list[FanOutItem],
    config: FanOutConfig,
    bulkhead: Bulkhead,
    work: ItemWork,
    *,
    task_key: str = "",
    instance_id: str = "",
    release: Callable[[], None] = lambda: None,
) -> BatchResult:
    """Run `work` once per item under both bulkheads and the batch's limits; every item's
    result in index order. The items' own outcomes come from `work`; timeouts and the join's
    early stop settle the rest with the fan-out codes."""
    batch = _Batch(
        items, config, bulkhead, work, task_key=task_key, instance_id=instance_id, release=release
    )
    return batch.run()


class _Batch:
    """One batch's scheduling: dispatch under both bulkheads, settle timeouts and early stops,
    collect results. Its state is guarded by its own condition, which its items' ends (and a
    slot of the process-wide bulkhead given back) notify."""

    def __init__(
        self,
        items: list[FanOutItem],
        config: FanOutConfig,
        bulkhead: Bulkhead,
        work: ItemWork,
        *,
        task_key: str,
        instance_id: str,
        release: Callable[[], None],
    ) -> None:
        self.config = config
        self.bulkhead = bulkhead
        self.work = work
        self.task_key = task_key
        self.instance_id = instance_id
        self.release = release
        self.pending: deque[FanOutItem] = deque(items)
        self.items = items
        # index -> (item, when it started, its deadline)
        self.running: dict[int, tuple[FanOutItem, float, float]] = {}
        self.results: dict[int, ItemResult] = {}
        self.threads = 0
        self.over = threading.Event()
        self.saturated = False
        self.changed = threading.Condition(threading.Lock())

    def wake(self) -> None:
        """Something the batch waits for happened: an item ended, or a slot is free."""
        with self.changed:
            self.changed.notify()

    def run(self) -> BatchResult:
        started = time.monotonic()
        batch_deadline = started + self.config.batch_timeout
        timed_out = False
        changed = self.changed
        with changed:
            while True:
                now = time.monotonic()
                for item, began, deadline in list(self.running.values()):
                    if now >= deadline:
                        self._settle(item, began, Codes.FAN_OUT_ITEM_TIMEOUT, now)
                if self._stops_early():
                    self._cut(now, Codes.FAN_OUT_ITEM_CANCELLED, Codes.FAN_OUT_ITEM_NOT_STARTED)
                    break
                if not self.running and not self.pending:
                    break
                if now >= batch_deadline:
                    timed_out = True
                    settled = len(self.results)
                    self._cut(now, Codes.FAN_OUT_BATCH_TIMEOUT, Codes.FAN_OUT_BATCH_TIMEOUT)
                    logger.warning(
                        "FanOutBatchTimedOut task=%s instance=%s settled=%d of %d after %.0f s",
                        self.task_key,
                        self.instance_id,
                        settled,
                        len(self.items),
                        self.config.batch_timeout,
                        extra={"event": "FanOutBatchTimedOut", "settled": settled},
                    )
                    break
                self._dispatch(now, batch_deadline)
                wake = min([batch_deadline, *(d for _, _, d in self.running.values())])
                changed.wait(max(wake - now, 0.001))
            self.over.set()
        results = [self.results[item.index] for item in self.items]
        duration = int((time.monotonic() - started) * 1000)
        return BatchResult(results, timed_out=timed_out, duration_ms=duration)

    def _dispatch(self, now: float, batch_deadline: float) -> None:
        bulkhead = self.bulkhead
        while self.pending and self.threads < self.config.max_parallel:
            if not bulkhead.take(self):
                if not self.saturated:
                    self.saturated = True
                    FAN_OUT_SATURATED.inc()
                    logger.warning(
                        "FanOutBulkheadSaturated task=%s instance=%s limit=%d: items wait for "
                        "the process-wide fan-out limit",
                        self.task_key,
                        self.instance_id,
                        bulkhead.limit,
                        extra={"event": "FanOutBulkheadSaturated", "limit": bulkhead.limit},
                    )
                return
            item = self.pending.popleft()
            self.threads += 1
            deadline = min(now + self.config.item_timeout, batch_deadline)
            self.running[item.index] = (item, now, now + self.config.item_timeout)
            control = ItemControl(deadline, self.over)
            try:
                bulkhead.start(functools.partial(self._run, item, control, now))
            except BaseException:
                # No thread took it (the pool shut down): the slot and the item go back.
                del self.running[item.index]
                self.threads -= 1
                self.pending.appendleft(item)
                bulkhead.give_back()
                raise

    def _run(self, item: FanOutItem, control: ItemControl, began: float) -> None:
        try:
            result = self.work(item, control)
        except Exception as exc:  # the work converts failures; this guards the bookkeeping
            logger.exception("fan-out item %s#%d raised", self.task_key, item.index)
            result = ItemResult(
                item.index,
                item.key,
                False,
                error_code=Codes.FAN_OUT_ITEM_FAILED.code,
                error_message=f"the item failed: {exc}",
                attempts=1,
            )
        finally:
            self.release()
        with self.changed:
            self.threads -= 1
            if item.index in self.running:
                del self.running[item.index]
                result.duration_ms = int((time.monotonic() - began) * 1000)
                self.results[item.index] = result
            self.changed.notify()
        # After the batch's own lock is let go: giving the slot back takes other batches' locks.
        self.bulkhead.give_back()

    def _stops_early(self) -> bool:
        policy = self.config.policy
        if policy is JoinPolicy.ALL:
            return any(not r.is_success for r in self.results.values()) and bool(
                self.running or self.pending
            )
        if policy is JoinPolicy.FIRST_SUCCESS:
            return any(r.is_success for r in self.results.values()) and bool(
                self.running or self.pending
            )
        return False

    def _cut(self, now: float, running: ErrorCode, queued: ErrorCode) -> None:
        # Settle every item still out: a running one by `running` (its own limit comes first),
        # a queued one by `queued`.
        for item, began, deadline in list(self.running.values()):
            code = Codes.FAN_OUT_ITEM_TIMEOUT if now >= deadline else running
            self._settle(item, began, code, now)
        while self.pending:
            item = self.pending.popleft()
            self._settle(item, None, queued, now)

    def _settle(self, item: FanOutItem, began: float | None, code: ErrorCode, now: float) -> None:
        self.running.pop(item.index, None)
        self.results[item.index] = ItemResult(
            item.index,
            item.key,
            False,
            error_code=code.code,
            error_message=_SETTLED_MESSAGES[code.code].format(
                item=self.config.item_timeout, batch=self.config.batch_timeout
            ),
            duration_ms=int((now - began) * 1000) if began is not None else 0,
            attempts=1 if began is not None else 0,
        )


_SETTLED_MESSAGES = {
    Codes.FAN_OUT_ITEM_TIMEOUT.code: "the item ran past its itemTimeoutSeconds ({item:g} s)",
    Codes.FAN_OUT_BATCH_TIMEOUT.code: "the batch ran past its batchTimeoutSeconds ({batch:g} s)",
    Codes.FAN_OUT_ITEM_CANCELLED.code: "cancelled: the join policy was decided early",
    Codes.FAN_OUT_ITEM_NOT_STARTED.code: "not started: the join policy was decided early",
}


@dataclass
class InnerTask:
    """The inner task, resolved once per batch: how to clone its view and run it."""

    key: str
    task_type: str
    clone: Callable[[], ScriptObject]
    execute: Callable[[ScriptObject, Any], StandardResponse]


@dataclass
class FanOutRun:
    """What a fan-out task did: the batch, its output (the one data patch), and its failure
    when the join was not met."""

    result: BatchResult
    output: dict[str, Any]
    failure: TaskFailure | None
    # The output made again on other instance data (the output handler reads it); None when
    # the output is the default packaging, which does not read the data.
    rederive: Callable[[dict[str, Any]], dict[str, Any]] | None = None


@dataclass
class FanOutTask:
    """One execution of a fan-out task."""

    task_key: str
    config: FanOutConfig
    inner: InnerTask
    script: ScriptHandle | None
    # `context` for the mapping's handlers; an item's branch context has the item as its body.
    # `context(body)`: a handler's context; `context(body, data)` with other instance data.
    context: Callable[..., ScriptObject]
    bulkhead: Bulkhead
    instance_id: str
    data: dict[str, Any]
    # Frees what an item thread holds (its database connections) when the item ends.
    release: Callable[[], None] = lambda: None

    def run(self) -> FanOutRun:
        """Select the items, run the batch, join and package. Raises `TaskFailure` for what
        fails the batch before or after its items: a bad selection, a nested fan-out, an item
        selector or output handler that raised."""
        if self.inner.task_type == TaskType.FAN_OUT:
            raise _invalid(
                f"nested fan-out: the inner task {self.inner.key} is itself a Fan-Out task"
            )
        if self.script is not None and not self.script.has("item_input_handler"):
            raise _invalid("the fan-out mapping defines no item_input_handler")
        items = [
            FanOutItem(index, value, item_key(value, index))
            for index, value in enumerate(self._select())
        ]
        logger.info(
            "FanOutBatchStarted task=%s instance=%s items=%d alias=%s maxDegreeOfParallelism=%d "
            "policy=%s",
            self.task_key,
            self.instance_id,
            len(items),
            self.config.item_alias,
            self.config.max_parallel,
            self.config.policy,
            extra={"event": "FanOutBatchStarted", "items": len(items)},
        )
        result = run_batch(
            items,
            self.config,
            self.bulkhead,
            self._work,
            task_key=self.task_key,
            instance_id=self.instance_id,
            release=self.release,
        )
        for item in result.items:
            FAN_OUT_ITEMS.labels(_item_outcome(item)).inc()
            if not item.is_success:
                logger.warning(
                    "FanOutItemFailed task=%s instance=%s item=%s index=%d code=%s",
                    self.task_key,
                    self.instance_id,
                    item.key,
                    item.index,
                    item.error_code,
                    extra={"event": "FanOutItemFailed", "errorCode": item.error_code},
                )
        logger.info(
            "FanOutBatchCompleted task=%s instance=%s total=%d succeeded=%d failed=%d "
            "duration_ms=%d",
            self.task_key,
            self.instance_id,
            result.total,
            result.succeeded,
            result.failed,
            result.duration_ms,
            extra={"event": "FanOutBatchCompleted", **result.summary()},
        )
        output = self._output(result)
        failure = None
        joined = result.joined(self.config.policy, self.config.min_success)
        FAN_OUT_BATCHES.labels("succeeded" if joined else "failed").inc()
        FAN_OUT_SECONDS.observe(result.duration_ms / 1000)
        if not joined:
            failure = TaskFailure(
                Codes.FAN_OUT_JOIN_FAILED,
                f"join policy {self.config.policy} not met: {result.succeeded} of "
                f"{result.total} items succeeded"
                + (f" (minSuccess {self.config.min_success})" if self._threshold else "")
                + (", the batch timed out" if result.timed_out else ""),
            )
        rederive = None
        if self.script is not None and self.script.has("output_handler"):

            def rederive(data: dict[str, Any]) -> dict[str, Any]:
                return self._output(result, data)

        return FanOutRun(result, output, failure, rederive)

    @property
    def _threshold(self) -> bool:
        return self.config.policy is JoinPolicy.QUORUM

    def _select(self) -> list[Any]:
        selects = self.script is not None and self.script.has("item_selector")
        if selects == (self.config.items_path is not None):
            raise _invalid(
                "give exactly one of itemsPath and the mapping's item_selector"
                + (" (both are given)" if selects else " (neither is given)")
            )
        if self.config.items_path is not None:
            return items_at(self.data, self.config.items_path)
        assert self.script is not None
        try:
            selected = response_data(self.script.call("item_selector", self.context(None)))
        except ScriptError as exc:
            raise TaskFailure(
                stopped_code(exc, Codes.TASK_INPUT_MAPPING_FAILED),
                f"FanOut item selector failed: {exc}",
            ) from exc
        if selected is None:
            return []
        if not isinstance(selected, list):
            raise _invalid(f"the item selector returned a {_json_type(selected)}, not a list")
        return selected

    def _work(self, item: FanOutItem, control: ItemControl) -> ItemResult:
        boundary = self.config.boundary
        attempts = 0
        while True:
            attempts += 1
            try:
                response = self._attempt(item, control)
                return ItemResult(
                    item.index,
                    item.key,
                    True,
                    data=response.data,
                    attempts=attempts,
                    response=response.as_dict(),
                )
            except TaskFailure as failure:
                error = failure
            except Exception as exc:  # an executor's unexpected error is the item's failure
                error = TaskFailure(Codes.FAN_OUT_ITEM_FAILED, f"the inner task raised: {exc}")
            failed = ItemResult(
                item.index,
                item.key,
                False,
                data=error.response.data if error.response is not None else None,
                error_code=error.code or Codes.FAN_OUT_ITEM_FAILED.code,
                error_message=error.message,
                attempts=attempts,
                response=error.response.as_dict() if error.response is not None else None,
            )
            if not boundary.defined or control.abandoned:
                return failed
            matched = TaskError(error.code, error.status, error_type_of(error.code))
            decision = boundary.decide(matched)
            if decision is not None and decision.action is BoundaryAction.RETRY:
                policy = decision.rule.retry_policy
                # After attempt n comes retry n.
                if policy is not None and policy.allows(attempts):
                    if control.pause(policy.delay(attempts).total_seconds()):
                        continue
                    return failed
                decision = boundary.decide(matched, without_retry=True)
            if decision is not None and decision.action is BoundaryAction.IGNORE:
                # Ignored: the item counts as a success; its row keeps what was ignored.
                failed.is_success = True
                return failed
            if decision is not None and decision.action is BoundaryAction.LOG:
                logger.warning(
                    "fan-out item %s#%d failed (%s), logged by the item error boundary",
                    self.task_key,
                    item.index,
                    error.code,
                )
            return failed

    def _attempt(self, item: FanOutItem, control: ItemControl) -> StandardResponse:
        task = self.inner.clone()
        context = self.context(item.value)
        input_data: Any = None
        if self.script is not None:
            try:
                returned = self.script.call(
                    "item_input_handler", task, context, item.as_script_object(), updates=(0,)
                )
            except ScriptError as exc:
                raise TaskFailure(
                    stopped_code(exc, Codes.TASK_INPUT_MAPPING_FAILED),
                    f"item_input_handler failed: {exc}",
                ) from exc
            if self.inner.task_type in _COMPUTES_ON_INPUT:
                input_data = response_data(returned)
        elif self.inner.task_type in _COMPUTES_ON_INPUT:
            # Without an item mapping a pure inner task computes on the item itself, as a
            # Script task reads its branch's body.
            input_data = copy.deepcopy(item.value)
        if self.inner.task_type == TaskType.HTTP:
            configured = float(task.get("timeout_seconds") or 30)
            task.timeout_seconds = max(min(configured, control.remaining()), _MIN_CALL_SECONDS)
        return self.inner.execute(task, input_data)

    def _output(self, result: BatchResult, data: dict[str, Any] | None = None) -> dict[str, Any]:
        if self.script is not None and self.script.has("output_handler"):
            context = self.context(None) if data is None else self.context(None, data)
            try:
                returned = self.script.call("output_handler", context, result.as_script_object())
            except ScriptError as exc:
                raise TaskFailure(
                    stopped_code(exc, Codes.FAN_OUT_OUTPUT_FAILED),
                    f"FanOut task output handler failed: {exc}",
                ) from exc
            if returned is not None:
                # A response with no data replaces the default with nothing.
                value = response_data(returned)
                return value if isinstance(value, dict) else {}
        return default_output(result, self.config.result_key)


# The item outcomes `vnext_fan_out_items` counts, by the item's error code.
_ITEM_OUTCOMES = {
    Codes.FAN_OUT_ITEM_TIMEOUT.code: "timed_out",
    Codes.FAN_OUT_BATCH_TIMEOUT.code: "timed_out",
    Codes.FAN_OUT_ITEM_CANCELLED.code: "cancelled",
    Codes.FAN_OUT_ITEM_NOT_STARTED.code: "not_started",
}


def _item_outcome(item: ItemResult) -> str:
    if item.is_success:
        return "succeeded"
    return _ITEM_OUTCOMES.get(item.error_code or "", "failed")
