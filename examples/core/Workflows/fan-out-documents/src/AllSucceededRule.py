"""Rule of `auto-all-succeeded`, re-authored from the upstream .csx: a batch summary exists and
no document failed."""


def handler(context):
    summary = context.instance.data.get("documentResultsSummary")
    return isinstance(summary, dict) and summary.get("failed") == 0
