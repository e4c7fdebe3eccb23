"""Request body parsers: DRF's JSON parser, with bodies nested deeper than the platform takes
refused as a bad request (400) instead of failing the server deeper down (copies, merges and
scripts recurse over instance data)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from rest_framework import exceptions
from rest_framework.parsers import FormParser, JSONParser

from instances.engine.errors import Codes, Violation, VNextError
from vnext.conf import vnext_setting
from workflows.documents import json_pointer


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


# `name`, then any number of `[segment]`: `attributes[customer][ownerUserId]`, `tags[]`.
_BRACKET_KEY = re.compile(r"^([^\[\]]+)((?:\[[^\[\]]*\])*)$")
_SEGMENT = re.compile(r"\[([^\[\]]*)\]")
# An array index: ASCII digits without a leading zero ("²" and "01" are object keys), of any
# length: `items[1000000000]` is an index far past its siblings (a gap, refused), not a key.
_INDEX = re.compile(r"0|[1-9][0-9]*")


class _FormTree:
    """One level of a bracket-path form while it is read: children by segment, in order."""

    __slots__ = ("children", "listed", "values")

    def __init__(self) -> None:
        self.children: dict[str, _FormTree] = {}
        self.values: list[str] = []
        self.listed = False  # named with a trailing `[]`: a list even of one value


def _form_error(path: tuple[str, ...], message: str) -> VNextError:
    return VNextError(
        Codes.APP_INVALID_REQUEST,
        "The form body is invalid.",
        violations=[Violation(json_pointer(*path), message)],
    )


def _form_value(node: _FormTree, path: tuple[str, ...]) -> Any:
    """The JSON value of a tree node: a string, a list (repeated or `[]` values, or indices
    0..n-1) or an object."""
    if node.values and node.children:
        raise _form_error(path, "a field is given both a value and nested fields")
    if not node.children:
        return node.values[0] if len(node.values) == 1 and not node.listed else list(node.values)
    keys = list(node.children)
    if all(_INDEX.fullmatch(key) for key in keys):
        # Compared as strings: a 5,000-digit index is no int to convert, just a gap.
        if set(keys) != {str(index) for index in range(len(keys))}:
            raise _form_error(path, "array indices must run 0, 1, 2, ... without gaps")
        return [
            _form_value(node.children[str(index)], (*path, str(index)))
            for index in range(len(keys))
        ]
    return {key: _form_value(child, (*path, key)) for key, child in node.children.items()}


def bracket_form_to_json(
    fields: Iterable[tuple[str, list[str]]], *, max_depth: int | None = None
) -> dict[str, Any]:
    """Nest `application/x-www-form-urlencoded` fields by their bracket paths:
    `attributes[customer][id]=7&tags[]=a&tags[]=b&items[0][n]=x` gives
    `{"attributes": {"customer": {"id": "7"}}, "tags": ["a", "b"], "items": [{"n": "x"}]}`.

    Values stay strings (a form carries no types; send JSON for numbers and booleans); a name
    repeated without `[]` gives a list too. A malformed name, a field that is both a value and an
    object, array indices with gaps, or a path of more than `max_depth` segments is a 400 at the
    field's pointer."""
    root = _FormTree()
    for name, values in fields:
        match = _BRACKET_KEY.match(name)
        if match is None:
            raise _form_error((name,), "a field name must be `name` or `name[a][b]...`")
        segments = [match.group(1), *_SEGMENT.findall(match.group(2))]
        if "" in segments[:-1]:
            raise _form_error(tuple(segments), "`[]` may only end a field name")
        node = root
        path = segments[:-1] if segments[-1] == "" else segments
        if max_depth is not None and len(path) > max_depth:
            # Refused while reading: nesting the tree recurses once per segment.
            raise _form_error(
                tuple(path[: max_depth + 1]), f"a field name nests deeper than {max_depth} levels"
            )
        for segment in path:
            node = node.children.setdefault(segment, _FormTree())
        node.values.extend(values)
        node.listed = node.listed or segments[-1] == ""
    body = _form_value(root, ())
    return body if isinstance(body, dict) else {}


class BracketFormParser(FormParser):
    """`application/x-www-form-urlencoded` bodies with bracket paths (API.md section 1), read as
    the same JSON object a client would have sent; nesting limits as for JSON."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        """Parse the form, then nest its fields."""
        form = super().parse(stream, media_type, parser_context)
        limit = int(vnext_setting("MAX_BODY_DEPTH"))
        data = bracket_form_to_json(form.lists(), max_depth=limit)
        if nesting_depth(data) > limit:
            raise exceptions.ParseError(f"form parse error - the body nests deeper than {limit}")
        return data
