"""Start mapping of role-matrix-lab, re-authored from the upstream .csx: keeps `caseRef` from the
start data (default `case-unknown`) and seeds the guarded fixtures the master schema's field rules
act on (x-roles, x-masking)."""


def input_handler(task, context):
    return ScriptResponse()


def output_handler(context):
    data = context.instance.data or {}
    return {
        "caseRef": data.get("caseRef") or "case-unknown",
        "decisionNote": "note for deciders",
        "auditTrail": "created;seeded",
        "maskedForAll": "4111111111111111",
        "maskedExceptAuditor": "TR330006100519786457841326",
        "replacedNote": "internal remark",
        "hashedCustomerNo": "C-0042",
        "customer": {
            "name": "Ada Lovelace",
            "tckn": "12345678901",
            "segment": "private",
            "contact": {
                "email": "ada@example.com",
                "phone": "+905551112233",
                "address": {"city": "Istanbul", "line1": "Bagdat Cd. 1"},
            },
        },
        "accounts": [{"iban": "TR000001", "balance": 1200}, {"iban": "TR000002", "balance": 5}],
        "riskScore": 72,
        "ownerNote": "for the starter only",
        "tags": ["lab", "roles"],
        "vault": {"email": "vault@example.com", "pin": "1234", "label": "primary"},
    }
