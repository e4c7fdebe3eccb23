"""The script workers are a boundary: separate processes with no secrets, hard limits, a seccomp
filter where libseccomp exists, a deadline enforced by killing, nothing carried from one call to
the next, and a server that never waits on a stuck script."""

from __future__ import annotations

import ctypes.util
import datetime
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from instances.engine.errors import VNextError
from instances.engine.script_pool import PoolSettings, ScriptCall, ScriptPool
from instances.engine.script_runner import ScriptHandle, ScriptRunner
from instances.engine.scripts import (
    ScriptError,
    ScriptRefused,
    ScriptResourceLimit,
    ScriptTimeout,
    ScriptUnavailable,
    compile_script,
)
from instances.engine.timers import timer_due
from tests.engine import scripting
from tests.engine.scripting import LOCATION, context, handler_of

ROOT = Path(__file__).resolve().parents[2]
CANARY = "vnext-isolation-canary-41c9"
SPIN_IN_C = handler_of("return any(iter(int, 1))")


@pytest.fixture
def single() -> Iterator[ScriptPool]:
    """One worker, so consecutive calls are sure to share it."""
    os.environ["VNEXT_ISOLATION_CANARY"] = CANARY
    pool = ScriptPool(PoolSettings(size=1, grace_seconds=0.3, wait_seconds=20)).start()
    yield pool
    pool.close()


def _spin(pool: ScriptPool, outcome: list[BaseException]) -> None:
    try:
        scripting.run(pool, SPIN_IN_C, timeout=1.5)
    except ScriptError as exc:
        outcome.append(exc)


def _proc(pid: int, name: str) -> bytes:
    return Path(f"/proc/{pid}/{name}").read_bytes()


class TestWorkerProcess:
    def test_workers_hold_no_secret_and_run_in_an_empty_folder(self, single: ScriptPool):
        (pid,) = single.worker_pids()
        environment = _proc(pid, "environ")
        assert CANARY.encode() not in environment
        assert b"SECRET" not in environment
        assert b"DATABASE" not in environment
        cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
        assert cwd != Path.cwd()
        assert list(cwd.iterdir()) == []
        report = single.probe()
        assert report["django loaded"] == "no"
        assert CANARY not in report["environment"]

    @pytest.mark.skipif(os.geteuid() != 0, reason="privileges are dropped only from root")
    def test_workers_started_by_root_run_as_nobody_with_no_groups(self, single: ScriptPool):
        (pid,) = single.worker_pids()
        status = _proc(pid, "status").decode()
        uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
        assert set(uid_line.split()[1:]) == {"65534"}
        groups = next(line for line in status.splitlines() if line.startswith("Groups:"))
        assert groups.split()[1:] == []
        assert single.protections()["uid"] == 65534

    def test_resource_limits_are_in_force(self, single: ScriptPool):
        (pid,) = single.worker_pids()
        limits = _proc(pid, "limits").decode()

        def limit(name: str) -> list[str]:
            line = next(line for line in limits.splitlines() if line.startswith(name))
            return line[len(name) :].split()[:2]

        assert limit("Max address space") == [str(512 * 2**20)] * 2
        assert limit("Max core file size") == ["0", "0"]
        assert limit("Max file size") == ["0", "0"]
        assert limit("Max open files") == ["16", "16"]

    @pytest.mark.skipif(
        not ctypes.util.find_library("seccomp"), reason="libseccomp is not installed here"
    )
    def test_seccomp_refuses_files_sockets_fork_and_exec(self, single: ScriptPool):
        assert single.protections()["seccomp"] is True
        report = single.probe()
        for attempt in (
            "create a file in the working directory",
            "create a file in /tmp",
            "open a network socket",
            "open a unix socket",
            "fork",
            "execute a program",
        ):
            assert report[attempt] == "refused (EPERM)", (attempt, report)
        assert report["read /etc/shadow"].startswith("refused")
        assert not Path("/tmp/vnext-probe.txt").exists()

    def test_workers_die_with_the_server(self, tmp_path: Path):
        # A server process with a pool is SIGKILLed: its workers must not live on (a worker
        # spinning in C would otherwise burn a core forever).
        program = (
            "import sys, time; sys.path.insert(0, sys.argv[1])\n"
            "from instances.engine.script_pool import ScriptPool, PoolSettings\n"
            "pool = ScriptPool(PoolSettings(size=2)).start()\n"
            "print(' '.join(map(str, pool.worker_pids())), flush=True)\n"
            "time.sleep(60)\n"
        )
        server = subprocess.Popen(
            [sys.executable, "-c", program, str(ROOT)], stdout=subprocess.PIPE, text=True
        )
        assert server.stdout is not None
        pids = [int(pid) for pid in server.stdout.readline().split()]
        assert len(pids) == 2
        server.kill()
        server.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
            time.sleep(0.05)
        assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()]


class TestDeadlines:
    def test_a_call_stuck_in_c_is_killed_at_its_deadline_and_the_worker_replaced(
        self, single: ScriptPool
    ):
        (before,) = single.worker_pids()
        started = time.monotonic()
        with pytest.raises(ScriptTimeout, match=r"time limit of 0\.4 s") as caught:
            scripting.run(single, SPIN_IN_C, timeout=0.4)
        elapsed = time.monotonic() - started
        assert 0.4 <= elapsed < 1.5
        assert caught.value.code == "Script:Timeout"
        assert scripting.run(single, handler_of("return 'alive'")) == "alive"
        (after,) = single.worker_pids()
        assert after != before
        assert not Path(f"/proc/{before}").exists()

    def test_a_worker_out_of_memory_is_replaced_and_the_call_says_so(self, single: ScriptPool):
        (before,) = single.worker_pids()
        with pytest.raises(ScriptResourceLimit) as caught:
            scripting.run(single, handler_of("return len('%900000000d' % 1)"))
        assert caught.value.code == "Script:ResourceLimit"
        assert scripting.run(single, handler_of("return 1")) == 1
        assert single.worker_pids() != [before]

    def test_a_worker_killed_while_idle_does_not_fail_the_next_call(self, single: ScriptPool):
        (pid,) = single.worker_pids()
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
        assert scripting.run(single, handler_of("return 'served'")) == "served"

    def test_the_server_keeps_serving_while_a_script_spins_in_c(self, pool: ScriptPool):
        outcome: list[BaseException] = []
        spinning = threading.Thread(target=_spin, args=(pool, outcome))
        spinning.start()
        time.sleep(0.1)
        started = time.monotonic()
        results = [scripting.run(pool, handler_of(f"return {n} * 2")) for n in range(50)]
        assert results == [n * 2 for n in range(50)]
        assert time.monotonic() - started < 1.0  # served by the other worker, not queued
        spinning.join()
        assert [type(exc) for exc in outcome] == [ScriptTimeout]

    def test_no_free_worker_within_the_wait_is_a_clear_unavailable_error(self):
        pool = ScriptPool(PoolSettings(size=1, grace_seconds=0.2, wait_seconds=0.3)).start()
        try:
            outcome: list[BaseException] = []
            spinning = threading.Thread(target=_spin, args=(pool, outcome))
            spinning.start()
            time.sleep(0.1)
            with pytest.raises(ScriptUnavailable) as caught:
                scripting.run(pool, handler_of("return 1"))
            assert caught.value.code == "Script:Unavailable"
            spinning.join()
            assert [type(exc) for exc in outcome] == [ScriptTimeout]
        finally:
            pool.close()
        with pytest.raises(ScriptUnavailable, match="closed"):
            scripting.run(pool, handler_of("return 1"))

    def test_many_threads_share_the_pool_and_each_gets_its_own_answer(self, pool: ScriptPool):
        source = handler_of("return context.instance.data['n'] * 3")
        answers: dict[int, list[int]] = {}

        def client(thread: int) -> None:
            answers[thread] = [
                scripting.run(pool, source, context(n=thread * 1000 + i)) for i in range(40)
            ]

        threads = [threading.Thread(target=client, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert answers == {t: [(t * 1000 + i) * 3 for i in range(40)] for t in range(8)}


class TestNothingLeaksBetweenCalls:
    def test_decimal_context_set_by_one_call_is_gone_in_the_next(self, single: ScriptPool):
        narrow = "import decimal\n" + handler_of(
            "decimal.setcontext(decimal.Context(prec=3))\n"
            "return str(decimal.Decimal(1) / decimal.Decimal(3))"
        )
        assert scripting.run(single, narrow) == "0.333"
        third = "import decimal\n" + handler_of(
            "return str(decimal.Decimal(1) / decimal.Decimal(3))"
        )
        assert scripting.run(single, third) == "0." + "3" * 28

    def test_traps_cleared_by_one_call_still_trap_in_the_next(self, single: ScriptPool):
        clear = "import decimal\n" + handler_of(
            "decimal.getcontext().clear_traps()\n"
            "decimal.DefaultContext.clear_traps()\n"
            "return str(decimal.Decimal(1) / decimal.Decimal(0))"
        )
        assert scripting.run(single, clear) == "Infinity"
        divide = "import decimal\n" + handler_of(
            "return str(decimal.Decimal(1) / decimal.Decimal(0))"
        )
        with pytest.raises(ScriptError, match="DivisionByZero"):
            scripting.run(single, divide)

    def test_module_attributes_cannot_be_changed_for_the_next_call(self, single: ScriptPool):
        for attack in ("setattr(math, 'pi', 3)", "math.pi = 3", "delattr(math, 'tau')"):
            with pytest.raises(ScriptRefused, match=r"read-only|may not change"):
                scripting.run(single, "import math\n" + handler_of(f"{attack}\nreturn 1"))
        read = "import math\n" + handler_of("return [math.pi, math.tau]")
        assert scripting.run(single, read) == [3.141592653589793, 6.283185307179586]

    def test_mutable_module_values_are_copies(self, single: ScriptPool):
        source = "import string\n" + handler_of("return string.digits")
        assert scripting.run(single, source, allowed={"string"}) == "0123456789"
        change = "import decimal\n" + handler_of(
            "ctx = decimal.BasicContext\nctx.prec = 2\nreturn ctx.prec"
        )
        with pytest.raises(ScriptRefused):
            scripting.run(single, change)
        basic = "import decimal\n" + handler_of("return decimal.BasicContext.prec")
        assert scripting.run(single, basic) == 9

    def test_platform_classes_cannot_be_changed_for_the_next_call(self, single: ScriptPool):
        for attack in (
            "setattr(ScriptResponse, 'data', 'hijacked')",
            "ScriptResponse.key = 'hijacked'",
            "delattr(ScriptResponse, 'tags')",
        ):
            with pytest.raises(ScriptRefused):
                scripting.run(single, handler_of(f"{attack}\nreturn 1"))
        fresh = handler_of("r = ScriptResponse()\nreturn [r.data, r.key, r.tags]")
        assert scripting.run(single, fresh) == [None, None, None]

    def test_module_globals_and_caches_start_fresh_every_call(self, single: ScriptPool):
        source = """
import functools
calls = []

@functools.lru_cache(maxsize=None)
def remembered(n):
    calls.append(n)
    return n

class Counter:
    seen = []

def handler(context):
    remembered(1)
    Counter.seen.append(1)
    return [len(calls), len(Counter.seen)]
"""
        calls = [scripting.run(single, source, allowed={"functools"}) for _ in range(3)]
        assert calls == [[1, 1]] * 3


class TestBoundary:
    def test_only_json_crosses_and_context_changes_come_back_only_when_asked(
        self, pool: ScriptPool
    ):
        task = scripting.context()
        task.url = "http://example.invalid/a"
        source = (
            "def input_handler(task, context):\n"
            "    task.url = task.url + '?signed=1'\n"
            "    task.headers = {'x-sig': 'abc'}\n"
            "    context.body['leak'] = True\n"
            "    return {'sent': True}\n"
        )
        ctx = scripting.context()
        call = ScriptCall(
            source, LOCATION, "input_handler", (task, ctx), frozenset({"json"}), 0.5, (0,)
        )
        reply = pool.run(call)
        assert reply.value == {"sent": True}
        assert reply.arguments[0]["url"] == "http://example.invalid/a?signed=1"
        assert reply.arguments[0]["headers"] == {"x-sig": "abc"}
        assert ctx.body == {}  # the server's objects are never touched by the worker

    def test_arguments_over_the_payload_limit_are_refused(self):
        pool = ScriptPool(PoolSettings(size=1, max_payload_bytes=64 * 1024)).start()
        try:
            with pytest.raises(ScriptResourceLimit, match="larger than"):
                scripting.run(pool, handler_of("return 1"), context(blob="x" * 100_000))
            with pytest.raises(ScriptError, match="larger than"):
                scripting.run(pool, handler_of("return 'y' * 100000"))
            assert scripting.run(pool, handler_of("return 'ok'")) == "ok"
        finally:
            pool.close()

    # Forking a threaded process is what Celery prefork and gunicorn do; that is the point.
    @pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
    def test_a_forked_child_gets_its_own_pool(self):
        from instances.engine import script_pool as module

        module.script_pool()  # the parent's process-wide pool exists before the fork

        def child(results: multiprocessing.Queue) -> None:
            pool = module.script_pool()
            results.put((pool.worker_pids(), scripting.run(pool, handler_of("return 'child'"))))

        parent_pids = module.script_pool().worker_pids()
        results: multiprocessing.Queue = multiprocessing.get_context("fork").Queue()
        process = multiprocessing.get_context("fork").Process(target=child, args=(results,))
        process.start()
        child_pids, answer = results.get(timeout=30)
        process.join(timeout=30)
        assert answer == "child"
        assert not set(child_pids) & set(parent_pids)
        assert module.script_pool().worker_pids() == parent_pids


class TestWhatComesBack:
    def test_attributes_that_would_shadow_methods_or_reach_internals_are_dropped(self, pool):
        source = (
            "def input_handler(task, context):\n"
            "    task.get = 1\n"
            "    task.url = 'http://example.invalid/b'\n"
            "    return None\n"
        )
        runner = ScriptRunner(components=None, timeout_seconds=0.5, script_executor=pool)  # type: ignore[arg-type]
        handle = ScriptHandle(runner, compile_script(source, LOCATION), source, frozenset())
        task = scripting.context()
        handle.call("input_handler", task, scripting.context(), updates=(0,))
        assert task.url == "http://example.invalid/b"
        assert task.get("url") == "http://example.invalid/b"  # still the method

    def test_a_duration_past_the_calendar_is_a_script_error_not_a_crash(self, pool):
        source = "import datetime\n" + handler_of("return datetime.timedelta.max")
        with pytest.raises(ScriptError, match="out of range"):
            scripting.run(pool, source)


def test_a_timer_due_past_the_calendar_is_a_clear_script_fault():
    now = datetime.datetime.now(datetime.UTC)
    with pytest.raises(VNextError, match="past year 9999"):
        timer_due(datetime.timedelta(days=999_999_990), now)
    with pytest.raises(VNextError, match="expected a timedelta"):
        timer_due("P999999999D", now)
