"""What the intake tests share: a workflow an event starts (its mapping refuses `explode`), one
an event moves, and `events_consume` run as a real subprocess on the test database."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.db import connection

from instances.job_handlers import jobs_run_due
from instances.job_table import Job
from instances.status import JobStatus
from tests.engine.builders import script, state, transition, workflow

ROOT = Path(__file__).resolve().parents[2]
# The event starts an instance keyed by the payload's `order` (keyless without one: then a
# second delivery would be a second instance), its data `n`; `explode` fails the mapping.
START_MAPPING = """
def handler(context):
    payload = context.event_payload or {}
    if payload.get("explode"):
        raise ValueError("this event cannot be mapped")
    return {"key": payload.get("order"), "body": {"n": payload.get("n")}}
"""
# The event moves the instance whose key is its `order`.
BUMP_MAPPING = """
def handler(context):
    payload = context.event_payload or {}
    return {"key": payload.get("order"), "body": {"bumped": payload.get("n")}}
"""


def intake_workflow(key: str = "intake-start") -> dict[str, Any]:
    """Started by events; `open` takes the event transition `bump` (to `bumped`)."""
    bump = transition("bump", "bumped", 3, event={"mapping": script(BUMP_MAPPING)})
    return workflow(
        [
            state("open", 1, [bump, transition("close", "done")]),
            state("bumped", 2, [transition("close", "done")]),
            state("done", 3, subType=1),
        ],
        key=key,
        event={"mapping": script(START_MAPPING)},
    )


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll `condition` every 50 ms until it is true; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def receipts() -> int:
    """Event receipts committed (one per event id applied)."""
    return Job.objects.filter(kind="event").count()


def run_jobs_until_settled(timeout: float = 60.0) -> None:
    """Run the accepted work here until no job is pending or running."""
    deadline = time.monotonic() + timeout
    live = Job.objects.filter(status__in=(JobStatus.PENDING, JobStatus.RUNNING))
    while live.exists():
        assert time.monotonic() < deadline, "jobs still live"
        if not jobs_run_due():
            time.sleep(0.02)


class ConsumerProcess:
    """`manage.py events_consume` in a subprocess on the test database."""

    def __init__(
        self, log: Path, routes: list[dict[str, Any]], consumers: int = 1, **env: str
    ) -> None:
        self.log = log
        self.routes = routes
        self.consumers = consumers
        self.extra_env = env
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *args: str, ready: str = "consuming R") -> None:
        """Start it and wait until its `consumers` log that they are consuming."""
        settings = connection.settings_dict
        env = {
            **os.environ,
            "DATABASE_URL": "postgres://{USER}@{HOST}:{PORT}/{NAME}".format(
                **{k: settings[k] or "" for k in ("USER", "HOST", "PORT", "NAME")}
            ),
            "VNEXT_EVENT_ROUTES": json.dumps(self.routes),
            "VNEXT_JOB_DISPATCH": "embedded",
            "LOG_FORMAT": "plain",
            "PYTHONUNBUFFERED": "1",
            **self.extra_env,
        }
        for name in ("DJANGO_SETTINGS_MODULE", "CELERY_BROKER_URL"):
            env.pop(name, None)
        before = self.log.read_bytes().count(ready.encode()) if self.log.exists() else 0
        handle = self.log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "events_consume", *args],
            cwd=ROOT,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
        wanted = before + self.consumers
        wait_for(
            lambda: self._alive() and self.log.read_bytes().count(ready.encode()) >= wanted,
            30,
            f"the consumer to start (log: {self.log})",
        )

    def _alive(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"events_consume exited: {self.log.read_text()[-3000:]}")
        return True

    def kill(self) -> None:
        """SIGKILL: no message in hand is acknowledged, nothing is closed."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> int:
        """SIGTERM, and its exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        return int(self.process.returncode)
