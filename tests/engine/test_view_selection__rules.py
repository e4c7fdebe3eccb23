"""View selection (instances/engine/view_selection.py) without a database: a conditional view's
rules run in order in the script workers and the first that holds wins, else the default, else
none; a rule that raises is passed over; no worker to run a rule is `Script:Unavailable` (503);
the instance's pinned SubFlow view override replaces the chosen view by its key."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from instances.engine.definition import WorkflowDefinition
from instances.engine.errors import VNextError
from instances.engine.overrides import OVERRIDES_KEY
from instances.engine.ports import InMemoryComponents
from instances.engine.records import InstanceSnapshot
from instances.engine.script_pool import ScriptCall, ScriptReply
from instances.engine.script_runner import ScriptRunner
from instances.engine.scripts import ScriptUnavailable
from instances.engine.view_selection import ViewChoice, ViewSlot, choose_view, select_view
from tests.engine.builders import Harness, script, state, workflow


def ref(key: str) -> dict[str, str]:
    return {"key": key, "domain": "core", "version": "1.0.0", "flow": "sys-views"}


def rule(expression: str) -> dict[str, str]:
    return script(f"def handler(context):\n    return {expression}\n")


CONDITIONAL = {
    "rules": [
        {"rule": rule("1 / 0"), "view": ref("broken-view")},
        {"rule": rule('context.instance.data.get("tier") == "gold"'), "view": ref("gold-view")},
        {
            "rule": rule('context.headers.get("x-platform") == "ios"'),
            "view": ref("ios-view"),
            "loadData": True,
        },
    ],
    "default": {"view": ref("web-view")},
}
DOCUMENT = workflow([state("form", 1, view=CONDITIONAL), state("done", 3)])


def instance(data: dict[str, Any] | None = None, **extra: Any) -> InstanceSnapshot:
    return InstanceSnapshot(
        id=uuid.uuid4(),
        domain="core",
        workflow_key="wf",
        workflow_version="1.0.0",
        current_state="form",
        data=data or {},
        extra=extra,
    )


def chosen(snapshot: InstanceSnapshot, **headers: str) -> ViewChoice | None:
    harness = Harness(DOCUMENT)
    return select_view(
        harness.engine.scripts,
        harness.definition(),
        snapshot,
        ViewSlot(CONDITIONAL),
        headers=headers,
    )


def test_rules_run_in_order_the_first_that_holds_wins_else_the_default():
    assert chosen(instance()) == ViewChoice(ref("web-view"), False)
    assert chosen(instance(), **{"x-platform": "ios"}) == ViewChoice(ref("ios-view"), True)
    assert chosen(instance({"tier": "gold"}), **{"x-platform": "ios"}) == ViewChoice(
        ref("gold-view"), False
    )


def test_without_a_default_no_rule_holding_is_no_view_and_a_plain_view_needs_no_rule():
    without_default = {"rules": CONDITIONAL["rules"]}
    assert choose_view(without_default, lambda _rule: False) is None
    assert choose_view({"view": ref("a"), "loadData": True}, lambda _rule: False) == ViewChoice(
        ref("a"), True
    )
    assert choose_view(None, lambda _rule: True) is None


def test_the_pinned_subflow_override_replaces_the_chosen_view_by_key():
    overridden = instance(**{OVERRIDES_KEY: {"source": "s", "views": {"web-view": ref("mine")}}})
    assert chosen(overridden) == ViewChoice(ref("mine"), False)
    assert chosen(overridden, **{"x-platform": "ios"}) == ViewChoice(ref("ios-view"), True)


class NoWorker:
    """An executor whose pool has no worker to give."""

    def run(self, call: ScriptCall) -> ScriptReply:
        raise ScriptUnavailable("all workers are busy", location=call.location)


def test_no_worker_to_run_a_rule_is_a_503_not_a_silent_default():
    runner = ScriptRunner(InMemoryComponents([DOCUMENT]), 1.0, script_executor=NoWorker())
    with pytest.raises(VNextError) as raised:
        select_view(runner, WorkflowDefinition(DOCUMENT), instance(), ViewSlot(CONDITIONAL))
    assert (raised.value.error.code, raised.value.error.http_status) == ("Script:Unavailable", 503)
