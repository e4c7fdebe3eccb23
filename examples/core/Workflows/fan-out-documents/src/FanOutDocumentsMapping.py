"""Fan-out mapping of `fan-out-documents-task` (onEntry order 2), re-authored from the upstream
.csx.

Per item, points the cloned HTTP task at the mock API: `API_BASEURL` becomes the configured
`Example:ApiBaseUrl` (`VNEXT_SCRIPT_CONFIGURATION`; default `http://localhost:3001`), and the
document's key goes in the query. Ids starting `DOC-SLOW` go to the slow endpoint (~1.5 s). It
writes nothing itself and has no output handler: the runtime's default packaging is the output.
"""

DEFAULT_BASE_URL = "http://localhost:3001"


def item_input_handler(task, context, item):
    base = (context.configuration.get("Example:ApiBaseUrl") or DEFAULT_BASE_URL).rstrip("/")
    if item.item_key.startswith("DOC-SLOW"):
        url = f"{base}/api/fan-out/slow-documents/process"
    else:
        url = task.url.replace("API_BASEURL", base)
    task.url = f"{url}?documentId={item.item_key}"
    task.body = {**(task.body or {}), "document": item.value}
    return ScriptResponse()
