"""Request bodies: the standard envelope `{key?, tags?, attributes?, stage?}` or a free payload,
and validation of the business payload against the transition's JSON Schema."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from jsonschema.validators import validator_for

from instances.engine.errors import Codes, Violation, VNextError

ENVELOPE_KEYS = frozenset({"key", "tags", "attributes", "stage"})
MAX_KEY_LENGTH = 100
MAX_STAGE_LENGTH = 120


@dataclass
class Payload:
    """A request body split into the business `attributes` and the envelope fields."""

    attributes: Any = None
    key: str | None = None
    tags: list[str] = field(default_factory=list)
    stage: str = ""
    envelope: bool = False


def split_payload(body: Any, mode: str | None = None) -> Payload:
    """Read a body as an envelope or a free payload.

    `mode` is the `x-vnext-payload-mode` header: `raw` takes the whole body as attributes,
    `standard` reads it as an envelope. Otherwise a body with a top-level `attributes` (any
    case), or whose keys are all envelope fields, is an envelope; anything else is free.
    """
    if mode is not None and mode not in ("raw", "standard"):
        raise VNextError(
            Codes.APP_INVALID_REQUEST,
            f"x-vnext-payload-mode is raw or standard, not {mode[:40]!r}",
            violations=[Violation("/x-vnext-payload-mode", "raw or standard")],
        )
    if body is None:
        body = {}
    if mode == "raw":
        return Payload(attributes=_data_object(body))
    if isinstance(body, dict):
        lowered = {str(k).lower(): k for k in body}
        is_envelope = (
            mode == "standard"
            or "attributes" in lowered
            or (bool(body) and set(lowered) <= ENVELOPE_KEYS)
        )
        if is_envelope:
            return _envelope(body, lowered)
    elif mode == "standard":
        raise VNextError(
            Codes.APP_INVALID_REQUEST,
            "a standard payload is a JSON object",
            violations=[Violation("", "expected an object")],
        )
    return Payload(attributes=_data_object(body))


def _data_object(body: Any) -> dict[str, Any]:
    # Instance data is a JSON object (transitions merge into it): a free payload must be one.
    if not isinstance(body, dict):
        raise VNextError(
            Codes.APP_INVALID_REQUEST,
            "the instance data is a JSON object",
            violations=[Violation("", f"expected an object, got {type(body).__name__}")],
        )
    return body


def _envelope(body: dict[str, Any], lowered: dict[str, Any]) -> Payload:
    violations = []
    key = body.get(lowered.get("key", "key"))
    tags = body.get(lowered.get("tags", "tags"), [])
    stage = body.get(lowered.get("stage", "stage"), "")
    attributes = body.get(lowered["attributes"]) if "attributes" in lowered else {}
    if key is not None and (not isinstance(key, str) or not key or len(key) > MAX_KEY_LENGTH):
        violations.append(Violation("/key", f"a non-empty string of at most {MAX_KEY_LENGTH}"))
    if tags is None:
        tags = []
    if not isinstance(tags, list) or not all(isinstance(tag, str) and tag for tag in tags):
        violations.append(Violation("/tags", "a list of non-empty strings"))
    if attributes is not None and not isinstance(attributes, dict):
        violations.append(Violation("/attributes", "an object (the instance data) or null"))
    if stage is None:
        stage = ""
    if not isinstance(stage, str) or len(stage) > MAX_STAGE_LENGTH:
        violations.append(Violation("/stage", f"a string of at most {MAX_STAGE_LENGTH}"))
    if violations:
        raise VNextError(
            Codes.APP_INVALID_REQUEST, "invalid request envelope", violations=violations
        )
    return Payload(
        attributes=attributes if attributes is not None else {},
        key=key,
        tags=list(tags),
        stage=stage,
        envelope=True,
    )


_validators: dict[str, Any] = {}
_validators_lock = threading.Lock()


def _validator(schema: dict[str, Any]) -> Any:
    digest = hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()
    with _validators_lock:
        cached = _validators.get(digest)
    if cached is None:
        cls = validator_for(schema, default=Draft202012Validator)
        cached = cls(schema)
        with _validators_lock:
            _validators[digest] = cached
    return cached


def validate_attributes(
    schema: dict[str, Any], attributes: Any, *, prefix: str = "/attributes"
) -> None:
    """Raise 400 `App:900002` listing every place `attributes` breaks `schema`."""
    unique = schema_violations(schema, attributes, prefix=prefix)
    if unique:
        raise VNextError(
            Codes.APP_INVALID_REQUEST,
            f"the request body does not match the transition's schema ({len(unique)} problem(s))",
            violations=unique,
        )


def schema_violations(schema: dict[str, Any], value: Any, *, prefix: str = "") -> list[Violation]:
    """Every place `value` breaks the JSON Schema `schema`, as JSON pointers under `prefix`
    (a missing required property at its own pointer), each once."""
    violations = []
    for error in _validator(schema).iter_errors(value):
        leaf = best_match([error])
        path = "".join(
            "/" + str(part).replace("~", "~0").replace("/", "~1") for part in leaf.absolute_path
        )
        message = leaf.message
        if leaf.validator == "required":
            missing = leaf.message.split("'")[1] if "'" in leaf.message else ""
            path, message = f"{path}/{missing}", "is required"
        elif leaf.validator == "additionalProperties":
            extras = [
                k for k in (leaf.instance or {}) if k not in (leaf.schema.get("properties") or {})
            ]
            for extra in extras:
                violations.append(Violation(f"{prefix}{path}/{extra}", "is not allowed"))
            continue
        violations.append(Violation(prefix + path, message))
    return list(dict.fromkeys(violations))
