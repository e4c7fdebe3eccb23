"""The `order` workflow as a viewflow 2 flow: started from code (`StartHandle`), two human tasks
(`View`, assigned to the bench user when created) that write into `process.data`, then `End`.
`SelectForUpdateLock`: the lock viewflow recommends on PostgreSQL."""

from __future__ import annotations

import functools
from typing import Any

from django.contrib.auth import get_user_model
from viewflow import this
from viewflow.workflow import flow, lock
from viewflow.workflow.flow.views import UpdateProcessView

BENCH_USER = "bench-order"


@functools.cache
def _bench_user() -> Any:
    user, _ = get_user_model()._default_manager.get_or_create(username=BENCH_USER)
    return user


def bench_user(activation: Any) -> Any:
    """The user every human task is assigned to (looked up once per run)."""
    return _bench_user()


class OrderFlow(flow.Flow):
    """start -> submit (human, writes `amount`) -> approve (human, writes `decision`) -> end."""

    lock_impl = lock.select_for_update_lock

    start = flow.StartHandle().Next(this.submit)
    submit = flow.View(UpdateProcessView.as_view(fields=[])).Assign(bench_user).Next(this.approve)
    approve = flow.View(UpdateProcessView.as_view(fields=[])).Assign(bench_user).Next(this.end)
    end = flow.End()
