"""Structural validation against the vendored vNext JSON Schemas, with this platform's extensions.

The vendored files stay as upstream ships them; `_extend` adds, in memory, what the Python runtime
accepts beyond them: task types 21 (Fan-Out) and 23 (Python), `.py` script locations,
`scripts.allowedModules`, `executionType`, `retentionDays`, and a start transition without
`triggerType` (manual, the only trigger it takes, as the vNext runtime publishes it).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator
from jsonschema.exceptions import ValidationError, best_match
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

from instances.engine.errors import Violation
from instances.status import ExecutionType, TaskType
from workflows.documents import ComponentKind, json_pointer

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas" / "vnext-schema" / "schemas"

SCHEMA_FILE_BY_KIND: dict[str, str] = {
    ComponentKind.WORKFLOW: "workflow-definition.schema.json",
    ComponentKind.TASK: "task-definition.schema.json",
    ComponentKind.SCHEMA: "schema-definition.schema.json",
    ComponentKind.VIEW: "view-definition.schema.json",
    ComponentKind.FUNCTION: "function-definition.schema.json",
    ComponentKind.EXTENSION: "extension-definition.schema.json",
    ComponentKind.MAPPING: "mapping-definition.schema.json",
}

_CSX_LOCATION = r"^\./.*\.csx$"
_SCRIPT_LOCATION = r"^\./.*\.(csx|py)$"
_MODULE_NAME = r"^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)*$"

FAN_OUT_CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Fan-Out Task configuration (seed 002)",
    "required": ["task"],
    "properties": {
        "mode": {"type": "string", "enum": ["inline", "durable"], "default": "inline"},
        "itemsPath": {"type": "string"},
        "itemAlias": {"type": "string"},
        "task": {
            "type": "object",
            "required": ["key", "domain", "flow", "version"],
            "properties": {
                "key": {"type": "string", "pattern": "^[a-z0-9-]+$"},
                "domain": {"type": "string", "pattern": "^[a-z0-9-]+$"},
                "flow": {"type": "string", "const": "sys-tasks"},
                "version": {"type": "string"},
            },
            "additionalProperties": False,
        },
        "execution": {
            "type": "object",
            "properties": {
                "maxDegreeOfParallelism": {"type": "integer", "minimum": 1, "default": 4},
                "itemTimeoutSeconds": {"type": "integer", "minimum": 1, "default": 30},
                "batchTimeoutSeconds": {"type": "integer", "minimum": 1, "default": 120},
            },
            "additionalProperties": False,
        },
        "join": {
            "type": "object",
            "properties": {
                "policy": {
                    "type": "string",
                    "enum": ["all", "allSettled", "quorum", "firstSuccess"],
                    "default": "allSettled",
                },
                "minSuccess": {"type": "integer"},
                "resultKey": {"type": "string", "minLength": 1, "default": "fanOutResults"},
                "ordered": {"type": "boolean", "default": True},
            },
            "additionalProperties": False,
        },
        "errorBoundary": {
            "type": "object",
            "description": "The error boundary applied to each item on its own (seed 002)",
            "properties": {
                "onError": {"type": "array", "items": {"$ref": "#/$defs/fanOutItemRule"}},
            },
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}

# An item rule: the workflow schema's `onError` item, with `action` and `backoffType` also by
# name, as seed 002's examples write them ("retry", "fixed").
FAN_OUT_ITEM_RULE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["action"],
    "properties": {
        "action": {
            "anyOf": [
                {"type": "integer", "enum": [0, 1, 2, 3, 4, 5]},
                {
                    "type": "string",
                    "pattern": "^(?i:abort|retry|rollback|ignore|notify|log)$",
                },
            ]
        },
        "errorCodes": {"type": "array", "items": {"type": "string"}},
        "errorTypes": {"type": "array", "items": {"type": "string"}},
        "priority": {"type": "integer"},
        "logOnly": {"type": "boolean"},
        "retryPolicy": {
            "type": "object",
            "properties": {
                "maxRetries": {"type": "integer", "minimum": 0},
                "initialDelay": {"type": "string"},
                "backoffType": {
                    "anyOf": [
                        {"type": "integer", "enum": [0, 1]},
                        {"type": "string", "pattern": "^(?i:fixed|exponential)$"},
                    ]
                },
                "backoffMultiplier": {"type": "number", "minimum": 1},
                "maxDelay": {"type": "string"},
                "useJitter": {"type": "boolean"},
            },
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}


# Task type 23 (Python Task, this runtime's own): its config is the script `main(input)` is
# defined in, written like every script object (instances/engine/task_types/python.py).
# `encoding` and `location` are pattern properties: `script_object_paths` follows every `then`
# of the task schema at once, so a `properties` entry shaped like a script object would make
# every task type's config a script site (scripts.py adds this one site itself).
PYTHON_TASK_CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Python Task configuration: the code that defines main(input)",
    "required": ["code"],
    "properties": {
        "code": {
            "description": "The script (B64 or NAT), or a sys-mappings reference when REF",
            "oneOf": [{"type": "string"}, {"type": "object"}],
        },
    },
    "patternProperties": {
        "^encoding$": {"type": "string", "enum": ["B64", "NAT", "REF"], "default": "B64"},
        "^location$": {"type": "string", "pattern": _SCRIPT_LOCATION},
    },
    "additionalProperties": False,
}


EXECUTION_TYPE: dict[str, Any] = {
    "type": "string",
    "enum": [str(execution_type) for execution_type in ExecutionType],
    "description": "S: runs synchronously, A: as a job, whatever the request's ?sync says",
}
# At most a century: a cutoff further back than that is no retention worth writing down.
MAX_RETENTION_DAYS = 36_500
RETENTION_DAYS: dict[str, Any] = {
    "type": "integer",
    "minimum": 1,
    "maximum": MAX_RETENTION_DAYS,
    "description": "Days after completion an instance is archived (instances/archive.py)",
}
_TRANSITION_DEFINITIONS = (
    "transition",
    "sharedTransition",
    "startTransition",
    "cancelTransition",
    "exitTransition",
    "updateDataTransition",
)


def _walk(node: Any) -> Any:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


_REFERENCE = {"$ref": "#/definitions/reference"}
_NESTED_REFERENCE = {
    "type": "object",
    "description": "A reference written nested in a `schema` object",
    "required": ["schema"],
    "properties": {"schema": {"$ref": "#/definitions/reference"}},
    "additionalProperties": False,
}


def _extend(kind: str, schema: dict[str, Any]) -> dict[str, Any]:
    schema = copy.deepcopy(schema)
    for node in _walk(schema):
        if node.get("pattern") == _CSX_LOCATION:
            node["pattern"] = _SCRIPT_LOCATION
        properties = node.get("properties")
        if isinstance(properties, dict) and {"helpers", "allowedAssemblies"} <= set(properties):
            properties["allowedModules"] = {
                "type": "array",
                "description": "Python modules the sandbox lets this flow's scripts import.",
                "items": {"type": "string", "pattern": _MODULE_NAME},
            }
    if kind == ComponentKind.WORKFLOW:
        # API.md 1: `executionType` "S"/"A" on the workflow and on a transition (of any kind)
        # overrides the request's `?sync`, the transition's first.
        schema["properties"]["attributes"]["properties"]["executionType"] = EXECUTION_TYPE
        # How long a completed instance stays before it is archived (README "Retention and
        # archive"); the newest version of the workflow decides for all its instances.
        schema["properties"]["attributes"]["properties"]["retentionDays"] = RETENTION_DAYS
        definitions = schema.get("definitions") or {}
        # A `schema` reference may also be written nested, `{"schema": {key, domain, ...}}`, as
        # the vNext runtime takes it (instances/engine/definition.py `schema_reference`).
        for node in list(_walk(schema)):
            properties = node.get("properties")
            field = properties.get("schema") if isinstance(properties, dict) else None
            alternatives = field.get("anyOf") if isinstance(field, dict) else None
            if isinstance(alternatives, list) and _REFERENCE in alternatives:
                alternatives.append(_NESTED_REFERENCE)
        # The vNext runtime publishes a start transition without `triggerType`, and authors'
        # files leave it out: it can only be manual (`const: 0`), so an absent one is manual
        # (the engine reads an absent triggerType as 0).
        start = definitions.get("startTransition") or {}
        start["required"] = [name for name in start.get("required", []) if name != "triggerType"]
        for name in _TRANSITION_DEFINITIONS:
            node = definitions.get(name) or {}
            for part in [node, *node.get("allOf", [])]:
                if isinstance(part.get("properties"), dict):
                    part["properties"]["executionType"] = EXECUTION_TYPE
    if kind == ComponentKind.TASK:
        attributes = schema["properties"]["attributes"]
        fan_out = TaskType.FAN_OUT
        attributes["properties"]["type"]["enum"].append(str(fan_out))
        attributes["properties"]["type"].setdefault("enumDescriptions", []).append(fan_out.label)
        schema.setdefault("$defs", {})["fanOutItemRule"] = FAN_OUT_ITEM_RULE_SCHEMA
        attributes["allOf"].append(
            {
                "if": {"properties": {"type": {"const": str(fan_out)}}},
                "then": {
                    "title": "Fan-Out Task",
                    "properties": {
                        "type": {"const": str(fan_out)},
                        "config": FAN_OUT_CONFIG_SCHEMA,
                    },
                    "required": ["type", "config"],
                    "additionalProperties": False,
                },
            }
        )
        python = TaskType.PYTHON
        attributes["properties"]["type"]["enum"].append(str(python))
        attributes["properties"]["type"]["enumDescriptions"].append(python.label)
        attributes["allOf"].append(
            {
                "if": {"properties": {"type": {"const": str(python)}}},
                "then": {
                    "title": "Python Task",
                    "properties": {
                        "type": {"const": str(python)},
                        "config": PYTHON_TASK_CONFIG_SCHEMA,
                    },
                    "required": ["type", "config"],
                    "additionalProperties": False,
                },
            }
        )
    return schema


@cache
def schema_for(kind: str) -> dict[str, Any]:
    """The (extended) JSON Schema that documents of `kind` must satisfy."""
    raw = json.loads((SCHEMA_DIR / SCHEMA_FILE_BY_KIND[kind]).read_text(encoding="utf-8"))
    return _extend(kind, raw)


@cache
def _validator(kind: str) -> Validator:
    schema = schema_for(kind)
    cls = validator_for(schema, default=Draft7Validator)
    cls.check_schema(schema)
    return cls(schema)


_REQUIRED = re.compile(r"^'(.+)' is a required property$")


def _violation(error: ValidationError) -> Violation:
    leaf = best_match([error])
    path = list(leaf.absolute_path)
    message = plain_message(leaf)
    if leaf.validator == "required":
        match = _REQUIRED.match(leaf.message)
        if match:
            path.append(match.group(1))
            message = "is required"
    if len(message) > 300:
        message = message[:297] + "..."
    return Violation(json_pointer(*path), message)


_JSON_TYPES = {
    "object": "an object",
    "array": "a list",
    "string": "a string",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int):
        return "a whole number"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def plain_message(error: ValidationError) -> str:
    """What a JSON Schema error means, in plain words (the schema's wording is for schema
    authors: "Too many items match the given schema", "... is not of type 'null'")."""
    kind, expected, value = error.validator, error.validator_value, error.instance
    if kind == "type":
        wanted = [expected] if isinstance(expected, str) else list(expected)
        names = " or ".join(_JSON_TYPES.get(str(name), str(name)) for name in wanted)
        return f"must be {names}, not {_json_type(value)}"
    if kind == "enum":
        return "must be one of " + ", ".join(_shown(item) for item in expected)
    if kind == "const":
        return f"must be {_shown(expected)}"
    if kind in ("oneOf", "anyOf"):
        if kind == "oneOf" and not error.context:
            return "matches more than one of the shapes allowed here; make it match exactly one"
        return "matches none of the shapes allowed here"
    if kind == "additionalProperties" and isinstance(value, dict):
        allowed = set((error.schema or {}).get("properties") or {})
        extra = sorted(name for name in value if name not in allowed)
        return "unknown field(s) " + ", ".join(repr(name) for name in extra)
    if kind in ("minimum", "exclusiveMinimum"):
        bound = "more than" if kind == "exclusiveMinimum" else "at least"
        return f"must be {bound} {expected}, not {_shown(value)}"
    if kind in ("maximum", "exclusiveMaximum"):
        bound = "less than" if kind == "exclusiveMaximum" else "at most"
        return f"must be {bound} {expected}, not {_shown(value)}"
    if kind == "minLength":
        return "must not be empty" if expected == 1 else f"needs at least {expected} characters"
    if kind == "maxLength":
        return f"must be at most {expected} characters long"
    if kind == "minItems":
        return "must not be empty" if expected == 1 else f"needs at least {expected} items"
    if kind == "maxItems":
        return f"must have at most {expected} items"
    if kind == "uniqueItems":
        return "must not list the same item twice"
    if kind == "pattern":
        return f"{_shown(value)} does not match the pattern {expected}"
    if kind == "format":
        return f"{_shown(value)} is not a valid {expected}"
    if kind == "not":
        return "is not allowed here"
    return str(error.message)


def _is_missing_script(error: ValidationError) -> bool:
    # An empty or absent `code` is reported once, as "script missing", by the script checks.
    leaf = best_match([error])
    if leaf.validator == "required":
        return leaf.message == "'code' is a required property"
    return leaf.instance == "" and bool(leaf.absolute_path) and leaf.absolute_path[-1] == "code"


def structural_violations(document: Any, kind: str) -> list[Violation]:
    """Every JSON Schema violation of `document`, each with a JSON pointer, deduplicated."""
    seen: dict[str, Violation] = {}
    for error in _validator(kind).iter_errors(document):
        if _is_missing_script(error):
            continue
        violation = _violation(error)
        seen.setdefault(f"{violation.pointer}\0{violation.message}", violation)
    return sorted(seen.values(), key=lambda violation: violation.pointer)


# --- where the schema puts script objects ----------------------------------------------------

_BRANCHES = ("allOf", "anyOf", "oneOf")


def _is_script_schema(node: dict[str, Any]) -> bool:
    # vNext's script object (`scriptCode`, an extension's or function's `mapping`, a
    # `scriptExpression`, a mapping component's attributes): `code` with `location`/`encoding`.
    properties = node.get("properties")
    return (
        isinstance(properties, dict)
        and "code" in properties
        and ("location" in properties or "encoding" in properties)
    )


class _SchemaPositions:
    """Follows a document through one kind's schema, every branch at once (an `if`'s `then`
    and `else` alike), to tell which of its objects the schema takes for a script object."""

    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root
        self._flat: dict[int, tuple[dict[str, Any], ...]] = {}

    def _resolve(self, ref: str) -> Any:
        node: Any = self.root
        for part in ref.removeprefix("#").strip("/").split("/"):
            if not part:
                continue
            part = part.replace("~1", "/").replace("~0", "~")
            node = node.get(part) if isinstance(node, dict) else None
        return node

    def flat(self, schema: Any) -> tuple[dict[str, Any], ...]:
        """`schema` with every `$ref` and branch it may apply through, as a flat tuple."""
        if not isinstance(schema, dict):
            return ()
        memo = self._flat.get(id(schema))
        if memo is not None:
            return memo
        found: dict[int, dict[str, Any]] = {}
        pending: list[Any] = [schema]
        while pending:
            node = pending.pop()
            if not isinstance(node, dict) or id(node) in found:
                continue
            found[id(node)] = node
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#"):
                pending.append(self._resolve(ref))
            for key in _BRANCHES:
                branches = node.get(key)
                pending.extend(branches if isinstance(branches, list) else [])
            pending.extend([node.get("then"), node.get("else")])
        self._flat[id(schema)] = flat = tuple(found.values())
        return flat

    def child(self, schemas: tuple[dict[str, Any], ...], name: Any) -> tuple[dict[str, Any], ...]:
        """The schemas that may apply to member `name` (a key, or a list index)."""
        found: list[dict[str, Any]] = []
        for node in schemas:
            if isinstance(name, int):
                items = node.get("items")
                if isinstance(items, list):
                    items = items[name] if name < len(items) else node.get("additionalItems")
                found.extend(self.flat(items))
                continue
            properties = node.get("properties")
            if isinstance(properties, dict) and name in properties:
                found.extend(self.flat(properties[name]))
                continue
            patterns = node.get("patternProperties")
            matched = [sub for pattern, sub in (patterns or {}).items() if re.search(pattern, name)]
            for sub in matched:
                found.extend(self.flat(sub))
            if not matched:
                found.extend(self.flat(node.get("additionalProperties")))
        return _unique(found)


def _unique(nodes: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    return tuple({id(node): node for node in nodes}.values())


@cache
def _positions(kind: str) -> _SchemaPositions:
    return _SchemaPositions(schema_for(kind))


def script_object_paths(
    document: Any, kind: str
) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Every script object of `document` with its path: each object at a place where the schema
    of `kind` puts one, whatever keys it has (one that lacks `code` is found too), and, where
    the schema leaves a place open, each object shaped like one (`code` with `location` or
    `encoding`)."""
    positions = _positions(kind)

    def walk(
        node: Any, path: tuple[Any, ...], schemas: tuple[dict[str, Any], ...]
    ) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
        if isinstance(node, dict):
            shaped = "code" in node and ("location" in node or "encoding" in node)
            if shaped or any(_is_script_schema(schema) for schema in schemas):
                yield path, node
                return
            for key, value in node.items():
                yield from walk(value, (*path, key), positions.child(schemas, key))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                yield from walk(value, (*path, index), positions.child(schemas, index))

    yield from walk(document, (), positions.flat(positions.root))
