"""Subflows: a sync transition sent to the root of a SubFlow chain of depth 0..5 (forwarded down
to the leaf), through the instance service as the API calls it. The figure is the latency each
level adds, against depth 0 (the same transition on a plain instance) measured in the same run,
rounds interleaved so machine noise falls on every depth alike."""

from __future__ import annotations

import time
from typing import Any

from bench.bench_transitions import INFO, prepare_database
from bench.summary import record
from bench.timing import percentile
from instances.job_handlers import relays_run
from instances.services import instance_start, instance_transition
from workflows.services import component_publish

DOMAIN = "core"
DEPTHS = (0, 1, 2, 3, 4, 5)
INSTANCES = 3
ROUNDS = 8
PER_ROUND = 50
LABELS = [{"label": "x", "language": "en"}]
NEXT = {"ping": "to-pong", "pong": "to-ping"}


def _state(key: str, state_type: int, transitions: list[dict[str, Any]], **extra: Any) -> dict:
    return {
        "key": key,
        "stateType": state_type,
        "versionStrategy": "Minor",
        "labels": LABELS,
        "transitions": transitions,
        **extra,
    }


def _transition(key: str, target: str, trigger: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "key": key,
        "target": target,
        "triggerType": trigger,
        "versionStrategy": "Minor",
        "labels": LABELS,
        **extra,
    }


def _workflow(key: str, flow_type: str, states: list[dict[str, Any]]) -> dict[str, Any]:
    initial = states[0]["key"]
    return {
        "key": key,
        "flow": "sys-flows",
        "domain": DOMAIN,
        "version": "1.0.0",
        "flowVersion": "1.0.0",
        "tags": ["bench"],
        "attributes": {
            "type": flow_type,
            "labels": LABELS,
            "startTransition": _transition("start", initial),
            "states": states,
        },
    }


def _chain(depth: int) -> list[dict[str, Any]]:
    """Workflows of a chain `depth` levels deep, leaf first: the leaf is ping <-> pong; every
    level above waits in a SubFlow state for the level below."""
    leaf = _workflow(
        f"chain{depth}-l{depth}",
        "S" if depth else "F",
        [
            _state("ping", 1, [_transition("to-pong", "pong")]),
            _state("pong", 2, [_transition("to-ping", "ping")]),
        ],
    )
    documents = [leaf]
    for level in range(depth - 1, -1, -1):
        process = {
            "key": f"chain{depth}-l{level + 1}",
            "domain": DOMAIN,
            "version": "1.0.0",
            "flow": "sys-flows",
        }
        # No input handler: the child starts empty (no script call on the measured path).
        code = "def output_handler(context):\n    return {}\n"
        mapping = {"location": "./src/Merge.py", "code": code, "encoding": "NAT"}
        documents.append(
            _workflow(
                f"chain{depth}-l{level}",
                "S" if level else "F",
                [
                    _state("begin", 1, [_transition("go", "wait", 1, triggerKind=10)]),
                    _state(
                        "wait", 4, [], subFlow={"type": "S", "process": process, "mapping": mapping}
                    ),
                ],
            )
        )
    return documents


def main() -> None:
    """Measure the sync transition on roots of depth 0..5; record the per-level cost."""
    prepare_database()
    for depth in DEPTHS:
        for document in _chain(depth):
            component_publish(document=document)
    roots: dict[int, list[str]] = {}
    leaves_state: dict[str, str] = {}
    for depth in DEPTHS:
        roots[depth] = []
        for _ in range(INSTANCES):
            outcome = instance_start(domain=DOMAIN, workflow=f"chain{depth}-l0", body={}, info=INFO)
            # As the API does: run the child starts now, so the chain is built to its leaf.
            relays_run(outcome.instance.id)
            roots[depth].append(str(outcome.instance.id))
            leaves_state[str(outcome.instance.id)] = "ping"
    samples: dict[int, list[float]] = {depth: [] for depth in DEPTHS}
    for _ in range(ROUNDS):
        for depth in DEPTHS:
            for n in range(PER_ROUND):
                root = roots[depth][n % INSTANCES]
                key = NEXT[leaves_state[root]]
                started = time.perf_counter()
                instance_transition(
                    domain=DOMAIN,
                    workflow=f"chain{depth}-l0",
                    ref=root,
                    transition_key=key,
                    body={},
                    info=INFO,
                )
                samples[depth].append((time.perf_counter() - started) * 1000)
                leaves_state[root] = "pong" if key == "to-pong" else "ping"
    print(
        f"sync transition on the root of a SubFlow chain, forwarded to its leaf ({ROUNDS} rounds)"
    )
    print(f"{'depth':>5} {'N':>6} {'p50 ms':>8} {'p99 ms':>8} {'+ms/level (p50)':>16}")
    base = percentile(samples[0], 0.5)
    per_level: list[float] = []
    for depth in DEPTHS:
        p50 = percentile(samples[depth], 0.5)
        added = (p50 - base) / depth if depth else 0.0
        if depth:
            per_level.append(added)
        print(
            f"{depth:>5} {len(samples[depth]):>6} {p50:8.2f} "
            f"{percentile(samples[depth], 0.99):8.2f} {added:16.3f}"
        )
    worst = max(per_level)
    deepest = percentile(samples[DEPTHS[-1]], 0.5)
    print(f"  worst added latency per level: {worst:.3f} ms p50 (target <= 2 ms)")
    record(
        f"subflow depth {DEPTHS[-1]} sync transition p50",
        deepest,
        "ms",
        baseline="same transition, no subflow, p50",
        baseline_value=base,
        target=f"<= +{2 * DEPTHS[-1]} ms",
        met=deepest - base <= 2 * DEPTHS[-1],
    )
    record(
        "subflow added latency per level, p50",
        worst,
        "ms",
        target="<= 2 ms",
        met=worst <= 2.0,
    )
