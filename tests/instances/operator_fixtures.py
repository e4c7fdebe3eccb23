"""Faulted instances, operators and viewers for the operator-tool tests (admin and command);
plain helpers for tests that have the database."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission

from instances.engine.outcomes import PipelineFault
from instances.models import Instance
from instances.services import RequestInfo, instance_start, instance_transition
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
    user.groups.add(Group.objects.get(name="operators"))
    return user


def viewer() -> Any:
    """Staff who may only look at instances."""
    user = get_user_model().objects.create_user("viewer", password="pw-12345678", is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="instances", codename="view_instance")
    )
    return user
