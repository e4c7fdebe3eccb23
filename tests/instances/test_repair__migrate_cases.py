"""Migrations of instances in the harder places: a Faulted instance moved to a version that fixes
its fault and then retried there, or refused when its faulted transition is gone; a parent
waiting for its SubFlow child, moved when the child's workflow stays, refused when it changes."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from instances.models import Instance, OperatorAction
from tests.engine.builders import script_task, state, transition, workflow
from tests.instances.operator_fixtures import faulted_instance, fixable
from tests.instances.test_subflows__faults import documents
from tests.instances.workflows import publish
from workflows.services import component_publish

pytestmark = pytest.mark.django_db
FIXABLE = "/api/v1/core/workflows/fixable/instances"


def version_of(document: dict[str, Any], version: str) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    changed["version"] = version
    return changed


def test_a_faulted_instance_migrated_to_a_fixed_version_retries_there(operator_client):
    publish(fixable())
    instance = faulted_instance()
    fixed = version_of(fixable(), "1.1.0")
    fixed["attributes"]["states"][0] = state("ready", 1, [transition("compute", "working")])
    publish(fixed)

    migrated = operator_client.post(
        f"{FIXABLE}/{instance.pk}/migrate", {"targetVersion": "1.1.0"}, format="json"
    )

    assert migrated.status_code == 200, migrated.json()
    row = Instance.objects.get(pk=instance.pk)
    assert (row.status, row.workflow_version) == ("F", "1.1.0")
    retried = operator_client.post(f"{FIXABLE}/{instance.pk}/retry?sync=true", {}, format="json")
    assert retried.status_code == 200, retried.json()
    row = Instance.objects.get(pk=instance.pk)
    assert (row.status, row.current_state) == ("A", "working")
    channels = OperatorAction.objects.filter(instance_id=instance.pk).order_by("created_at")
    assert [(a.action, a.channel) for a in channels] == [("migrate", "api"), ("retry", "api")]


def test_a_faulted_instance_is_not_migrated_where_its_transition_is_gone(operator_client):
    publish(fixable())
    instance = faulted_instance()
    gone = version_of(fixable(), "2.0.0")
    gone["attributes"]["states"][0] = state("ready", 1, [transition("skip", "working")])
    publish(gone)

    refused = operator_client.post(
        f"{FIXABLE}/{instance.pk}/migrate", {"targetVersion": "2.0.0"}, format="json"
    )

    assert (refused.status_code, refused.json()["error"]["code"]) == (
        409,
        "Migration:StateUnmapped",
    )
    assert Instance.objects.get(pk=instance.pk).workflow_version == "1.0.0"


def test_a_parent_waiting_for_its_child_moves_only_when_the_child_workflow_stays(
    operator_client,
):
    child, parent = documents()
    for document in (script_task(), child, parent):
        component_publish(document=document)
    started = operator_client.post(
        "/api/v1/core/workflows/asker/instances/start?sync=true", {}, format="json"
    )
    parent_id = started.json()["id"]
    assert Instance.objects.get(pk=parent_id).status == "B"  # it waits for its (faulted) child
    other = version_of(parent, "1.1.0")
    other["attributes"]["states"][1]["subFlow"]["process"]["key"] = "other-checker"
    other_child = copy.deepcopy(child)
    other_child["key"] = "other-checker"
    component_publish(document=other_child)
    component_publish(document=other)
    same = version_of(parent, "1.2.0")
    component_publish(document=same)
    base = "/api/v1/core/workflows/asker/instances"

    refused = operator_client.post(
        f"{base}/{parent_id}/migrate", {"targetVersion": "1.1.0"}, format="json"
    )
    moved = operator_client.post(
        f"{base}/{parent_id}/migrate", {"targetVersion": "1.2.0"}, format="json"
    )

    assert (refused.status_code, refused.json()["error"]["code"]) == (
        409,
        "Migration:SubflowIncompatible",
    )
    assert moved.status_code == 200, moved.json()
    row = Instance.objects.get(pk=parent_id)
    assert (row.workflow_version, row.status, row.current_state) == ("1.2.0", "B", "p-check")
    kid = Instance.objects.get(parent_correlation__parent__pk=parent_id)
    retried = operator_client.post(
        f"/api/v1/core/workflows/checker/instances/{kid.pk}/retry?sync=true",
        {"attributes": {"ok": True}},
        format="json",
    )
    assert retried.status_code == 200, retried.json()
    row = Instance.objects.get(pk=parent_id)
    assert (row.status, row.current_state, row.workflow_version) == ("C", "p-done", "1.2.0")


def test_instances_of_other_workflows_are_not_reached(operator_client):
    publish(fixable(), workflow([state("only", 1)], key="lonely"))
    instance = faulted_instance()

    wrong = operator_client.post(
        f"/api/v1/core/workflows/lonely/instances/{instance.pk}/suspend", {}, format="json"
    )

    assert wrong.status_code == 404
    assert Instance.objects.get(pk=instance.pk).status == "F"
