"""SCENARIOS.md section 2 (timeout-lab-parent / timeout-lab-child: the parent's
`subFlow.overrides.timeout` is the child's deadline; the child timing out resumes the parent) and
section 13 (flow types S and P started directly through the public start endpoint)."""

from __future__ import annotations

from typing import Any

import pytest

from instances.job_handlers import jobs_run_due
from instances.models import Correlation, Instance
from tests.instances.scenario_api import WorkflowApi, at, import_examples, make_due, timers

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(db: None, operator_client: Any) -> Any:
    import_examples()
    return operator_client


def test_the_child_takes_the_parents_timeout_override_and_its_end_resumes_the_parent(client):
    parent_api = WorkflowApi(client, "timeout-lab-parent")
    parent_id = parent_api.started()
    parent = Instance.objects.get(pk=parent_id)
    child = Instance.objects.get(parent_correlation__parent=parent)
    assert (parent.current_state, parent.status) == ("parent-subflow", "B")
    assert (child.current_state, child.status) == ("child-waiting", "A")
    assert child.data == {"startedByTimeoutLabParent": True}

    child_api = WorkflowApi(client, "timeout-lab-child")
    block = child_api.state(str(child.pk))["timeout"]
    assert (block["key"], block["target"]) == ("child-abandoned", "child-timedout")
    (deadline,) = timers(str(child.pk), kind="timeout")
    assert 19 <= (deadline.run_at - deadline.created_at).total_seconds() <= 20
    assert at(block["executeAtUtc"]) == deadline.run_at
    # The parent does not inherit the child's deadline.
    assert timers(parent_id, kind="timeout") == []

    make_due(deadline)
    jobs_run_due()

    child = Instance.objects.get(pk=child.pk)
    assert (child.current_state, child.status, child.effective_state_subtype) == (
        "child-timedout",
        "C",
        "timeout",
    )
    assert [row["transitionKey"] for row in child_api.transitions(str(child.pk))][-1] == (
        "child-abandoned"
    )
    parent = Instance.objects.get(pk=parent_id)
    assert (parent.current_state, parent.status) == ("parent-completed", "C")
    assert parent.data["childSettled"] is True
    assert Correlation.objects.get(child=child).status == "cancelled"


def test_a_child_without_a_cancel_is_bypassed_when_the_parent_is_cancelled(client):
    # timeout-lab-child defines no cancel: the cascade passes it by and it runs on alone.
    parent_api = WorkflowApi(client, "timeout-lab-parent")
    parent_id = parent_api.started()
    child = Instance.objects.get(parent_correlation__parent__pk=parent_id)

    parent_api.fired(parent_id, "cancel-timeout-lab-parent")

    parent = Instance.objects.get(pk=parent_id)
    assert (parent.current_state, parent.status) == ("parent-cancelled", "C")
    assert Correlation.objects.get(child=child).status == "cancelled"
    child = Instance.objects.get(pk=child.pk)
    assert (child.current_state, child.status) == ("child-waiting", "A")
    (deadline,) = timers(str(child.pk), kind="timeout")
    assert deadline.status == "pending"
    # When it times out later, nobody waits for it: the cancelled parent stays as it is.
    make_due(deadline)
    jobs_run_due()
    assert Instance.objects.get(pk=child.pk).current_state == "child-timedout"
    assert Instance.objects.get(pk=parent_id).current_state == "parent-cancelled"


@pytest.mark.parametrize(
    ("workflow", "final", "flow_type"),
    [
        ("subflow-flow-test", "subflow-completed", "S"),
        ("subprocess-flow-test", "subprocess-completed", "P"),
    ],
)
def test_flow_types_s_and_p_start_directly_and_complete(client, workflow, final, flow_type):
    api = WorkflowApi(client, workflow)
    response = api.start(sync=False)
    assert response.status_code == 202
    instance_id = response.json()["id"]
    jobs_run_due()
    state = api.state(instance_id)
    assert (state["state"], state["status"]) == (final, "C")
    assert api.detail(instance_id)["attributes"]["flowType"] == flow_type
