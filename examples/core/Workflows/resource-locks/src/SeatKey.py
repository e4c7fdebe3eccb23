"""Lock key of the seat-reservation example: one seat of one event.

The lock is taken on the start transition (step 25 runs before the request body is merged into
the instance data at step 30), so the seat is read from the request body.
"""


def handler(context):
    seat = context.body if has(context.body, "eventId") else context.instance.data
    return f"seat:{seat['eventId']}:{seat['seatNo']}"
