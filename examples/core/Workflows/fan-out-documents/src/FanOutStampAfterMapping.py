"""onEntry mapping (order 3) of `documents-processing`, re-authored from the upstream .csx:
the instance-data version just after the fan-out batch."""

from datetime import UTC, datetime


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {
        "versionAfterFanOut": context.instance.data_version,
        "batchSettledAtUtc": datetime.now(UTC).isoformat(),
    }
