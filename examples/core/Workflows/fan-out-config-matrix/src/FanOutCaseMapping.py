"""Fan-out mapping of every fan-out-config-matrix case, re-authored from the upstream .csx.

As fan-out-documents' mapping, but slow ids go to `.../documents/process-slow`. The mock decides
each item's fate from its id: `DOC-FAIL*` answers 500 at once, `DOC-SLOW*` 200 after 1.5 s,
any other 200 at once.
"""

DEFAULT_BASE_URL = "http://localhost:3001"


def item_input_handler(task, context, item):
    base = (context.configuration.get("Example:ApiBaseUrl") or DEFAULT_BASE_URL).rstrip("/")
    url = task.url.replace("API_BASEURL", base)
    if item.item_key.startswith("DOC-SLOW"):
        url = f"{base}/api/fan-out/documents/process-slow"
    task.url = f"{url}?documentId={item.item_key}"
    return ScriptResponse()
