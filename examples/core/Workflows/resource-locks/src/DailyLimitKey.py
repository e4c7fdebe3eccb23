"""Lock key of the daily-limit example: one account, one business day.

The day comes from the instance data written at the start of the flow, never from the clock:
a key computed at 23:59 and again at 00:00 must be the same key.
"""


def handler(context):
    data = context.instance.data
    return f"daily-limit:{data['accountId']}:{data['transactionDate']}"
