"""SCENARIOS.md section 5, chain-busy-root -> chain-busy-middle -> chain-busy-leaf, through the
HTTP API: a 3-level SubFlow chain built on start, Busy ancestors while their correlation is open,
the root's state function reporting the leaf, `$self` shared transitions vs updateData,
forwarding to the leaf, cancel from the top and from the bottom, and resume to the root."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from instances.job_handlers import jobs_run_due
from instances.job_table import Job
from instances.models import Correlation, Instance, InstanceTransition
from instances.reaper import instances_reap_stranded_busy
from tests.instances.scenario_api import WorkflowApi, import_examples, scheduled

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(db: None, operator_client: Any) -> WorkflowApi:
    import_examples()
    return WorkflowApi(operator_client, "chain-busy-root")


def chain(root_id: str) -> tuple[Instance, Instance, Instance]:
    """The root, middle and leaf rows of the chain the root started."""
    root_row = Instance.objects.get(pk=root_id)
    middle = Instance.objects.get(parent_correlation__parent=root_row)
    leaf = Instance.objects.get(parent_correlation__parent_id=middle.pk)
    return root_row, middle, leaf


def where(*rows: Instance) -> list[tuple[str, str]]:
    return [(row.current_state, row.status) for row in rows]


def fresh(*rows: Instance) -> list[Instance]:
    return [Instance.objects.get(pk=row.pk) for row in rows]


def test_a_sync_start_builds_the_chain_and_the_root_reports_the_leaf(root):
    root_id = root.started()
    top, middle, leaf = chain(root_id)
    assert where(top, middle, leaf) == [
        ("root-waiting", "B"),
        ("middle-waiting", "B"),
        ("leaf-waiting", "A"),
    ]
    assert (top.data["rootInitialEntries"], top.data["rootEntries"]) == (1, 1)
    assert leaf.data["leafInitialEntries"] == 1
    assert Correlation.objects.filter(status="active").count() == 2
    state = root.state(root_id)
    assert (state["state"], state["status"]) == ("leaf-waiting", "A")
    assert [c["subFlowInstanceId"] for c in state["activeCorrelations"]] == [
        str(middle.pk),
        str(leaf.pk),
    ]


def test_a_self_shared_transition_on_the_leaf_runs_its_lifecycle_and_rearms_the_timer(root):
    _, _, leaf = chain(root.started())
    leaf_api = WorkflowApi(root.client, "chain-busy-leaf")
    armed = scheduled(leaf_api.state(str(leaf.pk)))
    assert [t["name"] for t in armed] == ["leaf-expire"]

    leaf_api.fired(str(leaf.pk), "leaf-only-mark")

    (leaf,) = fresh(leaf)
    assert (leaf.data["leafOnlyMarks"], leaf.data["leafEntries"], leaf.data["leafExits"]) == (
        1,
        2,
        1,
    )
    rearmed = scheduled(leaf_api.state(str(leaf.pk)))
    assert [t["name"] for t in rearmed] == ["leaf-expire"]
    assert rearmed[0]["executeAtUtc"] != armed[0]["executeAtUtc"]
    assert Job.objects.filter(instance_id=leaf.pk, kind="timer", status="cancelled").count() == 1


def test_update_data_on_the_leaf_runs_on_execute_only_and_keeps_the_timer(root):
    _, _, leaf = chain(root.started())
    leaf_api = WorkflowApi(root.client, "chain-busy-leaf")
    armed = scheduled(leaf_api.state(str(leaf.pk)))

    leaf_api.fired(str(leaf.pk), "update-leaf-data", {"note": "x"})

    (leaf,) = fresh(leaf)
    assert leaf.data["leafUpdates"] == 1
    assert (leaf.data["leafEntries"], leaf.data.get("leafExits", 0)) == (1, 0)
    assert scheduled(leaf_api.state(str(leaf.pk))) == armed


def test_the_roots_own_shared_transition_is_handled_by_the_root(root):
    root_id = root.started()
    top, middle, leaf = chain(root_id)

    answer = root.fired(root_id, "root-shared-mark")

    assert answer["status"] == "B"
    top, middle, leaf = fresh(top, middle, leaf)
    assert top.data["rootSharedMarks"] == 1
    assert "leafOnlyMarks" not in leaf.data
    assert where(top, middle, leaf) == [
        ("root-waiting", "B"),
        ("middle-waiting", "B"),
        ("leaf-waiting", "A"),
    ]
    # Still one child: re-entering the SubFlow state did not start another.
    assert Instance.objects.filter(parent_correlation__parent=top).count() == 1
    assert top.busy_owner == f"subflow:{middle.pk}"


def test_the_roots_own_shared_transition_sent_async_runs_once_on_the_root(root):
    # SCENARIOS 5.4 on the async path: accepted as a job (no 409), which runs on the root
    # under the Busy its correlation holds, and hands it back.
    root_id = root.started()
    top, middle, leaf = chain(root_id)

    accepted = root.fire(root_id, "root-shared-mark", sync=False)

    assert accepted.status_code == 202, accepted.json()
    assert jobs_run_due().get("succeeded") == 1
    top, middle, leaf = fresh(top, middle, leaf)
    assert top.data["rootSharedMarks"] == 1
    assert "leafOnlyMarks" not in leaf.data
    assert "middleSharedMarks" not in middle.data
    assert where(top, middle, leaf) == [
        ("root-waiting", "B"),
        ("middle-waiting", "B"),
        ("leaf-waiting", "A"),
    ]
    assert top.busy_owner == f"subflow:{middle.pk}"
    marks = InstanceTransition.objects.filter(transition_key="root-shared-mark")
    assert list(marks.values_list("instance_id", "status")) == [(top.pk, "completed")]


def test_a_leaf_transition_sent_to_the_root_is_forwarded_down_the_chain(root):
    root_id = root.started()

    root.fired(root_id, "leaf-only-mark")

    top, middle, leaf = fresh(*chain(root_id))
    assert leaf.data["leafOnlyMarks"] == 1
    assert "rootSharedMarks" not in top.data
    assert "middleSharedMarks" not in middle.data
    assert where(top, middle, leaf)[2] == ("leaf-waiting", "A")


def test_the_roots_data_function_shows_the_leaf_it_drives_at_once(root):
    # A forwarded transition's write shows through the root's data function while the chain
    # is active (the state function describes the leaf too); GET instance keeps the root's own.
    root_id = root.started()
    root.fired(root_id, "leaf-only-mark")
    _, _, leaf = fresh(*chain(root_id))
    shown = root.client.get(root.url(root_id, "functions", "data")).json()
    assert shown["data"] == leaf.data
    assert shown["data"]["leafOnlyMarks"] == 1
    own = root.client.get(root.url(root_id)).json()
    assert "leafOnlyMarks" not in own["attributes"]


def test_an_unknown_transition_sent_to_the_root_is_refused_by_the_leaf(root):
    root_id = root.started()
    response = root.fire(root_id, "no-such-transition")
    assert (response.status_code, response.json()["errorCode"]) == (404, "Transition:100004")


def test_cancel_on_the_root_cascades_down_the_chain(root):
    root_id = root.started()
    top, middle, leaf = chain(root_id)

    root.fired(root_id, "cancel-chain-busy-root")

    top, middle, leaf = fresh(top, middle, leaf)
    assert where(top, middle, leaf) == [
        ("root-cancelled", "C"),
        ("middle-cancelled", "C"),
        ("leaf-cancelled", "C"),
    ]
    assert not Correlation.objects.filter(status="active").exists()
    assert Job.objects.filter(status="pending", kind="timer").count() == 0


def test_cancel_on_the_leaf_completes_the_chain_upward(root):
    root_id = root.started()
    top, middle, leaf = chain(root_id)
    leaf_api = WorkflowApi(root.client, "chain-busy-leaf")

    leaf_api.fired(str(leaf.pk), "cancel-chain-busy-leaf")

    top, middle, leaf = fresh(top, middle, leaf)
    assert where(top, middle, leaf) == [
        ("root-done", "C"),
        ("middle-done", "C"),
        ("leaf-cancelled", "C"),
    ]
    assert top.data["middleCompleted"] is True
    assert middle.data["leafCompleted"] is True
    assert not Correlation.objects.filter(status="active").exists()
    assert list(Correlation.objects.order_by("pk").values_list("status", flat=True)) == [
        "completed",
        "cancelled",
    ]


def test_finish_leaf_resumes_the_middle_then_the_root(root):
    root_id = root.started({"testId": "t-1"})
    top, middle, leaf = chain(root_id)
    assert leaf.data["testId"] == "t-1"

    answer = root.fired(root_id, "finish-leaf")

    assert (answer["status"], answer["id"]) == ("C", root_id)
    top, middle, leaf = fresh(top, middle, leaf)
    assert where(top, middle, leaf) == [
        ("root-done", "C"),
        ("middle-done", "C"),
        ("leaf-done", "C"),
    ]
    assert leaf.data["leafFinishMarks"] == 1
    # The parents overlay their child's data and set their flag.
    assert (middle.data["leafFinishMarks"], middle.data["leafCompleted"]) == (1, True)
    assert (top.data["leafFinishMarks"], top.data["middleCompleted"]) == (1, True)
    assert top.data["rootExits"] == 1
    keys = [row["transitionKey"] for row in root.transitions(root_id)]
    assert keys[-2:] == ["$subflow-resume", "auto-root-to-done"]
    state = root.state(root_id)
    assert (state["state"], state["status"], state["activeCorrelations"]) == ("root-done", "C", [])


def test_update_data_on_a_waiting_root_is_data_only_and_not_forwarded(root):
    root_id = root.started()

    answer = root.fired(root_id, "update-root-data", {"operatorNote": "hello"})

    assert answer["status"] == "B"
    top, middle, leaf = fresh(*chain(root_id))
    # Step 21: the payload as sent; the transition's own mapping (rootUpdates) does not run.
    assert top.data["operatorNote"] == "hello"
    assert "rootUpdates" not in top.data
    assert top.data["rootEntries"] == 1
    assert "operatorNote" not in leaf.data
    assert where(top, middle, leaf) == [
        ("root-waiting", "B"),
        ("middle-waiting", "B"),
        ("leaf-waiting", "A"),
    ]


def test_a_busy_middle_runs_its_own_shared_transition_and_forwards_the_rest(root):
    root_id = root.started()
    _, middle, leaf = chain(root_id)
    middle_api = WorkflowApi(root.client, "chain-busy-middle")
    # middle's own $self shared transition runs on the middle, Busy for its child.
    middle_api.fired(str(middle.pk), "middle-shared-mark")
    (middle,) = fresh(middle)
    assert (middle.data["middleSharedMarks"], middle.status) == (1, "B")
    # Any other transition sent to the middle goes on to its leaf.
    middle_api.fired(str(middle.pk), "leaf-only-mark")
    (leaf,) = fresh(leaf)
    assert leaf.data["leafOnlyMarks"] == 1


def test_the_state_function_etag_follows_the_leaf(root):
    root_id = root.started()
    _, _, leaf = chain(root_id)
    first = root.function(root_id, "state")
    etag = first["ETag"]
    assert root.function(root_id, "state", headers={"If-None-Match": etag}).status_code == 304
    leaf_api = WorkflowApi(root.client, "chain-busy-leaf")
    # Data alone is not what the state function shows: the eTag stays.
    leaf_api.fired(str(leaf.pk), "update-leaf-data", {})
    assert root.function(root_id, "state", headers={"If-None-Match": etag}).status_code == 304
    # The leaf's `$self` transition re-arms its timer: the state the root reports changed.
    leaf_api.fired(str(leaf.pk), "leaf-only-mark")
    again = root.function(root_id, "state", headers={"If-None-Match": etag})
    assert again.status_code == 200


def test_the_reaper_leaves_parents_waiting_for_live_children(root, settings):
    root_id = root.started()
    top, middle, leaf = chain(root_id)
    settings.VNEXT = {**settings.VNEXT, "BUSY_LEASE_SECONDS": 0.0}
    Instance.objects.filter(pk__in=[top.pk, middle.pk]).update(
        busy_since=timezone.now() - timedelta(days=1)
    )
    assert instances_reap_stranded_busy() == 0
    assert where(*fresh(top, middle)) == [("root-waiting", "B"), ("middle-waiting", "B")]
    # Once the correlation is gone with no resume left, the parent is stranded: reaped.
    Correlation.objects.filter(child=leaf).update(status="completed")
    assert instances_reap_stranded_busy() == 1
    assert where(*fresh(middle)) == [("middle-waiting", "F")]


def test_the_admin_links_parents_and_children(root, operator):
    root_id = root.started()
    top, middle, leaf = chain(root_id)
    client = Client()
    client.force_login(operator)
    page = client.get(reverse("admin:instances_instance_change", args=[middle.pk])).content.decode()
    # Started by the root (a subflow waiting in root-waiting); started the leaf.
    assert reverse("admin:instances_instance_change", args=[top.pk]) in page
    assert "subflow in state root-waiting, active" in page
    assert reverse("admin:instances_instance_change", args=[leaf.pk]) in page
    assert "Subflows and subprocesses started" in page
