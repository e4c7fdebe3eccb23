"""Request body parsers: DRF's JSON parser, with JSON nested past Python's recursion limit
refused as a bad request (400) instead of failing the server (500)."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.parsers import JSONParser


class JsonParser(JSONParser):
    """`application/json` bodies; a body nested too deeply to parse is a 400 like any other
    unparsable body."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        """Parse the body, refusing runaway nesting."""
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise exceptions.ParseError(
                "JSON parse error - the body is nested too deeply"
            ) from None
