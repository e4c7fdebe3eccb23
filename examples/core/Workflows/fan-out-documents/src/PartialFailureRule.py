"""Rule of `auto-partial-failure`, re-authored from the upstream .csx: some document failed
(the batch summary's `failed`, else a flat `documentsFailedCount`)."""


def handler(context):
    data = context.instance.data
    summary = data.get("documentResultsSummary")
    if isinstance(summary, dict):
        return (summary.get("failed") or 0) > 0
    return (data.get("documentsFailedCount") or 0) > 0
