"""Liveness: `GET /health` answers 200 when the database answers, 503 otherwise.

A real server answers it in its ASGI layer (vnext/serving.py) without a serving thread; this view
is the same answer through Django (the test client, a server run without that layer)."""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse


def database_health() -> tuple[int, dict[str, Any]]:
    """`(200, {"status": "ok", "database": "ok"})`, or 503 with the database error's class."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        return 503, {"status": "unavailable", "database": type(exc).__name__}
    return 200, {"status": "ok", "database": "ok"}


def health(request: HttpRequest) -> JsonResponse:
    """The health answer as a Django view."""
    status, body = database_health()
    return JsonResponse(body, status=status)
