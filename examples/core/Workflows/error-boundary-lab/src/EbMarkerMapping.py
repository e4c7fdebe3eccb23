"""Mapping of the marker tasks (order 2): proves whether the rest of a task list ran after a
failed first task. Re-authored from the upstream .csx."""

from datetime import UTC, datetime


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {"markerAfterFailure": True, "markerAt": datetime.now(UTC).isoformat()}
