"""The write funnel in the engine (in-memory store): a patch a script derived from the data is
flushed only onto the data it was derived from; when another write changed the data first, the
run derives its patches again, in order, from the data as committed. Tasks of one `order` run
side by side but merge one after the other."""

from __future__ import annotations

import uuid
from typing import Any

from instances.engine.merging import deep_merge
from instances.engine.ports import InMemoryStore
from instances.engine.records import Guard, InstanceSnapshot, PendingWrites, new_etag
from tests.engine.builders import (
    Harness,
    script,
    script_task,
    state,
    task_ref,
    transition,
    workflow,
)

BUMP = "{'count': (context.instance.data.get('count') or 0) + 1}"
MAPPING_BUMP = (
    "def handler(context):\n"
    "    return {'count': (context.instance.data.get('count') or 0) + 1, "
    "'asked': context.body.get('asked')}\n"
)


def counter(*transitions: dict[str, Any]) -> dict[str, Any]:
    return workflow([state("open", 1, list(transitions)), state("closed", 3, subType=1)], key="wf")


class InterferingStore(InMemoryStore):
    """Commits another writer's change to the data just before the first data-guarded flush."""

    def __init__(self, change: dict[str, Any]) -> None:
        super().__init__()
        self.change = change
        self.guards: list[Guard] = []

    def flush(
        self, snapshot: InstanceSnapshot, writes: PendingWrites, guard: Guard
    ) -> InstanceSnapshot | None:
        self.guards.append(guard)
        if guard.data_etag is not None and self.change:
            row = self.rows[snapshot.id]
            row.data = deep_merge(row.data, self.change)
            row.entity_etag = new_etag()
            self.change = {}
        return super().flush(snapshot, writes, guard)


def harness_with(store: InMemoryStore, *documents: dict[str, Any]) -> Harness:
    harness = Harness(*documents)
    harness.store = store
    harness.engine.store = store
    return harness


def test_two_tasks_of_one_order_bumping_one_key_both_count():
    harness = Harness(
        script_task(),
        counter(transition("bump", "open", onExecutionTasks=[task_ref(BUMP), task_ref(BUMP)])),
    )
    instance = harness.start().instance
    harness.fire(instance.id, "bump")
    assert harness.load(instance.id).data == {"count": 2}


def test_a_mapping_whose_data_changed_before_its_flush_runs_again_on_the_new_data():
    store = InterferingStore({"count": 10, "other": "kept"})
    harness = harness_with(
        store, script_task(), counter(transition("bump", "open", mapping=script(MAPPING_BUMP)))
    )
    instance = harness.start().instance
    execution = harness.fire(instance.id, "bump", {"asked": "yes"})
    assert harness.load(instance.id).data == {"count": 11, "other": "kept", "asked": "yes"}
    # The run's view follows the data it finally wrote.
    assert execution.instance.data == {"count": 11, "other": "kept", "asked": "yes"}
    data_guarded = [guard for guard in store.guards if guard.data_etag is not None]
    assert len(data_guarded) == 2  # refused once (DataChanged), then written


def test_task_outputs_are_derived_again_in_order_after_another_write():
    # The second task's output reads what the first one wrote: both are made again, in order.
    double = "{'twice': (context.instance.data.get('count') or 0) * 2}"
    store = InterferingStore({"count": 5})
    harness = harness_with(
        store,
        script_task(),
        counter(
            transition("bump", "open", onExecutionTasks=[task_ref(BUMP), task_ref(double, order=2)])
        ),
    )
    instance = harness.start().instance
    harness.fire(instance.id, "bump")
    assert harness.load(instance.id).data == {"count": 6, "twice": 12}


def test_constant_patches_flush_without_a_data_guard():
    store = InterferingStore({})
    harness = harness_with(store, script_task(), counter(transition("set", "open")))
    instance = harness.start({"a": 1}).instance
    harness.fire(instance.id, "set", {"b": 2})
    assert harness.load(instance.id).data == {"a": 1, "b": 2}
    assert all(guard.data_etag is None for guard in store.guards)


def test_an_update_data_mapping_is_derived_again_when_a_transition_wrote_first():
    store = InterferingStore({"count": 3})
    document = counter()
    document["attributes"]["updateData"] = {
        "key": "update-data",
        "target": "$self",
        "triggerType": 0,
        "versionStrategy": "Patch",
        "labels": [{"label": "x", "language": "en"}],
        "mapping": script(MAPPING_BUMP),
    }
    harness = harness_with(store, script_task(), document)
    instance = harness.start().instance
    harness.fire(instance.id, "update-data", {"asked": "again"})
    stored = harness.load(instance.id)
    assert stored.data == {"count": 4, "asked": "again"}
    assert stored.data_version == (1, 0, 1)
    assert uuid.UUID(str(stored.id)) == instance.id
