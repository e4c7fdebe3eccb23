"""Step order and profile membership, asserted from the runner; Auto before Schedule; the
automatic chain and its depth limit; partial commit on an OnEntry fault. In-memory store."""

from __future__ import annotations

from datetime import timedelta

import pytest

from instances.engine.errors import Codes
from instances.engine.execution import MAX_CHAIN_DEPTH
from instances.engine.outcomes import PipelineFault, Rejected
from instances.engine.ports import utc_now
from instances.engine.profiles import (
    AUTO_CHAIN,
    ERROR_BOUNDARY,
    EVENT,
    MANUAL,
    SCHEDULED,
    Order,
    Trigger,
    resolve_profile,
)
from instances.status import InstanceStatus
from tests.engine.builders import (
    Harness,
    script,
    script_task,
    state,
    task_ref,
    transition,
    workflow,
)

ALL = [int(order) for order in Order]


def orders(*excluded: Order) -> list[int]:
    return [order for order in ALL if order not in {int(e) for e in excluded}]


def test_lifecycle_order_is_the_seed_table():
    assert ALL == [5, 10, 19, 20, 21, 25, 30, 38, 39, 40, 50, 60, 70, 75, 79, 80, 90, 100, 110, 112]


@pytest.mark.parametrize(
    ("profile", "excluded", "allow_subflow"),
    [
        (MANUAL, set(), True),
        (
            AUTO_CHAIN,
            {
                Order.PREFLIGHT,
                Order.FORWARD_TO_ACTIVE_SUBFLOW,
                Order.SET_BUSY,
                Order.APPLY_TIMEOUT_STATE,
            },
            False,
        ),
        (SCHEDULED, {Order.PREFLIGHT, Order.FORWARD_TO_ACTIVE_SUBFLOW}, False),
        (EVENT, {Order.PREFLIGHT, Order.FORWARD_TO_ACTIVE_SUBFLOW}, True),
        (
            ERROR_BOUNDARY,
            {Order.PREFLIGHT, Order.FORWARD_TO_ACTIVE_SUBFLOW, Order.RESOURCE_LOCK},
            False,
        ),
    ],
    ids=lambda value: getattr(value, "name", None),
)
def test_profiles_exclude_what_the_seed_says(profile, excluded, allow_subflow):
    assert profile.excluded == frozenset(excluded)
    assert profile.allow_subflow is allow_subflow
    assert profile.allow_auto_chain is True


def test_self_composes_onto_the_base_profile():
    self_only = {Order.CANCEL_SCHEDULED_JOBS, Order.ON_EXIT, Order.ON_ENTRY, Order.SCHEDULE}
    manual_self = resolve_profile(Trigger.MANUAL, is_update_data=True)
    auto_self = resolve_profile(Trigger.AUTOMATIC, is_update_data=True)
    assert manual_self.name == "Manual+Self"
    assert manual_self.excluded == frozenset(self_only)
    assert auto_self.name == "AutoChain+Self"
    assert auto_self.excluded == AUTO_CHAIN.excluded | self_only
    assert manual_self.runs(Order.CHANGE_STATE)
    assert manual_self.runs(Order.ON_EXECUTE)
    assert manual_self.runs(Order.AUTO)
    assert resolve_profile(Trigger.MANUAL, is_update_data=False) is MANUAL


def ping_pong(**extra):
    return workflow(
        [
            state("ping", 1, [transition("to-pong", "pong")]),
            state(
                "pong",
                2,
                [transition("to-ping", "ping"), transition("noop", "$self")],
            ),
        ],
        updateData={
            "key": "update-data",
            "target": "$self",
            "triggerType": 0,
            "versionStrategy": "Patch",
            "labels": [{"label": "u", "language": "en"}],
        },
        **extra,
    )


def test_manual_run_executes_every_step_in_order():
    harness = Harness(ping_pong())
    started = harness.start()
    execution = harness.fire(started.instance.id, "to-pong")
    [hop] = execution.hops
    assert hop.profile is MANUAL
    assert [int(o) for o in hop.executed] == ALL


@pytest.mark.parametrize(
    ("trigger", "excluded"),
    [
        (Trigger.SCHEDULED, (Order.PREFLIGHT, Order.FORWARD_TO_ACTIVE_SUBFLOW)),
        (Trigger.EVENT, (Order.PREFLIGHT, Order.FORWARD_TO_ACTIVE_SUBFLOW)),
        (
            Trigger.ERROR_BOUNDARY,
            (Order.PREFLIGHT, Order.FORWARD_TO_ACTIVE_SUBFLOW, Order.RESOURCE_LOCK),
        ),
        (
            Trigger.AUTOMATIC,
            (
                Order.PREFLIGHT,
                Order.FORWARD_TO_ACTIVE_SUBFLOW,
                Order.SET_BUSY,
                Order.APPLY_TIMEOUT_STATE,
            ),
        ),
    ],
)
def test_the_inbound_trigger_picks_the_profile_the_runner_follows(trigger, excluded):
    harness = Harness(ping_pong())
    started = harness.start()
    execution = harness.fire(started.instance.id, "to-pong", trigger=trigger)
    assert [int(o) for o in execution.hops[0].executed] == orders(*excluded)


def test_update_data_runs_manual_plus_self():
    harness = Harness(ping_pong())
    started = harness.start()
    harness.fire(started.instance.id, "to-pong")
    execution = harness.fire(started.instance.id, "update-data", {"note": "hi"})
    [hop] = execution.hops
    assert hop.profile.name == "Manual+Self"
    assert [int(o) for o in hop.executed] == orders(
        Order.CANCEL_SCHEDULED_JOBS, Order.ON_EXIT, Order.ON_ENTRY, Order.SCHEDULE
    )
    instance = harness.load(started.instance.id)
    assert instance.current_state == "pong"
    assert instance.data == {"note": "hi"}


def test_update_data_in_an_auto_chain_runs_auto_chain_plus_self():
    harness = Harness(ping_pong())
    started = harness.start()
    harness.fire(started.instance.id, "to-pong")
    execution = harness.fire(
        started.instance.id, "update-data", {"x": 1}, trigger=Trigger.AUTOMATIC
    )
    assert execution.hops[0].profile.name == "AutoChain+Self"
    assert [int(o) for o in execution.hops[0].executed] == orders(
        Order.PREFLIGHT,
        Order.FORWARD_TO_ACTIVE_SUBFLOW,
        Order.SET_BUSY,
        Order.APPLY_TIMEOUT_STATE,
        Order.CANCEL_SCHEDULED_JOBS,
        Order.ON_EXIT,
        Order.ON_ENTRY,
        Order.SCHEDULE,
    )


def gate(rule_result: str) -> dict:
    return workflow(
        [
            state(
                "gate",
                1,
                [
                    transition(
                        "auto-advance",
                        "advanced",
                        1,
                        rule=script(f"def handler(context):\n    return {rule_result}\n"),
                    ),
                    transition(
                        "gate-timeout",
                        "timed-out",
                        2,
                        timer=script(
                            "from datetime import timedelta\n\ndef handler(context):\n"
                            "    return timedelta(seconds=8)\n"
                        ),
                    ),
                ],
            ),
            state("advanced", 2, [transition("finish", "done")]),
            state("timed-out", 3, subType=1),
            state("done", 3, subType=1),
        ]
    )


def test_auto_runs_before_schedule_and_a_winner_arms_no_timer():
    harness = Harness(gate("context.instance.data.get('mode') == 'auto'"))
    execution = harness.start({"mode": "auto"})
    first, chained = execution.hops
    assert first.executed.index(Order.AUTO) < first.executed.index(Order.SCHEDULE)
    assert first.next_transition is not None
    assert first.next_transition.key == "auto-advance"
    assert chained.profile is AUTO_CHAIN
    assert execution.instance.current_state == "advanced"
    assert harness.store.jobs == []


def test_without_an_auto_winner_schedule_arms_the_timer():
    harness = Harness(gate("context.instance.data.get('mode') == 'auto'"))
    before = utc_now()
    execution = harness.start({"mode": "park"})
    after = utc_now()
    assert execution.instance.current_state == "gate"
    [job] = harness.store.jobs
    assert (job["kind"], job["state"], job["status"]) == ("timer", "gate", "pending")
    assert job["payload"]["transition"] == "gate-timeout"
    assert before + timedelta(seconds=8) <= job["run_at"] <= after + timedelta(seconds=8)


def chain(length: int) -> dict:
    states = [state(f"s{i}", 1 if i == 0 else 2) for i in range(length + 1)]
    states[0]["transitions"] = [transition("go", "s1")]
    for i in range(1, length + 1):
        states[i]["transitions"] = [transition(f"auto-{i}", f"s{i + 1}", 1, triggerKind=10)]
    states.append(state(f"s{length + 1}", 3, subType=1))
    return workflow(states)


def test_a_chain_of_50_automatic_hops_completes_inline():
    harness = Harness(chain(MAX_CHAIN_DEPTH))
    started = harness.start()
    execution = harness.fire(started.instance.id, "go")
    assert len(execution.hops) == 1 + MAX_CHAIN_DEPTH
    assert execution.instance.status == InstanceStatus.COMPLETED
    assert execution.instance.current_state == f"s{MAX_CHAIN_DEPTH + 1}"
    # All hops of a run without I/O commit once.
    assert harness.store.flushes == 2


def test_the_51st_automatic_hop_faults_with_transition_100017():
    harness = Harness(chain(MAX_CHAIN_DEPTH + 1))
    started = harness.start()
    with pytest.raises(PipelineFault) as caught:
        harness.fire(started.instance.id, "go")
    assert caught.value.code == "Transition:100017"
    instance = harness.load(started.instance.id)
    assert instance.status == InstanceStatus.FAULTED
    assert instance.current_state == f"s{MAX_CHAIN_DEPTH + 1}"
    assert [i.error_code for i in harness.store.incidents] == ["Transition:100017"]
    faulted = [t for t in harness.store.transitions.values() if t.status == "faulted"]
    assert [t.chain_depth for t in faulted] == [MAX_CHAIN_DEPTH + 1]


def test_default_auto_fires_only_when_no_rule_matches():
    document = workflow(
        [
            state(
                "check",
                1,
                [
                    transition(
                        "pass",
                        "passed",
                        1,
                        rule=script(
                            "def handler(context):\n"
                            "    return context.instance.data['path'] == 'pass'\n"
                        ),
                    ),
                    transition("fallback", "fallen-back", 1, triggerKind=10),
                ],
            ),
            state("passed", 3, subType=1),
            state("fallen-back", 3, subType=2),
        ]
    )
    harness = Harness(document)
    assert harness.start({"path": "pass"}).instance.current_state == "passed"
    fallback = harness.start({"path": "other"})
    assert fallback.instance.current_state == "fallen-back"
    assert fallback.instance.effective_state_subtype == "error"


def test_a_fault_in_on_entry_leaves_the_instance_committed_in_the_target_state():
    document = workflow(
        [
            state("a", 1, [transition("go", "b")]),
            state("b", 2, onEntries=[task_ref("1 / 0")]),
        ]
    )
    harness = Harness(document, script_task())
    started = harness.start()
    with pytest.raises(PipelineFault) as caught:
        harness.fire(started.instance.id, "go", {"before": True})
    assert caught.value.code == "Task:400008"
    instance = harness.load(started.instance.id)
    assert (instance.current_state, instance.status) == ("b", InstanceStatus.FAULTED)
    assert instance.data == {"before": True}
    assert [i.error_code for i in harness.store.incidents] == ["Task:400008"]
    assert "ZeroDivisionError" in harness.store.incidents[0].message
    [journal] = harness.store.tasks
    assert (journal.task_key, journal.phase, journal.status) == ("script-task", "onEntry", "failed")


def test_tasks_merge_their_output_in_order_and_same_order_runs_together():
    document = workflow(
        [
            state(
                "a",
                1,
                [
                    transition(
                        "go",
                        "b",
                        onExecutionTasks=[
                            task_ref({"first": 1, "shared": "first"}, order=1),
                            task_ref({"second": 2}, order=1),
                            task_ref({"third": 3, "shared": "third"}, order=2),
                        ],
                    )
                ],
            ),
            state("b", 2),
        ]
    )
    harness = Harness(document, script_task())
    started = harness.start()
    execution = harness.fire(started.instance.id, "go")
    assert execution.instance.data == {"first": 1, "shared": "third", "second": 2, "third": 3}
    assert [(t.order, t.status) for t in harness.store.tasks] == [
        (1, "succeeded"),
        (1, "succeeded"),
        (2, "succeeded"),
    ]
    assert execution.instance.status == InstanceStatus.ACTIVE


def test_busy_and_completed_instances_are_refused_before_anything_is_written():
    harness = Harness(ping_pong())
    started = harness.start()
    row = harness.store.rows[started.instance.id]
    row.status = InstanceStatus.BUSY
    flushes = harness.store.flushes
    with pytest.raises(Rejected) as caught:
        harness.fire(started.instance.id, "to-pong")
    assert caught.value.error == Codes.INSTANCE_BUSY
    row.status = InstanceStatus.COMPLETED
    with pytest.raises(Rejected) as caught:
        harness.fire(started.instance.id, "to-pong")
    assert caught.value.error == Codes.INSTANCE_COMPLETED
    assert harness.store.flushes == flushes


def test_a_rule_that_raises_faults_with_its_location_and_line():
    document = workflow(
        [
            state("a", 1, [transition("go", "b")]),
            state(
                "b",
                2,
                [
                    transition(
                        "auto",
                        "c",
                        1,
                        rule=script(
                            "def handler(context):\n    return context.instance.data['missing']\n"
                        ),
                    )
                ],
            ),
            state("c", 3),
        ]
    )
    harness = Harness(document)
    started = harness.start()
    with pytest.raises(PipelineFault) as caught:
        harness.fire(started.instance.id, "go")
    assert caught.value.code == "Script:100001"
    assert "./src/Test.py, line 2: KeyError" in caught.value.message
    instance = harness.load(started.instance.id)
    assert (instance.current_state, instance.status) == ("b", InstanceStatus.FAULTED)
