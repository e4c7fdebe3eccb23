"""Mapping of the shared `$self` transition `mirror-self` (a Get-instance-data task on this same
instance), re-authored from the upstream .csx: copies STORED values, whoever fired it, into
unguarded fields (`<absent>` when missing). The read is the platform's, not the caller's: no
field rule of the master schema applies to it."""

ABSENT = "<absent>"


def stored_at(data, *path):
    node = data
    for name in path:
        if not isinstance(node, dict) or name not in node:
            return ABSENT
        node = node[name]
    return node


def input_handler(task, context):
    task.instance_id = context.instance.id
    return None


def output_handler(context):
    stored = (context.body or {}).get("data") or {}
    return {
        "mirroredMasked": stored_at(stored, "maskedExceptAuditor"),
        "mirroredAuditTrail": stored_at(stored, "auditTrail"),
        "mirroredPhone": stored_at(stored, "customer", "contact", "phone"),
        "mirroredVaultEmail": stored_at(stored, "vault", "email"),
        "scriptSawVaultEmail": stored_at(context.instance.data or {}, "vault", "email"),
    }
