"""Request body parsers: DRF's JSON parser, with bodies nested deeper than the platform takes
refused as a bad request (400) instead of failing the server deeper down (copies, merges and
scripts recurse over instance data)."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.parsers import JSONParser

from vnext.conf import vnext_setting


def nesting_depth(value: Any) -> int:
    """How deep objects and arrays nest in `value` (a scalar is 0), without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = (
            node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        )
        if children is None:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


class JsonParser(JSONParser):
    """`application/json` bodies; one nested deeper than `VNEXT["MAX_BODY_DEPTH"]` (or too deep
    to parse at all) is a 400 like any other unparsable body."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        """Parse the body, refusing runaway nesting."""
        limit = int(vnext_setting("MAX_BODY_DEPTH"))
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            data = None
        else:
            if data is None:
                # Every body the API reads is an object (or a list of documents to publish).
                raise exceptions.ParseError("JSON parse error - the body is null")
            if nesting_depth(data) <= limit:
                return data
        raise exceptions.ParseError(f"JSON parse error - the body nests deeper than {limit} levels")
