"""Component documents: their kind, identity and version, read from the JSON itself."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.db import models


class ComponentKind(models.TextChoices):
    """The kinds of component the registry stores, named after their `flow` (`sys-tasks` ...)."""

    WORKFLOW = "workflow", "Workflow (sys-flows)"
    TASK = "task", "Task (sys-tasks)"
    SCHEMA = "schema", "Schema (sys-schemas)"
    VIEW = "view", "View (sys-views)"
    FUNCTION = "function", "Function (sys-functions)"
    EXTENSION = "extension", "Extension (sys-extensions)"
    MAPPING = "mapping", "Mapping (sys-mappings)"


KIND_BY_FLOW: dict[str, ComponentKind] = {
    "sys-flows": ComponentKind.WORKFLOW,
    "sys-tasks": ComponentKind.TASK,
    "sys-schemas": ComponentKind.SCHEMA,
    "sys-views": ComponentKind.VIEW,
    "sys-functions": ComponentKind.FUNCTION,
    "sys-extensions": ComponentKind.EXTENSION,
    "sys-mappings": ComponentKind.MAPPING,
}

# Publishing order: what a component references is published before it.
PUBLISH_ORDER: tuple[ComponentKind, ...] = (
    ComponentKind.SCHEMA,
    ComponentKind.MAPPING,
    ComponentKind.TASK,
    ComponentKind.VIEW,
    ComponentKind.FUNCTION,
    ComponentKind.EXTENSION,
    ComponentKind.WORKFLOW,
)

SEMVER_PATTERN = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:-([a-zA-Z]+\.\d+))?$")


def detect_kind(document: Any) -> ComponentKind | None:
    """The kind of a component document, or None when the JSON is not a component."""
    if not isinstance(document, dict):
        return None
    flow = document.get("flow")
    if isinstance(flow, str) and flow in KIND_BY_FLOW:
        return KIND_BY_FLOW[flow]
    attributes = document.get("attributes")
    if isinstance(attributes, dict) and ("states" in attributes or "startTransition" in attributes):
        return ComponentKind.WORKFLOW
    return None


@dataclass(frozen=True, order=True)
class Version:
    """A semantic version with the parts the registry sorts by (a pre-release sorts first)."""

    major: int
    minor: int
    patch: int
    is_release: bool
    prerelease: str

    @classmethod
    def parse(cls, text: str) -> Version | None:
        """Parse `1.2.3` or `1.2.3-beta.1`; None when the text is not such a version."""
        match = SEMVER_PATTERN.match(text) if isinstance(text, str) else None
        if match is None:
            return None
        major, minor, patch, prerelease = match.groups()
        return cls(int(major), int(minor), int(patch), prerelease is None, prerelease or "")

    def __str__(self) -> str:
        core = f"{self.major}.{self.minor}.{self.patch}"
        return f"{core}-{self.prerelease}" if self.prerelease else core


@dataclass(frozen=True)
class ComponentRef:
    """Identity of one published component: kind, domain, key and version."""

    kind: str
    domain: str
    key: str
    version: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.domain}/{self.key}@{self.version}"

    @classmethod
    def of(cls, document: dict[str, Any], kind: str | None = None) -> ComponentRef:
        """The identity of a component document (fields missing in a bad document read as '')."""
        return cls(
            kind=str(kind or detect_kind(document) or ""),
            domain=str(document.get("domain", "")),
            key=str(document.get("key", "")),
            version=str(document.get("version", "")),
        )

    @classmethod
    def from_reference(cls, reference: Any) -> ComponentRef | None:
        """A definition's explicit reference `{key, domain, flow, version}` as a ref, or None."""
        if not isinstance(reference, dict):
            return None
        kind = KIND_BY_FLOW.get(str(reference.get("flow", "")))
        fields = [reference.get(name) for name in ("key", "domain", "version")]
        if kind is None or not all(isinstance(value, str) and value for value in fields):
            return None
        key, domain, version = (str(value) for value in fields)
        return cls(kind=str(kind), domain=domain, key=key, version=version)


def json_pointer(*parts: Any) -> str:
    """An RFC 6901 pointer from path parts: `json_pointer("attributes", "states", 0)`."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)
