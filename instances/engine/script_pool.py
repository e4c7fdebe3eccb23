"""The server side of script isolation: a pool of long-lived script worker processes.

Every script call (rule, mapping, timer, lock key ...) is one round trip to an idle worker: the
request carries the script's content hash (and its source the first time that worker sees it),
the handler, the JSON arguments and the deadline. The pool enforces the wall-clock deadline
itself: a worker that has not answered by then is SIGKILLed and replaced, and the call fails with
`Script:Timeout`; a worker that dies (memory limit, crash) is replaced and the call fails with
`Script:ResourceLimit`. The calling thread never waits on a script longer than its deadline.

Workers are started from one long-lived thread (their parent-death signal is tied to the thread
that started them) with `python -I`, an empty environment and an empty working directory.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import logging
import os
import pwd
import queue
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from instances.engine.script_wire import (
    ScriptObject,
    WireError,
    decode_result,
    encode_argument,
    json_default,
)
from instances.engine.scripts import (
    ERROR_KINDS,
    ScriptCompileError,
    ScriptError,
    ScriptHelper,
    ScriptResourceLimit,
    ScriptTimeout,
    ScriptUnavailable,
    source_hash,
)
from instances.engine.telemetry import SCRIPT_RESTARTS, script_called

logger = logging.getLogger("vnext.scripts")

_HEADER = struct.Struct(">I")
# How long a caller polls without sleeping for a script's answer before it blocks.
_SPIN_SECONDS = 60e-6
_PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from instances.engine.script_worker import main; main(sys.argv[2])"
)
_LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}


@dataclass(frozen=True)
class FollowUp:
    """A second handler of the same script that the worker calls right after the first one
    succeeds, in the same round trip: a script or condition task (types 7 and 8: no I/O between
    its input and output handlers) costs one exchange instead of two.

    The follow-up gets one argument, the first call's argument at `context_position` afresh
    (not as the first handler left it), its `body` set to `body` with `data` being what the
    first handler returned (`{"result": bool(...)}` of it when `condition`). It runs under its
    own time budget, in a fresh module namespace, as a separate call would."""

    handler: str
    context_position: int
    body: dict[str, Any]
    condition: bool = False

    def request(self) -> dict[str, Any]:
        """The `then` part of the worker request."""
        return {
            "handler": self.handler,
            "context": self.context_position,
            "body": self.body,
            "condition": self.condition,
        }


@dataclass(frozen=True)
class ScriptCall:
    """One call of a script handler: what to run, with which arguments, under which limits.

    `return_arguments` lists the positions of arguments whose state after the call is wanted
    back (an input handler may change its `task`). `helpers` are the helper libraries the script
    may import (its own `scripts.helpers` and its workflow's); like the script, each one's
    source crosses to a worker only until that worker has it cached by content hash."""

    source: str
    location: str
    handler: str
    args: tuple[Any, ...]
    allowed_modules: frozenset[str]
    timeout_seconds: float
    return_arguments: tuple[int, ...] = ()

    # The content hash workers cache compiled code by (the compiled script's, when known).
    digest: str = ""
    then: FollowUp | None = None
    helpers: tuple[ScriptHelper, ...] = ()
    # In a chained batch (`ScriptPool.run_batch`): where this call's data patch is, "then" (the
    # follow-up's value) or "result" (the handler's); its data part, when an object. Empty: the
    # call makes no patch.
    patch: str = ""

    @property
    def source_hash(self) -> str:
        """The content hash workers cache compiled code by."""
        return self.digest or source_hash(self.source)

    def request(self, arguments: list[Any] | None = None) -> dict[str, Any]:
        """The request a worker gets for this call (the source is added when it lacks it);
        `arguments`: the arguments already encoded (a batch shares some between calls)."""
        return {
            "op": "call",
            "hash": self.source_hash,
            "location": self.location,
            "handler": self.handler,
            "args": [encode_argument(arg) for arg in self.args] if arguments is None else arguments,
            "modules": _module_list(self.allowed_modules),
            "timeout": self.timeout_seconds,
            "return_args": list(self.return_arguments),
            **({"then": self.then.request()} if self.then else {}),
            **({"patch": self.patch} if self.patch else {}),
            **(
                {"helpers": [_helper_entry(helper) for helper in self.helpers]}
                if self.helpers
                else {}
            ),
        }

    def add_sources(self, request: dict[str, Any], known: set[str] | None = None) -> None:
        """Put into `request` the source of the script and of each helper whose `source_key`
        is not in `known` (every source when `known` is None)."""
        if known is None or source_key(request) not in known:
            request["source"] = self.source
        for entry, helper in zip(request.get("helpers") or (), self.helpers, strict=True):
            if known is None or source_key(entry) not in known:
                entry["source"] = helper.source

    def source_keys(self, request: dict[str, Any]) -> list[str]:
        """The `source_key`s of the script and its helpers in `request`."""
        return [source_key(request), *map(source_key, request.get("helpers") or ())]

    @property
    def budget_seconds(self) -> float:
        """The wall-clock time the whole exchange may take: each handler has its own budget."""
        return self.timeout_seconds * (2 if self.then else 1)


def source_key(entry: dict[str, Any]) -> str:
    """What a worker caches compiled code by: the content hash and the location (the same
    source at two locations is compiled twice: its errors name where it is)."""
    return f"{entry['hash']} {entry['location']}"


@functools.lru_cache(maxsize=256)
def _module_list(modules: frozenset[str]) -> list[str]:
    # Shared by every request of a script: the encoder only reads it.
    return sorted(modules)


def _helper_entry(helper: ScriptHelper) -> dict[str, Any]:
    return {
        "name": helper.name,
        "hash": helper.compiled.source_hash,
        "location": helper.compiled.location,
    }


@dataclass
class ScriptReply:
    """What a call returned: the handler's value and the requested arguments' new state."""

    value: Any
    arguments: list[Any] = field(default_factory=list)
    # The follow-up's value, or the error it ended with (a `FollowUp` call only).
    follow_up: Any = None
    follow_up_error: ScriptError | None = None


@dataclass(frozen=True)
class PoolSettings:
    """How the pool runs its workers."""

    size: int = max(os.cpu_count() or 1, 1)
    memory_mb: int = 512
    # The user workers drop to when the server runs as root; None keeps the server's user.
    user: str | None = "nobody"
    max_payload_bytes: int = 16 * 1024 * 1024
    # How long a call waits for an idle worker before failing with `Script:Unavailable`.
    wait_seconds: float = 10.0
    # Added to a call's timeout before the worker is killed: the worker's own budget reports
    # Python-level overruns with their line; the kill is for code stuck in C.
    grace_seconds: float = 0.5
    start_timeout_seconds: float = 30.0
    python: str = sys.executable


class _WorkerGone(Exception):
    pass


class _WorkerWasDead(_WorkerGone):
    # The request could not even be written: the worker died while idle (killed from outside).
    pass


class _WorkerStuck(Exception):
    pass


class _Worker:
    """One worker process and the pipes to it."""

    def __init__(self, process: subprocess.Popen[bytes], protections: dict[str, Any]) -> None:
        self.process = process
        self.protections = protections
        self.pid = process.pid
        assert process.stdin is not None
        assert process.stdout is not None
        self.to_worker = process.stdin.fileno()
        self.from_worker = process.stdout.fileno()
        self.poller = select.poll()
        self.poller.register(self.from_worker, select.POLLIN)
        # The `source_key`s of the code this worker has compiled (as far as this side knows).
        self.known_sources: set[str] = set()

    def exchange(self, message: bytes, deadline: float, max_payload: int) -> dict[str, Any]:
        try:
            _write_all(self.to_worker, message)
        except OSError as exc:
            raise _WorkerWasDead(str(exc)) from None
        # Most answers arrive whole in the first read: header and body from one buffer.
        buffer = self._read_some(deadline, spin=True)
        while len(buffer) < _HEADER.size:
            buffer += self._read_some(deadline)
        (length,) = _HEADER.unpack_from(buffer)
        if length > max_payload:
            raise _WorkerGone(f"answer of {length:,} bytes is over the limit")
        end = _HEADER.size + length
        while len(buffer) < end:
            buffer += self._read_some(deadline)
        try:
            reply = json.loads(buffer[_HEADER.size : end])
        except (ValueError, RecursionError) as exc:
            raise _WorkerGone(f"unreadable answer: {exc}") from None
        if not isinstance(reply, dict):
            raise _WorkerGone("unreadable answer")
        return reply

    def _read_some(self, deadline: float, *, spin: bool = False) -> bytes:
        # A short spin first: a quick answer is read without the scheduler's wake-up delay,
        # which on a small machine is most of a script call's cost.
        ready = bool(spin and self._spin_until_readable())
        if not ready:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.poller.poll(remaining * 1000):
                raise _WorkerStuck()
        try:
            chunk = os.read(self.from_worker, 1 << 20)
        except OSError as exc:
            raise _WorkerGone(str(exc)) from None
        if not chunk:
            raise _WorkerGone(self._exit_description())
        return chunk

    def _spin_until_readable(self) -> bool:
        until = time.perf_counter() + _SPIN_SECONDS
        while time.perf_counter() < until:
            if self.poller.poll(0):
                return True
        return False

    def _exit_description(self) -> str:
        try:
            code = self.process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            return "the worker closed its pipe"
        if code < 0:
            return f"the worker was killed by signal {signal.Signals(-code).name}"
        return f"the worker exited with status {code}"

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()
        _close_pipes(self)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            logger.error("script worker %s did not exit after SIGKILL", self.pid)


def _close_pipes(worker: _Worker) -> None:
    for stream in (worker.process.stdin, worker.process.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class _IdleWorkers:
    """The idle workers; the one given back last is taken first (its caches are warm)."""

    def __init__(self) -> None:
        self._ready = threading.Condition(threading.Lock())
        self._workers: list[_Worker] = []

    def put(self, worker: _Worker) -> None:
        with self._ready:
            self._workers.append(worker)
            self._ready.notify()

    def get(self, timeout: float) -> _Worker:
        """The last idle worker; `queue.Empty` when none is given back within `timeout`."""
        with self._ready:
            if not self._workers and not self._ready.wait_for(self._any, timeout):
                raise queue.Empty
            return self._workers.pop()

    def _any(self) -> bool:
        return bool(self._workers)


class ScriptPool:
    """A fixed-size pool of script workers shared by every thread of this process."""

    def __init__(self, settings: PoolSettings | None = None) -> None:
        self.settings = settings or PoolSettings()
        self._idle = _IdleWorkers()
        self._all: dict[int, _Worker] = {}
        self._lock = threading.Lock()
        self._spawns: queue.SimpleQueue[_Worker | bool | None] = queue.SimpleQueue()
        self._closed = False
        self._started = False
        self._workdir = ""
        self._spawner: threading.Thread | None = None
        # Workers replaced, and calls stopped at their deadline (the bench checks both are 0).
        self.restarts = 0
        self.timeouts = 0
        # Exchanges with a worker (a batch is one), as tests count them.
        self.round_trips = 0

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self, *, wait: bool = True) -> ScriptPool:
        """Start the workers (once); with `wait`, return when all of them are ready."""
        with self._lock:
            if self._started:
                return self
            self._started = True
            self._workdir = tempfile.mkdtemp(prefix="vnext-scripts-")
            os.chmod(self._workdir, 0o555)
            self._spawner = threading.Thread(
                target=self._spawn_loop, name="vnext-script-pool", daemon=True
            )
            self._spawner.start()
        for _ in range(self.settings.size):
            self._spawns.put(True)
        if wait:
            deadline = time.monotonic() + self.settings.start_timeout_seconds
            while len(self._all) < self.settings.size and time.monotonic() < deadline:
                time.sleep(0.01)
            if len(self._all) < self.settings.size:
                raise ScriptUnavailable(
                    "the script workers did not start; see the server log", location="pool"
                )
        return self

    def close(self) -> None:
        """Stop every worker; calls after this fail with `Script:Unavailable`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            workers = list(self._all.values())
            self._all.clear()
        self._spawns.put(None)
        for worker in workers:
            worker.kill()
        if self._workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)

    @property
    def size(self) -> int:
        """Workers alive now."""
        return len(self._all)

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (operations and tests)."""
        return sorted(self._all)

    def protections(self) -> dict[str, Any]:
        """What the workers reported in force when they started (rlimits, user, seccomp)."""
        workers = list(self._all.values())
        return dict(workers[0].protections) if workers else {}

    # --- calls -------------------------------------------------------------------------------

    def run(self, call: ScriptCall) -> ScriptReply:
        """Run one script call in a worker; raise the `ScriptError` it ends with. Counted by
        outcome in `vnext_script_calls`."""
        started = time.perf_counter()
        outcome = "error"
        try:
            reply = self._run(call)
            outcome = "ok"
            return reply
        except ScriptTimeout:
            outcome = "timeout"
            raise
        except ScriptResourceLimit:
            outcome = "resource_limit"
            raise
        except ScriptUnavailable:
            outcome = "unavailable"
            raise
        finally:
            script_called(outcome, time.perf_counter() - started)

    def run_batch(
        self, calls: Sequence[ScriptCall], *, chain: int | None = None, until_true: bool = False
    ) -> list[ScriptReply | ScriptError]:
        """Run `calls` one after the other in one worker, in one round trip; each call's reply,
        or the `ScriptError` it ended with. A context object passed to several calls crosses
        once (each call still gets its own copy of it, as from a call of its own).

        With `chain`, the argument at that position is a context whose `instance.data` takes,
        for each call, the data patches of the calls before it (see `ScriptCall.patch`), merged
        as the engine merges them: the calls run as if each one's output were merged before the
        next one starts. With `until_true`, the worker stops after the first call that returns
        a true value or fails (rules asked in order): the results end there."""
        if not calls:
            return []
        started = time.perf_counter()
        results: list[ScriptReply | ScriptError] = []
        try:
            try:
                reply = self._round_trip(_batch_request(calls, chain, until_true), calls)
            except ScriptError as exc:
                # No worker, or the worker was stopped (its deadline, its memory): the calls
                # it had not answered fail with that error, each as a call of its own would.
                results = [exc for _ in calls]
                return results
            parts = reply.get("replies") if reply.get("ok") else None
            if not isinstance(parts, list):
                error = _error_from(reply.get("error") or {}, calls[0].location)
                results = [error for _ in calls]
                return results
            for index, call in enumerate(calls):
                part = parts[index] if index < len(parts) else None
                if part is None and until_true and _settles(results):
                    break  # an earlier call held (or failed): this one was not asked
                if not isinstance(part, dict):
                    results.append(
                        ScriptResourceLimit(
                            "the script worker stopped before this call", location=call.location
                        )
                    )
                    continue
                self._log(part, call.location)
                try:
                    results.append(_reply_of(part, call))
                except ScriptError as exc:
                    results.append(exc)
            return results
        finally:
            # The calls shared the exchange: each is counted with its share of the time.
            elapsed = (time.perf_counter() - started) / max(len(results), 1)
            for result in results:
                script_called(_outcome_name(result), elapsed)

    def _run(self, call: ScriptCall) -> ScriptReply:
        request = call.request()
        reply = self._round_trip(request, (call,))
        self._log(reply, call.location)
        return _reply_of(reply, call)

    def _round_trip(self, request: dict[str, Any], calls: Sequence[ScriptCall]) -> dict[str, Any]:
        """One exchange of `request` (the call of `calls[0]`, or the batch of `calls`) with an
        idle worker; the worker's answer. Sends each script's source the worker lacks."""
        if not self._started:
            self.start()
        parts = request["calls"] if request.get("op") == "batch" else [request]
        first = calls[0]
        # Each call keeps the grace a call of its own would get (the worker's own per-call
        # budget reports an overrun first): a batch of calls near their limits is not killed
        # for what each would have been allowed alone.
        grace = self.settings.grace_seconds
        budget = sum(call.budget_seconds + grace for call in calls) - grace
        reply: dict[str, Any] | None = None
        while reply is None:
            worker = self._acquire(first.location)
            # Each failed exchange has already given the worker back, or replaced it.
            for call, part in zip(calls, parts, strict=True):
                call.add_sources(part, worker.known_sources)
            with contextlib.suppress(_WorkerWasDead):
                # A worker found dead never saw the call: another one takes it.
                reply = self._exchange(worker, request, first, budget)
        if reply.get("need_source"):
            # The worker evicted the compiled code since it last saw this script (or helper).
            for call, part in zip(calls, parts, strict=True):
                call.add_sources(part)
            try:
                reply = self._exchange(worker, request, first, budget)
            except _WorkerWasDead:
                raise ScriptResourceLimit(
                    "the script's worker stopped", location=first.location
                ) from None
        for call, part in zip(calls, parts, strict=True):
            worker.known_sources.update(call.source_keys(part))
        if reply.get("recycle"):
            self._replace(worker, "recycled")
        else:
            self._idle.put(worker)
        return reply

    def probe(self) -> dict[str, str]:
        """Ask a worker to try what an escaped script would (files, sockets, fork, exec) and
        report what its protections refused."""
        if not self._started:
            self.start()
        worker = self._acquire("probe")
        message = frame({"op": "probe"})
        try:
            reply = worker.exchange(message, time.monotonic() + 10, self.settings.max_payload_bytes)
        except (_WorkerGone, _WorkerStuck):
            self._replace(worker, "died")
            raise
        self._idle.put(worker)
        return dict(reply.get("probe") or {})

    def _exchange(
        self, worker: _Worker, request: dict[str, Any], call: ScriptCall, budget: float
    ) -> dict[str, Any]:
        # Counted before the write: a test pins how many exchanges a hop costs.
        self.round_trips += 1
        try:
            message = frame(request)
        except (TypeError, ValueError, RecursionError) as exc:
            self._idle.put(worker)
            raise ScriptError(
                f"the script's arguments are not JSON: {exc}", location=call.location
            ) from None
        if len(message) > self.settings.max_payload_bytes:
            self._idle.put(worker)
            raise ScriptResourceLimit(
                f"the script's arguments are larger than {self.settings.max_payload_bytes:,} bytes",
                location=call.location,
            )
        deadline = time.monotonic() + budget + self.settings.grace_seconds
        try:
            return worker.exchange(message, deadline, self.settings.max_payload_bytes)
        except _WorkerStuck:
            self.timeouts += 1
            self._replace(worker, "timeout")
            logger.warning(
                "script %s overran its deadline; worker %s killed", call.location, worker.pid
            )
            raise ScriptTimeout(
                f"script exceeded its time limit of {call.timeout_seconds:g} s; "
                "its worker was stopped",
                location=call.location,
            ) from None
        except _WorkerWasDead:
            self._replace(worker, "died")
            logger.warning("script worker %s had died while idle; replaced", worker.pid)
            raise
        except _WorkerGone as gone:
            self._replace(worker, "died")
            logger.warning("script worker %s died running %s: %s", worker.pid, call.location, gone)
            raise ScriptResourceLimit(
                f"the script's worker stopped ({gone}); "
                "the script may have exceeded its memory limit",
                location=call.location,
            ) from None

    def _acquire(self, location: str) -> _Worker:
        if self._closed:
            raise ScriptUnavailable("the script pool is closed", location=location)
        try:
            return self._idle.get(self.settings.wait_seconds)
        except queue.Empty:
            raise ScriptUnavailable(
                f"no script worker was free within {self.settings.wait_seconds:g} s",
                location=location,
            ) from None

    def _log(self, reply: dict[str, Any], location: str) -> None:
        for level, text in reply.get("log") or ():
            # One script line is one log line: a script cannot forge other entries.
            line = str(text).replace("\r", "\\r").replace("\n", "\\n")
            logger.log(_LOG_LEVELS.get(str(level), logging.ERROR), "[%s] %s", location, line)

    # --- workers -----------------------------------------------------------------------------

    def _replace(self, worker: _Worker, reason: str) -> None:
        SCRIPT_RESTARTS.labels(reason).inc()
        with self._lock:
            self._all.pop(worker.pid, None)
            closed = self._closed
        if closed:
            worker.kill()  # the spawner thread has stopped
            return
        self.restarts += 1
        self._spawns.put(worker)  # killed and reaped by the spawner thread, off the caller's path
        self._spawns.put(True)

    def _spawn_loop(self) -> None:
        failures = 0
        while True:
            order = self._spawns.get()
            if order is None:
                return
            if isinstance(order, _Worker):
                order.kill()
                continue
            if self._closed:
                continue
            try:
                worker = self._spawn()
            except Exception:
                failures += 1
                logger.exception("could not start a script worker (attempt %s)", failures)
                time.sleep(min(0.1 * 2**failures, 30))
                self._spawns.put(True)
                continue
            failures = 0
            with self._lock:
                if self._closed:
                    worker.kill()
                    continue
                self._all[worker.pid] = worker
            self._idle.put(worker)

    def _spawn(self) -> _Worker:
        config: dict[str, Any] = {
            "memory_mb": self.settings.memory_mb,
            "max_payload": self.settings.max_payload_bytes,
            "parent_pid": os.getpid(),
        }
        if os.geteuid() == 0 and self.settings.user:
            account = pwd.getpwnam(self.settings.user)
            config.update(uid=account.pw_uid, gid=account.pw_gid)
        process = subprocess.Popen(
            [self.settings.python, "-I", "-c", _BOOT, _PROJECT_ROOT, json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={},
            cwd=self._workdir,
            close_fds=True,
            start_new_session=True,
        )
        assert process.stdout is not None
        ready = _read_ready(process, self.settings.start_timeout_seconds)
        return _Worker(process, ready.get("protections") or {})


def _read_ready(process: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
    assert process.stdout is not None
    poller = select.poll()
    poller.register(process.stdout.fileno(), select.POLLIN)
    deadline = time.monotonic() + timeout
    buffer = b""
    while len(buffer) < _HEADER.size or len(buffer) < _HEADER.size + _HEADER.unpack(buffer[:4])[0]:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not poller.poll(remaining * 1000):
            process.kill()
            process.wait()
            raise RuntimeError("script worker did not report ready in time")
        chunk = os.read(process.stdout.fileno(), 65536)
        if not chunk:
            code = process.wait()
            raise RuntimeError(f"script worker exited during start-up with status {code}")
        buffer += chunk
    ready = json.loads(buffer[_HEADER.size :])
    if not ready.get("ready"):
        process.kill()
        raise RuntimeError("script worker sent no ready message")
    return dict(ready)


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=json_default)


def frame(message: dict[str, Any]) -> bytes:
    """A message as it crosses the pipe: a 4-byte big-endian length, then JSON."""
    body = _ENCODER.encode(message).encode("utf-8", "surrogatepass")
    return _HEADER.pack(len(body)) + body


def _error_from(described: dict[str, Any], location: str) -> ScriptError:
    kind = str(described.get("kind") or "runtime")
    message = str(described.get("message") or "script failed")
    where = str(described.get("location") or location)
    line = described.get("line") if isinstance(described.get("line"), int) else None
    if kind == "compile":
        problems = [
            (item[0] if isinstance(item[0], int) else None, str(item[1]))
            for item in described.get("problems") or [(line, message)]
        ]
        return ScriptCompileError(problems, location=where)
    return ERROR_KINDS.get(kind, ScriptError)(message, location=where, line=line)


def _reply_of(reply: dict[str, Any], call: ScriptCall) -> ScriptReply:
    """The `ScriptReply` of the worker's answer to `call`; raises the error it reports."""
    if not reply.get("ok"):
        raise _error_from(reply.get("error") or {}, call.location)
    try:
        answer = ScriptReply(decode_result(reply.get("result")), reply.get("arguments") or [])
        if call.then is not None:
            then = reply.get("then")
            if not isinstance(then, dict):
                raise WireError("the worker did not run the follow-up handler")
            if then.get("ok"):
                answer.follow_up = decode_result(then.get("result"))
            else:
                answer.follow_up_error = _error_from(then.get("error") or {}, call.location)
        return answer
    except (WireError, ValueError, TypeError) as exc:
        raise ScriptError(
            f"unusable answer from the script worker: {exc}", location=call.location
        ) from None


def _batch_request(
    calls: Sequence[ScriptCall], chain: int | None, until_true: bool = False
) -> dict[str, Any]:
    """The worker request of a batch: each context object passed to more than one call is
    encoded once, as JSON text in `shared`, and each call names it by index (`{"s": i}`)."""
    uses = Counter(id(arg) for call in calls for arg in call.args if isinstance(arg, ScriptObject))
    shared: list[str] = []
    index_of: dict[int, int] = {}
    requests = []
    for call in calls:
        arguments: list[Any] = []
        for arg in call.args:
            if not isinstance(arg, ScriptObject) or uses[id(arg)] < 2:
                arguments.append(encode_argument(arg))
                continue
            if id(arg) not in index_of:
                index_of[id(arg)] = len(shared)
                try:
                    shared.append(_ENCODER.encode(encode_argument(arg)))
                except (TypeError, ValueError, RecursionError) as exc:
                    raise ScriptError(
                        f"the script's arguments are not JSON: {exc}", location=call.location
                    ) from None
            arguments.append({"s": index_of[id(arg)]})
        requests.append(call.request(arguments))
    return {
        "op": "batch",
        "calls": requests,
        "shared": shared,
        **({"chain": chain} if chain is not None else {}),
        **({"until": "true"} if until_true else {}),
    }


def _settles(results: list[ScriptReply | ScriptError]) -> bool:
    """Whether an `until_true` batch may end after `results`: its last call failed or held.
    A worker that stops earlier than that leaves the rest unanswered, not asked."""
    if not results:
        return False
    last = results[-1]
    return isinstance(last, ScriptError) or bool(last.value)


def _outcome_name(result: ScriptReply | ScriptError) -> str:
    # The `vnext_script_calls` outcome label of one call.
    if isinstance(result, ScriptTimeout):
        return "timeout"
    if isinstance(result, ScriptResourceLimit):
        return "resource_limit"
    if isinstance(result, ScriptUnavailable):
        return "unavailable"
    return "error" if isinstance(result, ScriptError) else "ok"


# --- the process-wide pool ------------------------------------------------------------------

_pool: ScriptPool | None = None
_pool_lock = threading.Lock()
_settings = PoolSettings()


def configure_pool(settings: PoolSettings) -> None:
    """Set how the process-wide pool runs (before its first use; a running pool is replaced)."""
    global _settings, _pool
    with _pool_lock:
        _settings = settings
        old, _pool = _pool, None
    if old is not None:
        old.close()


def script_pool() -> ScriptPool:
    """The process-wide pool, started on first use."""
    global _pool
    pool = _pool
    if pool is not None:
        return pool
    with _pool_lock:
        if _pool is None:
            _pool = ScriptPool(_settings)
        pool = _pool
    return pool.start()


def shutdown_pool() -> None:
    """Stop the process-wide pool's workers (at exit, or in tests)."""
    global _pool
    with _pool_lock:
        old, _pool = _pool, None
    if old is not None:
        old.close()


def _forget_inherited_pool() -> None:
    # A forked child (Celery prefork, gunicorn) must not talk to its parent's workers: it starts
    # its own pool on first use. The pipes it inherited are closed, the workers left alone.
    global _pool
    inherited, _pool = _pool, None
    if inherited is None:
        return
    for worker in list(inherited._all.values()):
        _close_pipes(worker)


os.register_at_fork(after_in_child=_forget_inherited_pool)


atexit.register(shutdown_pool)
