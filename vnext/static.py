"""`/static/` for the ASGI application: Django's finder-backed handler, with a path that climbs out
of the static folders (`/static/%2e%2e/vnext/settings.py`) answered 400 instead of escaping it as
a 500."""

from __future__ import annotations

from django.contrib.staticfiles.handlers import StaticFilesHandler
from django.core.exceptions import SuspiciousOperation
from django.core.handlers.exception import response_for_exception
from django.http import HttpRequest, HttpResponseBase


class ConfinedStaticFilesHandler(StaticFilesHandler):
    """Serves `/static/` from the finders; a suspicious path is Django's 400 (logged on
    `django.security`), as any other view's would be."""

    def get_response(self, request: HttpRequest) -> HttpResponseBase:
        """The file, a 404, or a 400 for a path the finders refuse as outside their folders."""
        try:
            return super().get_response(request)
        except SuspiciousOperation as exc:
            # Django's handler only converts Http404 here: this one would reach the server.
            return response_for_exception(request, exc)
