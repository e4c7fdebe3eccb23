"""Task type 10 (Notification) in the engine (in-memory store): the channels it dispatches to;
each message shaped by the mapping's `channel_handler` (None skips the channel, a handler that
raises is an error of that channel only), the `state` channel made by the platform with the
headers of `enrich`; every message staged as a `task-notification` job of the hop, the result
metadata as the task's response. A hop that faults sends none of its messages; a mapping the
platform had to stop fails the task; a fan-out refuses one as its inner task."""

from __future__ import annotations

from typing import Any

import pytest

from instances.engine.outcomes import PipelineFault
from instances.engine.task_types import EXECUTORS
from instances.engine.task_types.notification import notification_channels
from instances.status import InstanceStatus, JobKind, TaskType
from tests.engine.builders import (
    Harness,
    script,
    script_task,
    state,
    task_component,
    task_ref,
    transition,
    workflow,
)

MAPPING = """
def channel_handler(channel, context):
    if channel == "sms":
        return ScriptResponse(
            data={"to": context.instance.data.get("phone"), "text": "approved"},
            headers={"X-Correlation-Id": context.instance.id},
        )
    if channel == "email":
        return None
    raise ValueError("no push gateway")


def enrich(context):
    return {"X-Device-Id": "device-7"}
"""
STUCK = "def channel_handler(channel, context):\n    while True:\n        pass\n"
RAISING = "def input_handler(task, context):\n    raise ValueError('down')\n"


@pytest.mark.parametrize(
    ("config", "channels"),
    [
        ({"channels": ["sms", "email"]}, ["sms", "email", "state"]),
        ({"channels": ["sms"], "includeStateChannel": False}, ["sms"]),
        ({"channels": ["state", "sms"], "includeStateChannel": True}, ["state", "sms"]),
        ({"channels": [], "includeStateChannel": True}, ["state"]),
        (None, ["state"]),
    ],
)
def test_the_channels_are_the_listed_ones_then_state_each_once(config, channels):
    assert notification_channels(config) == channels


def test_the_notification_type_has_an_executor():
    assert TaskType.NOTIFICATION == "10"
    assert TaskType.NOTIFICATION in EXECUTORS


def notify_ref(source: str = MAPPING, order: int = 1) -> dict[str, Any]:
    return {
        "order": order,
        "task": {"key": "notify", "domain": "core", "version": "1.0.0", "flow": "sys-tasks"},
        "mapping": script(source),
    }


def harness(*on_execution: dict[str, Any], channels: list[str] | None = None) -> Harness:
    document = workflow(
        [
            state(
                "draft", 1, [transition("approve", "approved", onExecutionTasks=[*on_execution])]
            ),
            state("approved", 2, onEntries=[notify_ref()]),
        ]
    )
    notify = task_component("notify", "10", {"channels": channels or ["sms", "email", "push"]})
    raising = {**script_task(), "key": "raising"}
    return Harness(document, notify, script_task(), raising, timeout=0.3)


def notification_jobs(h: Harness) -> list[dict[str, Any]]:
    return [job["payload"] for job in h.store.jobs if job["kind"] == JobKind.TASK_NOTIFICATION]


def test_each_channel_is_shaped_by_the_mapping_and_staged_as_a_job_of_the_hop():
    h = harness()
    instance_id = h.start({"phone": "+90555"}).instance.id

    h.fire(instance_id, "approve")

    assert h.load(instance_id).current_state == "approved"
    sms, state_channel = notification_jobs(h)
    assert sms["channel"] == "sms"
    assert sms["content"] == {"to": "+90555", "text": "approved"}
    assert sms["headers"] == {"X-Correlation-Id": str(instance_id)}
    assert (sms["task"], sms["state"], sms["transition"]) == ("notify", "approved", "approve")
    # The platform shapes the state channel when it is delivered; enrich() adds headers.
    assert (state_channel["channel"], state_channel["content"]) == ("state", None)
    assert state_channel["headers"] == {"X-Device-Id": "device-7"}
    (row,) = [row for row in h.store.tasks if row.task_key == "notify"]
    assert row.status == "succeeded"
    assert row.response["data"]["dispatched"] == ["sms", "state"]
    assert row.response["data"]["skipped"] == ["email"]
    (error,) = row.response["data"]["errors"]
    assert error.startswith("push: ")
    assert "no push gateway" in error
    assert row.response["is_success"] is False


def test_a_hop_that_faults_sends_none_of_its_messages():
    raising = task_ref({}, order=2, key="raising")
    raising["mapping"] = script(RAISING)
    h = harness(notify_ref(order=1), raising)
    instance_id = h.start({"phone": "+90555"}).instance.id

    with pytest.raises(PipelineFault):
        h.fire(instance_id, "approve")

    assert h.load(instance_id).status == InstanceStatus.FAULTED
    assert notification_jobs(h) == []
    # The notification task did run (its journal row is kept): a retry runs it again.
    assert [row.task_key for row in h.store.tasks] == ["notify", "raising"]


def test_a_mapping_stopped_at_its_deadline_fails_the_task():
    document = workflow(
        [
            state("draft", 1, [transition("approve", "approved")]),
            state("approved", 2, onEntries=[notify_ref(STUCK)]),
        ]
    )
    h = Harness(document, task_component("notify", "10", {"channels": ["sms"]}), timeout=0.3)
    instance_id = h.start().instance.id

    with pytest.raises(PipelineFault) as fault:
        h.fire(instance_id, "approve")

    assert fault.value.code == "Script:Timeout"
    assert notification_jobs(h) == []


def test_a_fan_out_refuses_a_notification_task_as_its_inner_task_before_any_item_runs():
    inner = {"key": "notify", "domain": "core", "version": "1.0.0", "flow": "sys-tasks"}
    fan = task_component("fan", "21", {"mode": "inline", "itemsPath": "$.items", "task": inner})
    fan_ref = {"order": 1, "task": {**inner, "key": "fan"}}
    document = workflow(
        [
            state("ready", 1, [transition("go", "done", onExecutionTasks=[fan_ref])]),
            state("done", 2),
        ]
    )
    h = Harness(document, fan, task_component("notify", "10", {"channels": ["sms"]}))
    instance_id = h.start({"items": [{"n": 1}]}).instance.id

    with pytest.raises(PipelineFault) as fault:
        h.fire(instance_id, "go")

    assert fault.value.code == "Task:Unsupported"
    assert "is a notification task (type 10)" in fault.value.message
    assert notification_jobs(h) == []
    assert not [row for row in h.store.tasks if row.task_key.startswith("fan#")]
