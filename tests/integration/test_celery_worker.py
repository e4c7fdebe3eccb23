"""The real thing: a Celery worker process against Redis and PostgreSQL runs async starts and
transitions, fires timers at their ETA, runs a twice-delivered job once, and re-runs a job whose
worker was SIGKILLed mid-pipeline after its lease expired, leaving one history row."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from asgiref.sync import async_to_sync, sync_to_async
from asgiref.testing import ApplicationCommunicator
from django.contrib.auth.models import User
from django.core.wsgi import get_wsgi_application
from django.db import connection
from rest_framework.authtoken.models import Token

from instances.api.longpoll import StateLongPoll, get_scope
from instances.job_table import Job
from instances.models import (
    Correlation,
    Instance,
    InstanceDataVersion,
    InstanceTask,
    InstanceTransition,
)
from instances.queue import jobs_dispatch_due
from instances.tasks import job_run_task
from tests.conftest import LOOPBACK_CIDRS
from tests.engine.builders import script, state, transition, workflow
from tests.instances.fan_out_stub import fan_out_stub
from tests.instances.http_server import http_server
from tests.instances.workflows import http_ref, http_task, ping_pong, publish
from vnext.celery import app as celery_app

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]
ROOT = Path(__file__).resolve().parents[2]
# Under pytest-xdist each test process (gw0, gw1) has Redis databases of its own: a worker
# of one process must not take the other's tasks.
_PROCESS = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
BROKER = os.environ.get("VNEXT_TEST_BROKER_URL", f"redis://127.0.0.1:6379/{14 + _PROCESS % 2}")
LEASE_SECONDS = 3
BASE = "/api/v1/core/workflows/{}/instances"


def wait_for(condition: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Worker:
    """A `celery worker` subprocess on the test database."""

    def __init__(
        self, log: Path, env: dict[str, str] | None = None, pool: tuple[str, ...] = ("--pool=solo",)
    ) -> None:
        self.log = log
        self.extra_env = env or {}
        self.pool = pool
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {
            **os.environ,
            "DATABASE_URL": "postgres://{USER}@{HOST}:{PORT}/{NAME}".format(
                **{k: connection.settings_dict[k] or "" for k in ("USER", "HOST", "PORT", "NAME")}
            ),
            "CELERY_BROKER_URL": BROKER,
            "VNEXT_JOB_DISPATCH": "celery",
            "VNEXT_JOB_LEASE_SECONDS": str(LEASE_SECONDS),
            "PYTHONUNBUFFERED": "1",
            # The tests' HTTP stubs listen on loopback, which the egress policy refuses.
            "VNEXT_EGRESS_ALLOW_CIDRS": ",".join(LOOPBACK_CIDRS),
            **self.extra_env,
        }
        env.pop("DJANGO_SETTINGS_MODULE", None)
        handle = self.log.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "celery", "-A", "vnext", "worker", *self.pool,
                "--loglevel=INFO", "--without-gossip", "--without-mingle", "--without-heartbeat",
            ],
            cwd=ROOT,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_for(lambda: b"ready." in self.log.read_bytes(), 60, "the worker to be ready")

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()


@pytest.fixture
def broker(settings) -> Iterator[None]:
    redis.Redis.from_url(BROKER).flushdb()
    settings.VNEXT = {**settings.VNEXT, "JOB_DISPATCH": "celery"}
    previous = celery_app.conf.broker_url
    celery_app.conf.update(broker_url=BROKER)
    yield
    celery_app.conf.update(broker_url=previous)


@pytest.fixture
def worker(broker, tmp_path: Path) -> Iterator[Worker]:
    running = Worker(tmp_path / "worker.log")
    running.start()
    yield running
    running.stop()


def instance(instance_id: str) -> Instance:
    return Instance.objects.get(pk=instance_id)


def test_async_start_and_transition_reach_their_states(operator_client, worker):
    publish(ping_pong())
    base = BASE.format("ping-pong")
    accepted = operator_client.post(f"{base}/start", {"attributes": {"n": 1}}, format="json")
    assert accepted.status_code == 202
    instance_id = accepted.json()["id"]
    wait_for(lambda: instance(instance_id).status == "A", what="the async start")
    url = f"{base}/{instance_id}/transitions/to-pong"
    response = operator_client.patch(url, {"n": 2}, format="json")
    assert response.status_code == 202
    wait_for(lambda: instance(instance_id).current_state == "pong", what="the async transition")
    row = instance(instance_id)
    assert (row.status, row.data, row.busy_owner) == ("A", {"n": 2}, "")
    # A job records its success just after the pipeline's commit that the waits above saw.
    wait_for(
        lambda: set(Job.objects.values_list("status", flat=True)) == {"succeeded"},
        what="every job to record its success",
    )


def test_a_timer_fires_at_its_eta(operator_client, worker):
    document = workflow(
        [
            state(
                "waiting",
                1,
                [
                    transition(
                        "ring",
                        "rung",
                        2,
                        timer=script(
                            "from datetime import timedelta\n\ndef handler(context):\n"
                            "    return timedelta(seconds=1)\n"
                        ),
                    )
                ],
            ),
            state("rung", 3, subType=1),
        ],
        key="alarm",
    )
    publish(document)
    created = operator_client.post(f"{BASE.format('alarm')}/start?sync=true", {}, format="json")
    instance_id = created.json()["id"]
    timer = Job.objects.get(instance_id=instance_id, kind="timer")
    wait_for(lambda: instance(instance_id).status == "C", 20, "the timer")
    assert instance(instance_id).current_state == "rung"
    fired = Job.objects.get(pk=timer.pk)
    lateness = (fired.updated_at - fired.run_at).total_seconds()
    assert fired.status == "succeeded"
    assert 0 <= lateness < 2.0


def test_a_job_delivered_twice_runs_once(operator_client, broker, tmp_path, settings):
    publish(ping_pong())
    # Accept without dispatching, then deliver the same job twice before any worker runs.
    settings.VNEXT = {**settings.VNEXT, "JOB_DISPATCH": "embedded"}
    accepted = operator_client.post(f"{BASE.format('ping-pong')}/start", {}, format="json").json()
    job = Job.objects.get(instance_id=accepted["id"])
    job_run_task.apply_async(args=(job.pk,))
    job_run_task.apply_async(args=(job.pk,))
    running = Worker(tmp_path / "worker.log")
    running.start()
    try:
        wait_for(lambda: Job.objects.get(pk=job.pk).status == "succeeded", what="the job")
        time.sleep(1.0)  # let the second delivery be consumed too
        assert b"skipped" in (tmp_path / "worker.log").read_bytes()
    finally:
        running.stop()
    assert Job.objects.get(pk=job.pk).attempts == 1
    assert InstanceTransition.objects.filter(instance_id=accepted["id"]).count() == 1


def test_a_worker_killed_mid_pipeline_is_rerun_after_its_lease(operator_client, worker):
    with http_server() as base_url:
        document = ping_pong()
        document["attributes"]["states"][0]["transitions"][0]["onExecutionTasks"] = [
            http_ref("slow-call")
        ]
        publish(http_task("slow-call", f"{base_url}/slow?ms=2500"), document)
        base = BASE.format("ping-pong")
        started = operator_client.post(f"{base}/start?sync=true", {}, format="json")
        instance_id = started.json()["id"]
        url = f"{base}/{instance_id}/transitions/to-pong"
        accepted = operator_client.patch(url, {}, format="json")
        assert accepted.status_code == 202
        job = Job.objects.get(instance_id=instance_id, kind="transition")
        wait_for(lambda: Job.objects.get(pk=job.pk).status == "running", what="the claim")
        time.sleep(0.5)  # inside the slow call
        worker.kill()
        assert instance(instance_id).status == "B"

        worker.start()
        time.sleep(LEASE_SECONDS + 0.5)
        assert jobs_dispatch_due() >= 1  # what the periodic sweep does
        wait_for(lambda: Job.objects.get(pk=job.pk).status == "succeeded", 30, "the re-run")

    row = instance(instance_id)
    assert (row.status, row.current_state, row.busy_owner) == ("A", "pong", "")
    history = InstanceTransition.objects.filter(instance_id=instance_id, transition_key="to-pong")
    assert history.count() == 1
    assert Job.objects.get(pk=job.pk).attempts == 2


def test_a_worker_killed_in_on_entry_resumes_there_and_never_reruns_on_execute(
    operator_client, worker
):
    # Seed 000's commit points: the attempt row (step 20) and the new state (step 50) are
    # committed before OnEntry's slow call, so a reader sees them while it runs, and the re-run
    # after a SIGKILL resumes at OnEntry: OnExecute's call is made exactly once.
    with http_server() as base_url:
        document = ping_pong()
        ping, pong = document["attributes"]["states"][0], document["attributes"]["states"][1]
        ping["transitions"][0]["onExecutionTasks"] = [http_ref("count-execute")]
        pong["onEntries"] = [http_ref("slow-entry")]
        publish(
            http_task("count-execute", f"{base_url}/counted/execute-{os.getpid()}"),
            http_task("slow-entry", f"{base_url}/slow?ms=2500"),
            document,
        )
        base = BASE.format("ping-pong")
        started = operator_client.post(f"{base}/start?sync=true", {}, format="json")
        instance_id = started.json()["id"]
        accepted = operator_client.patch(
            f"{base}/{instance_id}/transitions/to-pong", {}, format="json"
        )
        assert accepted.status_code == 202
        job = Job.objects.get(instance_id=instance_id, kind="transition")

        seen = wait_for(
            lambda: (row := instance(instance_id)).current_state == "pong" and row.status == "B",
            what="a reader to see the target state while OnEntry runs",
        )
        assert seen
        running = InstanceTransition.objects.get(instance_id=instance_id, transition_key="to-pong")
        assert (running.status, running.to_state) == ("running", "pong")
        worker.kill()

        worker.start()
        time.sleep(LEASE_SECONDS + 0.5)
        assert jobs_dispatch_due() >= 1
        wait_for(lambda: Job.objects.get(pk=job.pk).status == "succeeded", 30, "the re-run")
        calls = httpx.get(f"{base_url}/count/execute-{os.getpid()}").json()["count"]

    assert calls == 1
    row = instance(instance_id)
    assert (row.status, row.current_state, row.busy_owner) == ("A", "pong", "")
    history = InstanceTransition.objects.filter(instance_id=instance_id, transition_key="to-pong")
    assert [(h.status, h.to_state) for h in history] == [("completed", "pong")]
    assert Job.objects.get(pk=job.pk).attempts == 2


def test_a_worker_killed_while_a_child_starts_leaves_one_child_and_one_correlation(
    operator_client, worker
):
    # The parent's job starts the child in its own final transaction, then runs the child's
    # start job inline; the worker dies inside the child's slow OnEntry. After the restart the
    # parent's job finds its reservation handed to the correlation (skipped, nothing twice) and
    # the child's job is re-run after its lease: one child, one correlation, both completed.
    with http_server() as base_url:
        child = workflow(
            [
                state(
                    "c-initial",
                    1,
                    [transition("c-finish", "c-done", 1, triggerKind=10)],
                    onEntries=[http_ref("slow-entry")],
                ),
                state("c-done", 3, subType=1),
            ],
            key="kid",
        )
        child["attributes"]["type"] = "S"
        subflow = {
            "type": "S",
            "process": {"key": "kid", "domain": "core", "version": "1.0.0", "flow": "sys-flows"},
            "mapping": script(
                "def input_handler(context):\n    return ScriptResponse(data={'from': 'parent'})\n"
                "\n\ndef output_handler(context):\n    return {'child': context.body}\n"
            ),
        }
        parent = workflow(
            [
                state("p-initial", 1, [transition("p-go", "p-sub", 1, triggerKind=10)]),
                state(
                    "p-sub",
                    4,
                    [transition("p-finish", "p-done", 1, triggerKind=10)],
                    subFlow=subflow,
                ),
                state("p-done", 3, subType=1),
            ],
            key="mom",
        )
        publish(http_task("slow-entry", f"{base_url}/slow?ms=2500"), child, parent)
        accepted = operator_client.post(f"{BASE.format('mom')}/start", {}, format="json")
        assert accepted.status_code == 202
        parent_id = accepted.json()["id"]
        kid = wait_for(
            lambda: Instance.objects.filter(workflow_key="kid").first(), what="the child row"
        )
        start_job = Job.objects.get(instance_id=kid.pk, kind="transition")
        wait_for(lambda: Job.objects.get(pk=start_job.pk).status == "running", what="its claim")
        time.sleep(0.5)  # inside the child's slow OnEntry
        worker.kill()
        assert instance(parent_id).status == "B"

        worker.start()
        time.sleep(LEASE_SECONDS + 0.5)
        assert jobs_dispatch_due() >= 1
        wait_for(lambda: instance(parent_id).status == "C", 40, "the parent to complete")

    assert Instance.objects.filter(workflow_key="kid").count() == 1
    (correlation,) = Correlation.objects.filter(parent_id=parent_id)
    assert (correlation.child_id, correlation.status) == (kid.pk, "completed")
    row = instance(parent_id)
    assert (row.current_state, row.busy_owner) == ("p-done", "")
    assert row.data["child"] == {"from": "parent"}
    assert instance(str(kid.pk)).current_state == "c-done"
    # Killed once, so run at least twice (a lease that lapses on a loaded machine adds one).
    assert Job.objects.get(pk=start_job.pk).attempts >= 2


FAN_OUT_MAPPING = """
def item_input_handler(task, context, item):
    base = context.configuration["Example:ApiBaseUrl"]
    task.url = base + "/api/fan-out/sleep?ms=1500&documentId=" + item.item_key
    return ScriptResponse()
"""


def test_a_worker_killed_mid_batch_reruns_it_to_one_result_and_one_data_write(
    operator_client, broker, tmp_path
):
    # The batch runs inside the transition's job; nothing of it is committed until it ends, so
    # after a SIGKILL the re-run produces the one result and the one data write (the items'
    # calls are made again: at least once, as any task's).
    inner = {"key": "slow-doc", "domain": "core", "version": "1.0.0", "flow": "sys-tasks"}
    fan = {
        "key": "fan",
        "domain": "core",
        "version": "1.0.0",
        "flow": "sys-tasks",
        "flowVersion": "1.0.0",
        "tags": ["test"],
        "attributes": {
            "type": "21",
            "config": {
                "itemsPath": "$.docs",
                "task": inner,
                "execution": {"maxDegreeOfParallelism": 2},
            },
        },
    }
    document = ping_pong()
    document["attributes"]["states"][0]["transitions"][0]["onExecutionTasks"] = [
        {
            "order": 1,
            "task": {k: fan[k] for k in ("key", "domain", "version", "flow")},
            "mapping": script(FAN_OUT_MAPPING),
        }
    ]
    with fan_out_stub() as stub:
        worker = Worker(
            tmp_path / "worker.log",
            env={"VNEXT_SCRIPT_CONFIGURATION": json.dumps({"Example:ApiBaseUrl": stub.base_url})},
        )
        worker.start()
        try:
            publish(http_task("slow-doc", "http://unused.invalid/", "POST"), fan, document)
            base = BASE.format("ping-pong")
            docs = {"docs": [{"id": f"D-{i}"} for i in range(4)]}
            started = operator_client.post(f"{base}/start?sync=true", docs, format="json")
            instance_id = started.json()["id"]
            versions = InstanceDataVersion.objects.filter(instance_id=instance_id)
            before = versions.count()
            accepted = operator_client.patch(
                f"{base}/{instance_id}/transitions/to-pong", {}, format="json"
            )
            assert accepted.status_code == 202
            job = Job.objects.get(instance_id=instance_id, kind="transition")
            wait_for(lambda: sum(stub.calls.values()) >= 2, what="the batch's first items")
            worker.kill()
            assert instance(instance_id).status == "B"
            assert versions.count() == before

            worker.start()
            time.sleep(LEASE_SECONDS + 0.5)
            assert jobs_dispatch_due() >= 1
            wait_for(lambda: Job.objects.get(pk=job.pk).status == "succeeded", 40, "the re-run")
        finally:
            worker.stop()

    row = instance(instance_id)
    assert (row.status, row.current_state) == ("A", "pong")
    assert row.data["fanOutResultsSummary"] == {
        "total": 4, "succeeded": 4, "failed": 0, "timedOut": False
    }  # fmt: skip
    assert versions.count() - before == 1
    journal = InstanceTask.objects.filter(instance_id=instance_id)
    assert sorted(t.task_key for t in journal) == ["fan", "fan#0", "fan#1", "fan#2", "fan#3"]
    assert (
        InstanceTransition.objects.filter(instance_id=instance_id, transition_key="to-pong").count()
        == 1
    )
    assert Job.objects.get(pk=job.pk).attempts == 2


@pytest.fixture
def slow_base() -> Iterator[str]:
    """A loopback HTTP server whose `/slow?ms=N` answers after N ms."""
    with http_server() as base_url:
        yield base_url


def test_a_commit_by_a_worker_wakes_a_client_parked_in_another_process(
    operator_client, broker, tmp_path, settings, slow_base
):
    # The parked long-poll runs here, on the Redis channel layer; the transition runs in the
    # Celery worker (another process), whose commit announces the change through Redis.
    layer_url = f"redis://127.0.0.1:6379/{12 - _PROCESS % 2}"
    redis.Redis.from_url(layer_url).flushdb()
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [layer_url]},
        }
    }
    settings.VNEXT = {**settings.VNEXT, "LONG_POLL_RECHECK_SECONDS": 3600.0}
    document = ping_pong()
    document["attributes"]["states"][0]["transitions"][0]["onExecutionTasks"] = [
        http_ref("slow-call")
    ]
    publish(http_task("slow-call", f"{slow_base}/slow?ms=2500"), document)
    base = BASE.format("ping-pong")
    instance_id = operator_client.post(f"{base}/start?sync=true", {}, format="json").json()["id"]
    token = Token.objects.create(user=User.objects.get(username="operator")).key
    path = f"{base}/{instance_id}/functions/state"
    etag = operator_client.get(path)["ETag"].strip('"')
    running = Worker(tmp_path / "worker.log", {"CHANNEL_LAYER_URL": layer_url})
    running.start()
    try:

        def scope_with(etag: str) -> dict[str, Any]:
            headers = [
                (b"authorization", f"Token {token}".encode()),
                (b"if-none-match", f'"{etag}"'.encode()),
            ]
            return dict(get_scope(path, headers, query=b"wait=30", server=("testserver", 80)))

        async def parked(etag: str) -> tuple[ApplicationCommunicator, bool]:
            app = StateLongPoll(get_wsgi_application())
            communicator = ApplicationCommunicator(app, scope_with(etag))
            await communicator.send_input({"type": "http.request", "body": b""})
            return communicator, await communicator.receive_nothing(timeout=0.3)

        async def answer(communicator: ApplicationCommunicator) -> tuple[int, dict[str, Any]]:
            start = await communicator.receive_output(30)
            body = await communicator.receive_output(30)
            return start["status"], json.loads(body["body"])

        async def scenario() -> tuple[int, dict[str, Any], bool, float]:
            # Each change ends a wait; the client parks again with the eTag it got. The last
            # change, pong, is committed by the worker 2.5 s into its slow task.
            communicator, was_parked = await parked(etag)
            accepted = await sync_to_async(operator_client.patch)(
                f"{base}/{instance_id}/transitions/to-pong", {}, format="json"
            )
            assert accepted.status_code == 202
            for _ in range(10):
                since = time.monotonic()
                status, body = await answer(communicator)
                if body["state"] == "pong":
                    return status, body, was_parked, time.monotonic() - since
                communicator, was_parked = await parked(body["eTag"])
            raise AssertionError("pong never came")

        status, body, was_parked, waited = async_to_sync(scenario)()
    finally:
        running.stop()
    assert (status, body["state"]) == (200, "pong")
    # The answer came to a request that was parked when the worker committed: woken through
    # Redis, not by its hour-long re-read.
    assert was_parked
    assert waited < 15, waited
