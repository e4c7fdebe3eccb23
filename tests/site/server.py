"""`manage.py vnext_run` in a subprocess for end-to-end tests: started on a free port with its
own SQLite database, waited for until `/health` answers, stopped with SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RunningServer:
    """The server's base URL, its process and its log (stdout and stderr together)."""

    base: str
    process: subprocess.Popen[bytes]
    log: Path
    exit_code: int | None = None

    def output(self) -> str:
        """What the server printed so far."""
        return self.log.read_text()


@contextmanager
def vnext_server(
    folder: Path, env: dict[str, str], *, args: tuple[str, ...] = ()
) -> Iterator[RunningServer]:
    """Run `manage.py vnext_run` with `env` added to this environment until the block ends."""
    port = free_port()
    environment = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{folder / 'vnext.sqlite3'}",
        "PORT": str(port),
        "PYTHONUNBUFFERED": "1",
        **env,
    }
    environment.pop("DJANGO_SETTINGS_MODULE", None)
    log = folder / "server.log"
    with log.open("w+") as handle:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "vnext_run", *args],
            cwd=ROOT,
            env=environment,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    running = RunningServer(f"http://127.0.0.1:{port}", process, log)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, running.output()
            try:
                if httpx.get(f"{running.base}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, running.output()
            time.sleep(0.3)
        yield running
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            running.exit_code = process.wait(timeout=20)
        finally:
            if process.poll() is None:
                process.kill()
