"""onEntry mapping (order 1) of `documents-processing`, re-authored from the upstream .csx:
the instance-data version just before the fan-out batch."""

from datetime import UTC, datetime


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    return {
        "versionBeforeFanOutBatch": context.instance.data_version,
        "batchArmedAtUtc": datetime.now(UTC).isoformat(),
    }
