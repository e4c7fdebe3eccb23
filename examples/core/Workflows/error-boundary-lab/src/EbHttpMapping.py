"""Mapping of every error-boundary-lab HTTP task. Re-authored from the upstream .csx.

Before the call, the `API_BASEURL` placeholder of the task's URL becomes the configured
`Example:ApiBaseUrl` (`VNEXT_SCRIPT_CONFIGURATION`; default `http://localhost:3001`). After every
attempt, failed ones too, it counts the attempt and records the answer's status.
"""

from datetime import UTC, datetime

DEFAULT_BASE_URL = "http://localhost:3001"


def input_handler(task, context):
    base = context.configuration.get("Example:ApiBaseUrl") or DEFAULT_BASE_URL
    task.url = task.url.replace("API_BASEURL", base.rstrip("/"))
    return ScriptResponse()


def output_handler(context):
    attempts = context.instance.data.get("httpAttempts") or 0
    return {
        "httpAttempts": attempts + 1,
        "httpLastStatus": context.body.get("status_code"),
        "httpLastAt": datetime.now(UTC).isoformat(),
    }
