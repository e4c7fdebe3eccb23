"""`versionStrategy` on every path that writes data: the start's first version is 1.0.0 whatever
the start transition's strategy (there is no earlier version to bump), with or without task I/O;
each later write bumps by its transition's strategy; `None` rewrites its version in place."""

from __future__ import annotations

import pytest

from instances.models import Instance, InstanceDataVersion
from tests.engine.builders import state, task_ref, transition, workflow
from tests.instances.workflows import publish

pytestmark = pytest.mark.django_db
BASE = "/api/v1/core/workflows/versioned/instances"
NEXT = {"None": "1.0.0", "Patch": "1.0.1", "Minor": "1.1.0", "Major": "2.0.0"}


def versioned(start_strategy: str, *, start_task: bool) -> dict:
    document = workflow(
        [
            state(
                "ready",
                1,
                [
                    transition(f"write-{strategy.lower()}", "ready", versionStrategy=strategy)
                    for strategy in NEXT
                ],
            )
        ],
        key="versioned",
    )
    start = document["attributes"]["startTransition"]
    start["versionStrategy"] = start_strategy
    if start_task:
        start["onExecutionTasks"] = [task_ref({"fromTask": True})]
    return document


def versions(instance_id: str) -> list[str]:
    rows = InstanceDataVersion.objects.filter(instance_id=instance_id).order_by("created_at")
    return [row.version for row in rows]


@pytest.mark.parametrize("start_task", [False, True], ids=["no-task", "task"])
@pytest.mark.parametrize("start_strategy", list(NEXT))
def test_the_first_data_version_is_1_0_0_whatever_the_start_strategy(
    operator_client, start_strategy, start_task
):
    publish(versioned(start_strategy, start_task=start_task))

    started = operator_client.post(f"{BASE}/start?sync=true", {"n": 1}, format="json")

    assert started.status_code == 200, started.json()
    instance = Instance.objects.get(pk=started.json()["id"])
    assert instance.data_version == "1.0.0"
    assert versions(str(instance.id)) == ["1.0.0"]
    expected = {"n": 1, "fromTask": True} if start_task else {"n": 1}
    assert InstanceDataVersion.objects.get(instance=instance).data == expected


@pytest.mark.parametrize(("strategy", "after"), list(NEXT.items()))
def test_each_later_write_bumps_by_its_transitions_strategy(operator_client, strategy, after):
    publish(versioned("Minor", start_task=False))
    instance_id = operator_client.post(f"{BASE}/start?sync=true", {"n": 1}, format="json").json()[
        "id"
    ]

    fired = operator_client.patch(
        f"{BASE}/{instance_id}/transitions/write-{strategy.lower()}?sync=true",
        {"n": 2},
        format="json",
    )

    assert fired.status_code == 200, fired.json()
    assert Instance.objects.get(pk=instance_id).data_version == after
    expected = ["1.0.0"] if strategy == "None" else ["1.0.0", after]
    assert versions(instance_id) == expected
    assert InstanceDataVersion.objects.get(instance_id=instance_id, version=after).data == {"n": 2}


def test_a_busy_hop_committing_twice_moves_the_data_version_once(operator_client):
    # `advance` writes its payload, commits at ChangeState (its target has onEntries doing
    # I/O: Busy), then its onEntry task's output: one transition, one new version.
    from tests.instances.http_server import http_server
    from tests.instances.workflows import http_ref, http_task

    with http_server() as base_url:
        publish(
            http_task("ok-call", f"{base_url}/ok"),
            workflow(
                [
                    state("ready", 1, [transition("advance", "entered", versionStrategy="Minor")]),
                    state(
                        "entered",
                        2,
                        [transition("back", "ready")],
                        onEntries=[http_ref("ok-call"), task_ref({"entered": True}, order=2)],
                    ),
                ],
                key="versioned",
            ),
        )
        started = operator_client.post(f"{BASE}/start?sync=true", {"n": 1}, format="json")
        instance_id = started.json()["id"]
        moved = operator_client.patch(
            f"{BASE}/{instance_id}/transitions/advance?sync=true", {"m": 2}, format="json"
        )
        assert moved.status_code == 200, moved.json()
    instance = Instance.objects.get(pk=instance_id)
    assert instance.data == {"n": 1, "m": 2, "entered": True}
    assert instance.data_version == "1.1.0"
    assert versions(instance_id) == ["1.0.0", "1.1.0"]
    assert InstanceDataVersion.objects.get(instance=instance, version="1.1.0").data == {
        "n": 1,
        "m": 2,
        "entered": True,
    }
