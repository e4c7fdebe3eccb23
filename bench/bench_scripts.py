"""Script sandbox overhead: a rule handler run through the sandbox vs the same plain Python."""

from __future__ import annotations

from bench.timing import per_call_seconds, report
from instances.engine.scripts import Sandbox, compile_script

RULE = """
def handler(context):
    data = context["data"]
    return data.get("mode") == "auto" and sum(item["amount"] for item in data["items"]) > 100
"""


def plain_handler(context):
    data = context["data"]
    return data.get("mode") == "auto" and sum(item["amount"] for item in data["items"]) > 100


def main() -> None:
    """Print per-call times: compile (cached), load+call, call on a loaded script."""
    context = {"data": {"mode": "auto", "items": [{"amount": n} for n in range(20)]}}
    sandbox = Sandbox(timeout_seconds=2.0)
    compiled = compile_script(RULE, "./src/BenchRule.py")
    loaded = sandbox.load(compiled)
    assert loaded.call("handler", context) is plain_handler(context)

    baseline = per_call_seconds(lambda: plain_handler(context))
    report(
        "rule call, loaded script",
        per_call_seconds(lambda: loaded.call("handler", context)),
        "plain Python",
        baseline,
    )
    report(
        "rule load + call (per transition)",
        per_call_seconds(lambda: sandbox.run(compiled, "handler", context)),
        "plain Python",
        baseline,
    )
    report(
        "compile (content-hash cache hit)",
        per_call_seconds(lambda: compile_script(RULE, "./src/BenchRule.py")),
        "plain Python",
        baseline,
    )
