"""A script worker pool for the script tests: two workers, short deadlines, closed at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from instances.engine.script_pool import PoolSettings, ScriptPool


@pytest.fixture(scope="session")
def pool() -> Iterator[ScriptPool]:
    """A pool of its own, so tests can count restarts and kill workers without touching the
    process-wide pool the engine uses."""
    started = ScriptPool(PoolSettings(size=2, grace_seconds=0.3, wait_seconds=20)).start()
    yield started
    started.close()
