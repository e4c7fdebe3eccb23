"""Script isolation cost: one rule call through the worker pool, beside the same call run in this
process (`InProcessExecutor`, same guards, no process boundary: the "before") and the handler as
plain Python.

Every figure is measured in the same run, in interleaved rounds (the order rotates each round),
so the shared machine's noise hits every contender alike:
(1) per-call latency, p50 and p99 from `time.perf_counter_ns` around each call, with the small
    rule context and with a ~20 KB instance `data` the rule does not read (the argument-size cost);
(2) where a pool call's time goes: the JSON work on both sides of the pipe, measured here with the
    pool's own encoders, and the pipe round trip of an echo process using the same framing;
(3) throughput of 1, 2 and 4 threads sharing one pool of 2 workers (and in-process, for reference).
After (1): the CPU time a pool call costs the caller and the worker (Linux `schedstat`).

Target (issue 32): pool p50 <= 100 us for the rule call (it was 165 us).
`BENCH_PROFILE=1` adds a cProfile of the parent side of `ScriptPool.run`.
"""

from __future__ import annotations

import cProfile
import gc
import json
import os
import pstats
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.in_process import InProcessExecutor
from bench.summary import record
from bench.timing import percentile
from instances.engine.sandbox import run_call
from instances.engine.script_pool import PoolSettings, ScriptCall, ScriptPool, frame
from instances.engine.script_wire import (
    ScriptObject,
    decode_argument,
    decode_result,
)
from instances.engine.scripts import DEFAULT_ALLOWED_MODULES, compile_script

RULE = """
def handler(context):
    data = context.instance.data
    return data.get("mode") == "auto" and sum(item["amount"] for item in data["items"]) > 100
"""
LOCATION = "./src/BenchRule.py"
TARGET_P50_US = 100.0

POOL_SIZE = 2
WARMUP = 500
ROUNDS = 5
PER_ROUND = 1000  # ROUNDS * PER_ROUND = 5,000 timed calls per contender
BREAKDOWN_CALLS = 2000
PLACEMENT_CALLS = 2000
IDLE_CALLS = 500
IDLE_GAP_SECONDS = 0.003
BUSY_LOAD_PER_CPU = 0.75  # above this 1-minute load average per CPU, say the figures are noisy
THREAD_COUNTS = (1, 2, 4)
THROUGHPUT_ROUNDS = 3
THROUGHPUT_CALLS = 2000  # per round, split evenly between the threads
BIG_DATA_BYTES = 20_000
PROFILE_CALLS = 5000
CPU_CALLS = 3000

_HEADER = struct.Struct(">I")
# A child that answers every frame with a small frame: the pipe round-trip floor.
_ECHO = """
import os, struct
header = struct.Struct(">I")
answer = b'{"ok":true,"result":{"t":"v","v":true},"arguments":[],"log":[]}'
frame = header.pack(len(answer)) + answer
def read(size):
    chunks = []
    while size:
        chunk = os.read(0, size)
        if not chunk:
            raise SystemExit(0)
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)
while True:
    (length,) = header.unpack(read(4))
    read(length)
    os.write(1, frame)
"""


def plain_handler(context: Any) -> bool:
    """The rule as an ordinary function."""
    data = context.instance.data
    return data.get("mode") == "auto" and sum(item["amount"] for item in data["items"]) > 100


def rule_context(*, big: bool) -> ScriptObject:
    """The rule's `context`; `big` adds a ~20 KB `history` the rule does not read."""
    data: dict[str, Any] = {"mode": "auto", "items": [{"amount": n} for n in range(20)]}
    if big:
        history: list[dict[str, Any]] = []
        data["history"] = history
        while len(json.dumps(data)) < BIG_DATA_BYTES:
            n = len(history)
            history.append(
                {"at": f"2025-01-{n % 28 + 1:02d}T10:00:00Z", "by": f"user-{n}", "amount": n * 3,
                 "note": f"adjustment {n} for order ORD-{n:06d}"}
            )  # fmt: skip
    return ScriptObject(
        instance=ScriptObject(id="bench-instance", data=data, state="review"),
        body={},
        headers={},
        query={},
        transition=ScriptObject(key="to-pong"),
        task_responses={},
        event_payload=None,
    )


def rule_call(context: ScriptObject) -> ScriptCall:
    """The rule's handler called with `context`, as the engine would send it."""
    return ScriptCall(
        source=RULE,
        location=LOCATION,
        handler="handler",
        args=(context,),
        allowed_modules=DEFAULT_ALLOWED_MODULES,
        timeout_seconds=2.0,
    )


# --- (1) latency --------------------------------------------------------------------------------


@dataclass
class Latency:
    """Per-call nanoseconds of one contender."""

    name: str
    action: Callable[[], object]
    samples: list[int] = field(default_factory=list)

    def run(self, calls: int, *, keep: bool = True) -> None:
        """`calls` timed calls (kept unless warming up)."""
        action = self.action
        clock = time.perf_counter_ns
        samples = self.samples if keep else []
        for _ in range(calls):
            started = clock()
            action()
            samples.append(clock() - started)

    def us(self, fraction: float) -> float:
        """A percentile, in microseconds."""
        return percentile(self.samples, fraction) / 1000

    @property
    def mean_us(self) -> float:
        """Mean microseconds per call."""
        return sum(self.samples) / len(self.samples) / 1000


def latency(pool: ScriptPool) -> dict[str, Latency]:
    """(1): interleaved rounds of every contender; figures keyed by name."""
    in_process = InProcessExecutor()
    small, big = rule_context(big=False), rule_context(big=True)
    small_call, big_call = rule_call(small), rule_call(big)
    for call, context in ((small_call, small), (big_call, big)):
        expected = plain_handler(context)
        if pool.run(call).value is not expected or in_process.run(call).value is not expected:
            raise RuntimeError("the pool, in-process and plain results differ")
    contenders = [
        Latency("pool", lambda: pool.run(small_call)),
        Latency("in-process", lambda: in_process.run(small_call)),
        Latency("plain", lambda: plain_handler(small)),
        Latency("pool, 20 KB data", lambda: pool.run(big_call)),
        Latency("in-process, 20 KB data", lambda: in_process.run(big_call)),
        Latency("plain, 20 KB data", lambda: plain_handler(big)),
    ]
    for contender in contenders:
        contender.run(WARMUP, keep=False)
    for round_number in range(ROUNDS):
        shift = round_number % len(contenders)
        for contender in contenders[shift:] + contenders[:shift]:
            gc.collect()
            contender.run(PER_ROUND)
    return {contender.name: contender for contender in contenders}


def print_latency(results: dict[str, Latency]) -> None:
    """The (1) table, ratios and the target."""
    size = len(json.dumps(rule_context(big=True).instance.data))
    print(
        f"(1) rule call latency, {ROUNDS} interleaved rounds x {PER_ROUND} calls per contender; "
        f"pool of {POOL_SIZE} workers; {os.cpu_count()} CPUs"
    )
    print(
        f"{'contender':<24} {'N':>5} {'p50 us':>8} {'p99 us':>8} {'mean us':>8}"
        f" {'p50/in-proc':>11} {'p50/plain':>9}"
    )
    for prefix in ("", ", 20 KB data"):
        in_process, plain = results[f"in-process{prefix}"], results[f"plain{prefix}"]
        for name in ("pool", "in-process", "plain"):
            item = results[f"{name}{prefix}"]
            print(
                f"{item.name:<24} {len(item.samples):>5} {item.us(0.5):>8.1f} {item.us(0.99):>8.1f}"
                f" {item.mean_us:>8.1f} {item.us(0.5) / in_process.us(0.5):>10.1f}x"
                f" {item.us(0.5) / plain.us(0.5):>8.0f}x"
            )
    pool, in_process = results["pool"], results["in-process"]
    big_pool, big_in_process = results["pool, 20 KB data"], results["in-process, 20 KB data"]
    print(
        "  isolation cost per call (pool - in-process): "
        f"p50 {pool.us(0.5) - in_process.us(0.5):.1f} us, "
        f"p99 {pool.us(0.99) - in_process.us(0.99):.1f} us; with 20 KB data: "
        f"p50 {big_pool.us(0.5) - big_in_process.us(0.5):.1f} us, "
        f"p99 {big_pool.us(0.99) - big_in_process.us(0.99):.1f} us"
    )
    print(
        f"  argument size: instance data of {size:,} bytes of JSON adds "
        f"{big_pool.us(0.5) - pool.us(0.5):.1f} us to the pool's p50 "
        f"({(big_pool.us(0.5) - pool.us(0.5)) / (size / 1024):.1f} us per KB); "
        f"in-process: {big_in_process.us(0.5) - in_process.us(0.5):+.1f} us (no copy)"
    )
    verdict = "target met" if pool.us(0.5) <= TARGET_P50_US else "target NOT met"
    record(
        "rule call through the script pool p50",
        pool.us(0.5),
        "us",
        baseline="the same call in-process p50",
        baseline_value=in_process.us(0.5),
        target=f"<= {TARGET_P50_US:.0f} us",
        met=pool.us(0.5) <= TARGET_P50_US,
    )
    print(f"  pool p50 {pool.us(0.5):.1f} us vs target <= {TARGET_P50_US:.0f} us: {verdict}")
    if os.path.exists(f"/proc/{os.getpid()}/schedstat"):
        print_cpu_per_call()


def _worker_cpu_ns(pid: int) -> int:
    # Time the process has run on a CPU, in ns (the first field of its schedstat).
    with open(f"/proc/{pid}/schedstat", encoding="ascii") as stats:
        return int(stats.read().split()[0])


def print_cpu_per_call() -> None:
    """CPU time one pool call costs on each side of the pipe, beside its wall-clock p50: the
    part of the latency this code owns, steadier than the wall clock on a shared machine."""
    pool = ScriptPool(PoolSettings(size=1)).start()
    (pid,) = pool.worker_pids()
    try:
        print(
            f"  CPU per pool call ({CPU_CALLS:,} calls, 1-worker pool): "
            "parent (with its wait spin) + worker = total"
        )
        for label, big in (("small", False), ("20 KB data", True)):
            call = rule_call(rule_context(big=big))
            for _ in range(WARMUP):
                pool.run(call)
            worker_before, parent_before = _worker_cpu_ns(pid), time.thread_time_ns()
            for _ in range(CPU_CALLS):
                pool.run(call)
            parent = (time.thread_time_ns() - parent_before) / CPU_CALLS / 1000
            worker = (_worker_cpu_ns(pid) - worker_before) / CPU_CALLS / 1000
            print(
                f"  {label:<11} {parent:>7.1f} us + {worker:>7.1f} us = {parent + worker:>7.1f} us"
            )
    finally:
        pool.close()


# --- (2) breakdown ------------------------------------------------------------------------------


def _median_us(action: Callable[[], object], calls: int = BREAKDOWN_CALLS) -> float:
    clock = time.perf_counter_ns
    samples = []
    for _ in range(calls):
        started = clock()
        action()
        samples.append(clock() - started)
    return percentile(samples, 0.5) / 1000


class _Echo:
    """A child process answering each frame with a small frame, over the pool's kind of pipes."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-c", _ECHO], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.to_child = self.process.stdin.fileno()
        self.from_child = self.process.stdout.fileno()
        self.poller = select.poll()
        self.poller.register(self.from_child, select.POLLIN)

    def round_trip(self, message: bytes) -> bytes:
        """Send one frame, wait for the answer frame, return its body."""
        view = memoryview(message)
        while view:
            view = view[os.write(self.to_child, view) :]
        self.poller.poll(5000)
        (length,) = _HEADER.unpack(os.read(self.from_child, _HEADER.size))
        body = b""
        while len(body) < length:
            self.poller.poll(5000)
            body += os.read(self.from_child, length - len(body))
        return body

    def close(self) -> None:
        """End the child (it exits when its stdin closes)."""
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        self.process.wait(timeout=5)


def _parts_us(call: ScriptCall, echo: _Echo) -> list[float]:
    """Medians of each piece of one pool call, done here: parent encode, worker decode, the
    handler run (`run_call`, as the worker runs it), worker encode, parent decode, pipe round trip.
    """
    compiled = compile_script(call.source, call.location)
    message = frame(call.request())
    body = message[_HEADER.size :]
    args = [decode_argument(item) for item in json.loads(body)["args"]]

    def execute() -> Any:
        return run_call(
            compiled,
            call.handler,
            args,
            allowed_modules=call.allowed_modules,
            timeout_seconds=call.timeout_seconds,
        )

    outcome = execute()
    reply = {"ok": True, "result": outcome.result, "arguments": outcome.arguments, "log": []}

    def worker_encode() -> bytes:
        return json.dumps(reply, ensure_ascii=False, separators=(",", ":")).encode()

    reply_body = worker_encode()
    return [
        _median_us(lambda: frame(call.request())),
        _median_us(lambda: [decode_argument(item) for item in json.loads(body)["args"]]),
        _median_us(execute),
        _median_us(worker_encode),
        _median_us(lambda: decode_result(json.loads(reply_body)["result"])),
        _median_us(lambda: echo.round_trip(message)),
    ]


def breakdown(results: dict[str, Latency]) -> None:
    """(2): the pool call's p50 split into its JSON work and the pipe round trip."""
    echo = _Echo()
    try:
        print(
            f"\n(2) where a pool call's time goes: medians of {BREAKDOWN_CALLS:,} runs of each "
            "piece, done here with the pool's encoders, in us"
        )
        print(
            f"{'context':<11} {'req bytes':>9} {'parent enc':>10} {'worker dec':>10} "
            f"{'run_call':>8} {'worker enc':>10} {'parent dec':>10} {'pipe rt':>7} "
            f"{'sum':>6} {'pool p50':>8} {'rest':>6}"
        )
        for label, name, big in (
            ("small", "pool", False),
            ("20 KB data", "pool, 20 KB data", True),
        ):
            call = rule_call(rule_context(big=big))
            parts = _parts_us(call, echo)
            pool_p50 = results[name].us(0.5)
            widths = (10, 10, 8, 10, 10, 7)
            figures = " ".join(
                f"{value:>{width}.1f}" for value, width in zip(parts, widths, strict=True)
            )
            print(
                f"{label:<11} {len(frame(call.request())):>9,} {figures} {sum(parts):>6.1f} "
                f"{pool_p50:>8.1f} {pool_p50 - sum(parts):>6.1f}"
            )
        print(
            "  pipe rt = the request frame to an echo child (python -I) and a small answer back: "
            "two wake-ups, the floor\n  of any per-call process boundary; rest = pool p50 - sum "
            "(queue, polls, reads, cold caches)"
        )
        placement(echo)
    finally:
        echo.close()


def _pinned_p50s(pool: ScriptPool, call: ScriptCall, echo: _Echo, cpus: tuple[int, int]) -> str:
    """This thread on `cpus[0]`, the pool's worker and the echo child on `cpus[1]`."""
    message = frame(call.request())
    os.sched_setaffinity(0, {cpus[0]})
    os.sched_setaffinity(pool.worker_pids()[0], {cpus[1]})
    os.sched_setaffinity(echo.process.pid, {cpus[1]})
    pool_run = Latency("pool", lambda: pool.run(call))
    echo_run = Latency("echo", lambda: echo.round_trip(message))
    for item in (pool_run, echo_run):
        item.run(WARMUP, keep=False)
        item.run(PLACEMENT_CALLS)
    return f"{pool_run.us(0.5):>8.1f} {pool_run.us(0.99):>8.1f} {echo_run.us(0.5):>10.1f}"


def _after_idle_p50s(pool: ScriptPool, call: ScriptCall) -> str:
    """Calls each after IDLE_GAP_SECONDS asleep, as script calls come between a transition's
    database round trips: the worker (and the caller's CPU) has gone idle in between."""
    in_process = InProcessExecutor()
    figures = []
    for executor in (pool, in_process):
        clock = time.perf_counter_ns
        samples = []
        for _ in range(IDLE_CALLS):
            time.sleep(IDLE_GAP_SECONDS)
            started = clock()
            executor.run(call)
            samples.append(clock() - started)
        figures.append(percentile(samples, 0.5) / 1000)
        figures.append(percentile(samples, 0.99) / 1000)
    return " ".join(f"{value:>8.1f}" for value in figures)


def placement(echo: _Echo) -> None:
    """Where the worker runs matters: the same call with the caller and its worker pinned to the
    same CPU and to different CPUs, and after the worker has idled."""
    call = rule_call(rule_context(big=False))
    pool = ScriptPool(PoolSettings(size=1)).start()
    original = os.sched_getaffinity(0)
    try:
        print(
            f"\n  placement ({PLACEMENT_CALLS:,} calls each; 1-worker pool)   pool p50 pool p99"
            f" echo rt p50"
        )
        if hasattr(os, "sched_setaffinity") and len(original) >= 2:
            first, second = sorted(original)[:2]
            for label, cpus in (("caller and worker on one CPU", (first, first)),
                                ("caller and worker on two CPUs", (first, second))):  # fmt: skip
                try:
                    print(f"  {label:<44} {_pinned_p50s(pool, call, echo, cpus)}")
                except OSError as exc:
                    print(f"  {label:<44} n/a ({exc})")
            os.sched_setaffinity(0, original)
            os.sched_setaffinity(pool.worker_pids()[0], original)
            os.sched_setaffinity(echo.process.pid, original)
        else:
            print("  (needs sched_setaffinity and 2 CPUs)")
        print(
            f"  after {IDLE_GAP_SECONDS * 1000:.0f} ms idle, {IDLE_CALLS} calls"
            f"{'':<17} pool p50 pool p99 in-proc p50 in-proc p99"
        )
        print(f"  {'each call after a sleep (unpinned)':<44} {_after_idle_p50s(pool, call)}")
    finally:
        os.sched_setaffinity(0, original)
        pool.close()


# --- (3) throughput -----------------------------------------------------------------------------


def _throughput_round(run: Callable[[ScriptCall], object], call: ScriptCall, threads: int) -> float:
    """Seconds for THROUGHPUT_CALLS calls split between `threads` threads released together."""
    each = THROUGHPUT_CALLS // threads
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def worker() -> None:
        barrier.wait()
        try:
            for _ in range(each):
                run(call)
        except BaseException as exc:  # reported after the round
            errors.append(exc)

    workers = [threading.Thread(target=worker, name=f"bench-script-{n}") for n in range(threads)]
    for thread in workers:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in workers:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"{len(errors)} thread(s) failed: {errors[0]!r}")
    return elapsed


def throughput(pool: ScriptPool) -> None:
    """(3): calls/s for 1, 2, 4 threads on one pool of 2 workers, and in-process for reference."""
    call = rule_call(rule_context(big=False))
    in_process = InProcessExecutor()
    contenders = [
        (f"{name}, {threads} thread{'s' if threads > 1 else ''}", run, threads)
        for name, run in (("pool", pool.run), ("in-process", in_process.run))
        for threads in THREAD_COUNTS
    ]
    seconds: dict[str, list[float]] = {name: [] for name, _, _ in contenders}
    for round_number in range(THROUGHPUT_ROUNDS + 1):  # round 0 warms up
        shift = round_number % len(contenders)
        for name, run, threads in contenders[shift:] + contenders[:shift]:
            elapsed = _throughput_round(run, call, threads)
            if round_number:
                seconds[name].append(elapsed)
    print(
        f"\n(3) throughput, {THROUGHPUT_ROUNDS} interleaved rounds x {THROUGHPUT_CALLS:,} calls "
        f"(split between the threads); one pool of {POOL_SIZE} workers; {os.cpu_count()} CPUs"
    )
    print(f"{'contender':<22} {'calls/s':>8} {'round min..max':>15} {'vs 1 thread':>11}")
    for name, _, _ in contenders:
        rates = [THROUGHPUT_CALLS / value for value in seconds[name]]
        rate = THROUGHPUT_CALLS * len(rates) / sum(seconds[name])
        single = seconds[name.split(",")[0] + ", 1 thread"]
        single_rate = THROUGHPUT_CALLS * len(single) / sum(single)
        print(
            f"{name:<22} {rate:>8.0f} {f'{min(rates):.0f}..{max(rates):.0f}':>15} "
            f"{rate / single_rate:>10.2f}x"
        )
    print(
        "  in-process threads share one GIL; pool threads wait in the parent for an idle worker "
        "(the workers run in parallel, CPUs permitting)"
    )


# --- optional profile ---------------------------------------------------------------------------


def profile(pool: ScriptPool) -> None:
    """cProfile of PROFILE_CALLS pool calls (parent side), top 20 by total time."""
    call = rule_call(rule_context(big=False))
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(PROFILE_CALLS):
        pool.run(call)
    profiler.disable()
    print(f"\ncProfile of {PROFILE_CALLS:,} ScriptPool.run calls, parent side (top 20 by tottime)")
    pstats.Stats(profiler).strip_dirs().sort_stats("tottime").print_stats(20)


def main() -> None:
    """Run (1), (2), (3) and print them with their baselines."""
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    pool = ScriptPool(PoolSettings(size=POOL_SIZE)).start()
    try:
        results = latency(pool)
        print_latency(results)
        breakdown(results)
        throughput(pool)
        if os.environ.get("BENCH_PROFILE"):
            profile(pool)
        if pool.restarts or pool.timeouts:
            raise RuntimeError(f"{pool.restarts} worker restarts, {pool.timeouts} timeouts")
    finally:
        pool.close()
    load_after = os.getloadavg()[0]
    cpus = os.cpu_count() or 1
    busy = max(load_before, load_after) > BUSY_LOAD_PER_CPU * cpus
    print(
        f"\nscripts suite: {time.perf_counter() - started:.0f}s; load average (1 min) "
        f"{load_before:.2f} before, {load_after:.2f} after, {cpus} CPUs"
        + (": the machine was BUSY, figures unreliable" if busy else "")
    )
