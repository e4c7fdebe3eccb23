"""onExecute mapping of `approve-by-event` (a script task), re-authored from the upstream .csx:
the approval count, with the decision and approver the event's body brought into the data."""


def input_handler(task, context):
    data = context.instance.data
    return {"approvals": 1, "decision": data.get("decision"), "approvedBy": data.get("approvedBy")}
