"""The base of every API view."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.views import APIView

from instances.engine.errors import Codes, Violation, VNextError

# Query parameters that may be given more than once (repeated `filter`s must all hold).
REPEATABLE = frozenset({"role", "extensions", "filter"})


class ApiView(APIView):
    """An API view whose query parameters are each given once: `?page=1&page=x` is 400, not
    whichever value a framework happens to pick."""

    def check_throttles(self, request: Request) -> None:
        """Stop at the first throttle that refuses: a request one refuses is not counted by
        the next (a caller over its own rate does not use up its workflow's)."""
        for throttle in self.get_throttles():
            if not throttle.allow_request(request, self):
                raise exceptions.Throttled(throttle.wait())

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        """Refuse repeated query parameters, then DRF's checks (authentication first)."""
        super().initial(request, *args, **kwargs)
        repeated = sorted(
            name
            for name, values in request.query_params.lists()
            if len(values) > 1 and name not in REPEATABLE
        )
        if repeated:
            raise VNextError(
                Codes.APP_INVALID_QUERY,
                f"query parameter(s) given more than once: {', '.join(repeated)}",
                [Violation(f"/{name}", "given more than once") for name in repeated],
            )
