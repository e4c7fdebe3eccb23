"""Where a fan-out item's time goes, for the fan-out suite: timestamps taken around the engine's
own functions while a load runs (the engine records none of this itself), attributed to the
item whose thread made the call.

Per item: queued (from its batch's start, or from the end of the item whose slot it took, to its
thread starting), the mapping's script call (and, inside it, the wait for an idle script
worker), the HTTP call beyond the target's own delay, and the rest of the item (clone, context,
bookkeeping). Per transition: the hop before its batch (read, admission, the steps before the
task) and after it (join, output, the flush that writes the data and the journal rows).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import httpx

from instances.engine import fan_out, script_pool


@dataclass
class ItemTrace:
    """One item's timestamps (perf_counter seconds)."""

    batch: int
    started: float
    ended: float = 0.0
    script: float = 0.0
    worker_wait: float = 0.0
    http: float = 0.0


@dataclass
class BatchTrace:
    """One batch: when it started and ended, its width, its items."""

    instance_id: str
    width: int
    started: float
    ended: float = 0.0
    items: list[ItemTrace] = field(default_factory=list)


class FanOutProbe:
    """Collects traces while `installed()`; `breakdown(delay)` summarises them."""

    def __init__(self) -> None:
        self.batches: dict[int, BatchTrace] = {}
        self._current = threading.local()

    def clear(self) -> None:
        """Forget every trace (between rounds)."""
        self.batches.clear()

    @contextmanager
    def installed(self) -> Iterator[FanOutProbe]:
        """Wrap the engine functions the traces come from, for the duration."""
        with ExitStack() as stack:
            for owner, name, wrapper in (
                (fan_out._Batch, "run", self._batch),
                (fan_out._Batch, "_run", self._item),
                (script_pool.ScriptPool, "run", self._timed("script")),
                (script_pool.ScriptPool, "_acquire", self._timed("worker_wait")),
                (httpx.Client, "request", self._timed("http")),
            ):
                stack.enter_context(mock.patch.object(owner, name, wrapper(getattr(owner, name))))
            yield self

    def _batch(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def run(batch: Any) -> Any:
            trace = BatchTrace(batch.instance_id, batch.config.max_parallel, time.perf_counter())
            self.batches[id(batch)] = trace
            try:
                return original(batch)
            finally:
                trace.ended = time.perf_counter()

        return run

    def _item(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def run(batch: Any, *args: Any) -> Any:
            trace = ItemTrace(id(batch), time.perf_counter())
            self._current.item = trace
            try:
                return original(batch, *args)
            finally:
                trace.ended = time.perf_counter()
                self._current.item = None
                self.batches[id(batch)].items.append(trace)

        return run

    def _timed(self, part: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
            def timed(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return original(*args, **kwargs)
                finally:
                    item = getattr(self._current, "item", None)
                    if item is not None:
                        setattr(item, part, getattr(item, part) + time.perf_counter() - started)

            return timed

        return wrap

    def breakdown(self, delay: float) -> dict[str, float]:
        """Mean milliseconds per item of each part, the target's own `delay` taken out of HTTP."""
        parts: dict[str, list[float]] = {
            "queued": [],
            "mapping": [],
            "worker wait": [],
            "http beyond target": [],
            "rest of item": [],
        }
        for batch in self.batches.values():
            items = sorted(batch.items, key=lambda item: item.started)
            ends = sorted(item.ended for item in items)
            for index, item in enumerate(items):
                # The first `width` items start with the batch; each later one on the slot the
                # `index - width`-th item to end gave back.
                free = batch.started if index < batch.width else ends[index - batch.width]
                parts["queued"].append(item.started - free)
                parts["mapping"].append(item.script)
                parts["worker wait"].append(item.worker_wait)
                parts["http beyond target"].append(item.http - delay)
                parts["rest of item"].append(item.ended - item.started - item.script - item.http)
        return {name: statistics.mean(values) * 1000 for name, values in parts.items() if values}

    def hop_around_batch(self, fired: float, ended: dict[str, float]) -> tuple[float, float]:
        """Mean milliseconds of the transitions' work before their batch (from `fired`, when
        every client was let go) and after it (to each one's end in `ended`, by instance)."""
        batches = [b for b in self.batches.values() if b.instance_id in ended]
        before = statistics.mean(b.started - fired for b in batches)
        after = statistics.mean(ended[b.instance_id] - b.ended for b in batches)
        return before * 1000, after * 1000
