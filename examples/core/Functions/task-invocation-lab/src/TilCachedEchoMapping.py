"""Mapping of the domain function `til-cached-echo` (its HTTP task `til-http-ok`), re-authored
from the upstream .csx. Before the call, the `API_BASEURL` placeholder of the task's URL becomes
the configured `Example:ApiBaseUrl` (`VNEXT_SCRIPT_CONFIGURATION`; default
`http://localhost:3001`); after it, the answer is when it was computed and by whom: on a hit of
the function's cache the same `computedAtUtc` comes back."""

from datetime import UTC, datetime

DEFAULT_BASE_URL = "http://localhost:3001"


def input_handler(task, context):
    base = context.configuration.get("Example:ApiBaseUrl") or DEFAULT_BASE_URL
    task.url = task.url.replace("API_BASEURL", base.rstrip("/"))
    return ScriptResponse()


def output_handler(context):
    return ScriptResponse(
        data={"computedAtUtc": datetime.now(UTC).isoformat(), "source": "til-cached-echo"}
    )
