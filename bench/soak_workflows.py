"""The soak workflow (`python -m bench soak`): every kind of transition the runtime runs.

Domain `soak`, workflow `soak-flow`. From `idle` (Initial) a client fires one of:

- `work` -> `working`: a script task (type 7) whose output adds 1 to `works`, so the data
  counts how often the transition really ran (`rest` goes back to `idle`);
- `lock` -> `locked`: a resource lock (`Acquire`) on the key the start wrote to `lockKey`;
  `unlock` (`Release`) goes back to `idle`, `finish-locked` completes the instance and leaves the
  release to the runtime;
- `sleep` -> `sleeping`: a scheduled transition `wake` (timer `PT1S`) goes back to `idle`; a
  client may race it with the manual `poke`, which goes to `idle` too;
- `chain` -> `chain-a`: the automatic transitions `auto-a` (-> `chain-b`) and `auto-b`
  (-> `idle`) follow in the same run;
- `finish` -> `done` (Final).

Every client request carries `{"attributes": {"marker": ...}}`: the marker is merged into the
data and kept in the request body of the transition's history row, which is how the soak
matches what the API accepted with what the runtime applied.
"""

from __future__ import annotations

import copy
from typing import Any

DOMAIN = "soak"
WORKFLOW = "soak-flow"
VERSION = "1.0.0"
TASK_KEY = "soak-count-work"
LOCK_TTL_SECONDS = 900

# Where each client transition leads (the automatic chain ends in `idle`).
TARGETS = {
    "work": "working",
    "rest": "idle",
    "lock": "locked",
    "unlock": "idle",
    "finish-locked": "done",
    "sleep": "sleeping",
    "poke": "idle",
    "chain": "idle",
    "finish": "done",
}
# Transitions the runtime fires by itself: automatic ones and the timer.
RUNTIME_TRANSITIONS = ("auto-a", "auto-b", "wake")

COUNT_WORK = '''"""Soak: count the runs of `work` in the data (a re-run must not count twice)."""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"works": get(context.instance.data, "works", 0) + 1}
'''

LOCK_KEY = '''"""Soak: the lock key the start wrote into the data."""


def handler(context):
    return context.instance.data["lockKey"]
'''

ONE_SECOND = '''"""Soak: the sleeping state's timer."""


def handler(context):
    return "PT1S"
'''


def _labels(text: str) -> list[dict[str, str]]:
    return [{"language": "en-US", "label": text}]


def _script(name: str, code: str) -> dict[str, str]:
    return {"location": f"./src/{name}.py", "code": code, "encoding": "NAT"}


def _transition(key: str, target: str, trigger: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "key": key,
        "target": target,
        "triggerType": trigger,
        "versionStrategy": "None",
        "labels": _labels(key),
        **extra,
    }


def _lock(action: str) -> dict[str, Any]:
    return {
        "keyExpression": {**_script("SoakLockKey", LOCK_KEY), "type": "L"},
        "action": action,
        "ttlSeconds": LOCK_TTL_SECONDS,
        "onConflict": "Abort",
    }


def _state(
    key: str, state_type: int, transitions: list[dict[str, Any]], sub_type: int = 0
) -> dict[str, Any]:
    return {
        "key": key,
        "stateType": state_type,
        "subType": sub_type,
        "versionStrategy": "None",
        "labels": _labels(key),
        "transitions": transitions,
    }


def workflow_document() -> dict[str, Any]:
    """The soak workflow."""
    count_work = {
        "order": 1,
        "task": {"key": TASK_KEY, "domain": DOMAIN, "version": VERSION, "flow": "sys-tasks"},
        "mapping": _script("SoakCountWork", COUNT_WORK),
    }
    states = [
        _state(
            "idle",
            1,
            [
                _transition("work", "working", onExecutionTasks=[count_work]),
                _transition("lock", "locked", resourceLock=_lock("Acquire")),
                _transition("sleep", "sleeping"),
                _transition("chain", "chain-a"),
                _transition("finish", "done"),
            ],
        ),
        _state("working", 2, [_transition("rest", "idle")]),
        _state(
            "locked",
            2,
            [
                _transition("unlock", "idle", resourceLock=_lock("Release")),
                _transition("finish-locked", "done"),
            ],
        ),
        _state(
            "sleeping",
            2,
            [
                _transition("wake", "idle", 2, timer=_script("SoakOneSecond", ONE_SECOND)),
                _transition("poke", "idle"),
            ],
        ),
        _state("chain-a", 2, [_transition("auto-a", "chain-b", 1, triggerKind=10)]),
        _state("chain-b", 2, [_transition("auto-b", "idle", 1, triggerKind=10)]),
        _state("done", 3, [], sub_type=1),
    ]
    return {
        "key": WORKFLOW,
        "flow": "sys-flows",
        "flowVersion": "1.0.0",
        "domain": DOMAIN,
        "version": VERSION,
        "tags": ["bench", "soak"],
        "attributes": {
            "type": "F",
            "labels": _labels("Soak"),
            "startTransition": _transition("start", "idle"),
            "states": states,
        },
    }


TASK_DOCUMENT: dict[str, Any] = {
    "key": TASK_KEY,
    "version": VERSION,
    "domain": DOMAIN,
    "flow": "sys-tasks",
    "flowVersion": "1.0.0",
    "tags": ["bench", "soak"],
    "attributes": {"type": "7", "config": {}},
}


def documents() -> list[dict[str, Any]]:
    """Everything to publish, in publishing order (the task before the workflow using it)."""
    return [copy.deepcopy(TASK_DOCUMENT), workflow_document()]
