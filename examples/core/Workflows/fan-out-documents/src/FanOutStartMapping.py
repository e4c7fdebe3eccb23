"""Start mapping of fan-out-documents, re-authored from the upstream .csx.

Counts the documents of the start data (0 when `documents` is not a list) and stamps the start,
with the instance-data version the batch will be compared against.
"""

from datetime import UTC, datetime


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    documents = context.instance.data.get("documents")
    return {
        "documentCount": len(documents) if isinstance(documents, list) else 0,
        "fanOutStarted": True,
        "versionBeforeFanOut": context.instance.data_version,
        "startedAtUtc": datetime.now(UTC).isoformat(),
    }
