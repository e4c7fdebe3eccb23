"""Faulted instances, operators and viewers for the operator-tool tests (admin and command);
plain helpers for tests that have the database."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from instances.engine.outcomes import PipelineFault
from instances.models import Instance
from instances.services import RequestInfo, instance_start, instance_transition
from tests.conftest import migration_group
from tests.engine.builders import state, task_ref, transition, workflow
from tests.instances.workflows import CANCEL, publish

# Faults (ZeroDivisionError in the output handler) until the data holds a non-zero divisor.
DIVIDE = task_ref("{'quotient': 10 / context.instance.data.get('divisor', 0)}")


def fixable(*, cancel: bool = True, key: str = "fixable") -> dict[str, Any]:
    """`ready --compute--> working`, a cancel to `cancelled` unless `cancel=False`."""
    extra: dict[str, Any] = {"cancel": CANCEL} if cancel else {}
    return workflow(
        [
            state("ready", 1, [transition("compute", "working", onExecutionTasks=[DIVIDE])]),
            state("working", 2, [transition("finish", "done")]),
            state("done", 3, subType=1),
            state("cancelled", 3, subType=3),
        ],
        key=key,
        **extra,
    )


def faulted_instance(workflow_key: str = "fixable") -> Instance:
    """A new instance of `workflow_key` faulted in `compute`'s OnExecute."""
    info = RequestInfo(actor="client")
    started = instance_start(domain="core", workflow=workflow_key, body={}, info=info)
    with pytest.raises(PipelineFault):
        instance_transition(
            domain="core",
            workflow=workflow_key,
            ref=str(started.instance.id),
            transition_key="compute",
            body={},
            info=info,
        )
    row = Instance.objects.get(pk=started.instance.id)
    assert row.status == "F"
    return row


def repair_outside(instance: Instance, divisor: int = 4) -> None:
    """What an operator fixed elsewhere: the divisor is now there."""
    Instance.objects.filter(pk=instance.pk).update(data={"divisor": divisor})


def publish_workflows() -> None:
    """`fixable` (with a cancel) and `uncancellable` (without)."""
    publish(fixable(), fixable(cancel=False, key="uncancellable"))


def staff_operator() -> Any:
    """Staff, not superuser, in the `operators` group the data migration created."""
    user = get_user_model().objects.create_user("ops", password="pw-12345678", is_staff=True)
    user.groups.add(migration_group("operators"))
    return user


def viewer() -> Any:
    """Staff who may only look at instances."""
    user = get_user_model().objects.create_user("viewer", password="pw-12345678", is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="instances", codename="view_instance")
    )
    return user


def long_history_instance(transitions: int = 500, versions: int = 200) -> Instance:
    """An `inspected` (ping-pong) instance, published here, with `transitions` history rows
    (alternating ping/pong) and `versions` data versions, each changing a few fields: the
    inspector's worst page."""
    from datetime import timedelta

    from django.utils import timezone

    from instances.models import InstanceDataVersion, InstanceTask, InstanceTransition
    from tests.instances.workflows import ping_pong
    from workflows.services import component_publish

    component_publish(document=ping_pong("inspected"))
    started = instance_start(domain="core", workflow="inspected", body={}, info=RequestInfo())
    instance = Instance.objects.get(pk=started.instance.id)
    base = timezone.now() - timedelta(hours=1)
    rows = []
    for index in range(transitions):
        source, target = ("ping", "pong") if index % 2 == 0 else ("pong", "ping")
        rows.append(
            InstanceTransition(
                instance=instance,
                transition_key=f"to-{target}",
                from_state=source,
                to_state=target,
                trigger_type=0,
                actor="client",
                status="completed",
                started_at=base + timedelta(seconds=index),
                finished_at=base + timedelta(seconds=index, milliseconds=12),
            )
        )
    InstanceTransition.objects.bulk_create(rows)
    data: dict[str, Any] = {"customer": {"id": "c-1", "tier": "gold"}, "items": []}
    versions_rows = []
    for index in range(versions):
        data = {**data, "counter": index, "last": f"step-{index}", "items": [index % 7]}
        versions_rows.append(
            InstanceDataVersion(
                instance=instance,
                transition=rows[min(index, transitions - 1)],
                version=f"1.{index}.0",
                patch={"counter": index},
                data=data,
                created_at=base + timedelta(seconds=index),
            )
        )
    InstanceDataVersion.objects.bulk_create(versions_rows)
    InstanceTask.objects.bulk_create(
        InstanceTask(
            instance=instance,
            task_key=f"task-{index}",
            phase="onExecute",
            status="succeeded",
            created_at=base + timedelta(seconds=index),
        )
        for index in range(50)
    )
    Instance.objects.filter(pk=instance.pk).update(
        current_state="pong" if transitions % 2 else "ping", data=data
    )
    return Instance.objects.get(pk=instance.pk)
