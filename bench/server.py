"""The real HTTP server for the benchmarks: `manage.py vnext_run` in a subprocess, on loopback.

`BenchServer` picks a free port, starts the server with the bench database and an operator
account it sets, waits for `GET /health`, and stops it with SIGTERM (then SIGKILL after a grace
period) in `stop()`, which is safe to call more than once. Its output goes to a temporary log
file, shown when it fails to come up.

Another serving topology (the `serving` suite) passes its own `command` (given the port) and
`env` overrides; such a server does not prepare the database, so `prepare()` runs
`vnext_run --prepare-only` (migrate, operator account and token) once before it starts.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port nobody listens on right now (loopback): the first free one of
    `BENCH_PORT_RANGE` (`8600-8699`) when it is set, so that benchmarks sharing a machine keep to
    their own ports, else any."""
    first, _, last = os.environ.get("BENCH_PORT_RANGE", "0-0").partition("-")
    for port in range(int(first), int(last or first) + 1):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(probe.getsockname()[1])
    raise RuntimeError(f"no free port in BENCH_PORT_RANGE {first}-{last}")


def _vnext_run(port: int) -> list[str]:
    return [sys.executable, "manage.py", "vnext_run", "--port", str(port), "--no-examples"]


class BenchServer:
    """One `vnext_run` process serving `database_url` on 127.0.0.1 (or `command`'s server).

    `command(port)` replaces `manage.py vnext_run`; `env` is laid over the server's environment,
    a None value removing that variable; `workers` sets VNEXT_HTTP_WORKERS."""

    def __init__(
        self,
        database_url: str,
        *,
        username: str = "bench-operator",
        command: Callable[[int], list[str]] | None = None,
        env: Mapping[str, str | None] | None = None,
        workers: int | None = None,
    ) -> None:
        self.database_url = database_url
        self.username = username
        self.command = command
        self.env_overrides = dict(env or {})
        if workers is not None:
            self.env_overrides["VNEXT_HTTP_WORKERS"] = str(workers)
        self.password = secrets.token_urlsafe(16)
        self.port = free_port()
        # What `vnext_run` serves PostgreSQL with unless VNEXT_HTTP_WORKERS says otherwise.
        self.workers = workers or int(os.environ.get("VNEXT_HTTP_WORKERS") or os.cpu_count() or 1)
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in stop()
            prefix="vnext-bench-server-", suffix=".log", delete=False
        )

    def environment(self) -> dict[str, str]:
        """The server's environment: ours, the bench database and operator, the overrides."""
        # No DATABASE_POOL_MAX_SIZE: what a user runs (each HTTP thread keeps its connection).
        env = {
            **os.environ,
            "DATABASE_URL": self.database_url,
            "DJANGO_SETTINGS_MODULE": "vnext.settings",
            "VNEXT_OPERATOR_USERNAME": self.username,
            "VNEXT_OPERATOR_PASSWORD": self.password,
            "PYTHONUNBUFFERED": "1",
        }
        for name, value in self.env_overrides.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return env

    def prepare(self, *, timeout: float = 120.0) -> None:
        """`manage.py vnext_run --prepare-only` in this server's environment: migrate, and create
        the operator account and its token, which a `command` server does not do itself."""
        done = subprocess.run(
            [sys.executable, "manage.py", "vnext_run", "--prepare-only", "--no-examples"],
            cwd=ROOT,
            env=self.environment(),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"vnext_run --prepare-only failed ({done.returncode}):\n{self.log()}"
            )

    def start(self, *, timeout: float = 90.0) -> None:
        """Start the server and wait until `/health` answers 200."""
        command = (self.command or _vnext_run)(self.port)
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=self.environment(),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        with httpx.Client(base_url=self.base_url, timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"server exited ({self.process.returncode}):\n{self.log()}")
                try:
                    if client.get("/health").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
        raise RuntimeError(f"server not healthy after {timeout:.0f}s:\n{self.log()}")

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the server's live processes have used so far: the process,
        its uvicorn workers and their script workers (Linux `/proc`; 0.0 elsewhere)."""
        if self.process is None:
            return 0.0
        parents: dict[int, int] = {}
        times: dict[int, float] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                # After the command in parentheses: state, ppid, ..., utime (14), stime (15).
                fields = stat.read_text().rpartition(")")[2].split()
            except OSError:
                continue  # exited meanwhile
            pid = int(stat.parent.name)
            parents[pid] = int(fields[1])
            times[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        tree = {self.process.pid}
        grown = True
        while grown:
            children = {pid for pid, parent in parents.items() if parent in tree} - tree
            tree |= children
            grown = bool(children)
        return sum(times.get(pid, 0.0) for pid in tree)

    def log(self) -> str:
        """The server's output so far (last 4000 characters)."""
        self._log.flush()
        return Path(self._log.name).read_text(errors="replace")[-4000:]

    def stop(self, *, grace: float = 15.0) -> int | None:
        """SIGTERM, wait up to `grace` seconds, then SIGKILL; the exit status (None: never ran)."""
        process, self.process = self.process, None
        code = None
        if process is not None:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=grace)
            code = process.returncode
        if not self._log.closed:
            self._log.close()
            Path(self._log.name).unlink(missing_ok=True)
        return code

    def __enter__(self) -> BenchServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
