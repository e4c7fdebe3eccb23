"""Publish checks of the task types that name a target of settings: a `DaprService` task's
`appId` (`VNEXT["SERVICES"]`), a `DaprHttpEndpoint` task's `endpointName`
(`VNEXT["HTTP_ENDPOINTS"]`), a `DaprBinding` task's `bindingName` (`VNEXT["BINDINGS"]`) and the
`operation` that binding's kind performs. A name settings do not have is refused here, at its
pointer, rather than failing the first instance that runs the task."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from instances.engine.errors import Violation
from instances.engine.targets import (
    BINDING_OPERATIONS,
    BINDINGS_SETTING,
    ENDPOINTS_SETTING,
    SERVICES_SETTING,
    NamedTargets,
)
from instances.status import TaskType
from vnext.conf import named_targets
from workflows.documents import json_pointer

# Task type -> (the config field naming the target, the setting, what it is called).
_NAMED: dict[str, tuple[str, str, str]] = {
    TaskType.DAPR_SERVICE: ("appId", SERVICES_SETTING, "service"),
    TaskType.DAPR_HTTP_ENDPOINT: ("endpointName", ENDPOINTS_SETTING, "HTTP endpoint"),
    TaskType.DAPR_BINDING: ("bindingName", BINDINGS_SETTING, "binding"),
}


def named_target_violations(document: dict[str, Any]) -> Iterator[Violation]:
    """A task naming a service, endpoint or binding settings do not configure (or configure
    with a problem), or an operation its binding does not perform."""
    attributes = document.get("attributes")
    if not isinstance(attributes, dict):
        return
    named = _NAMED.get(str(attributes.get("type")))
    config = attributes.get("config")
    if named is None or not isinstance(config, dict):
        return
    field, setting, what = named
    name = config.get(field)
    if not isinstance(name, str):
        return  # the JSON Schema says what is wrong with it
    targets = named_targets()
    configured: Mapping[str, Any] = {
        SERVICES_SETTING: targets.services,
        ENDPOINTS_SETTING: targets.endpoints,
        BINDINGS_SETTING: targets.bindings,
    }[setting]
    pointer = json_pointer("attributes", "config", field)
    if name not in configured:
        yield Violation(pointer, _unknown(targets, setting, name, what, configured))
        return
    if setting == BINDINGS_SETTING:
        kind = targets.bindings[name].kind
        operation = config.get("operation")
        operations = BINDING_OPERATIONS[kind]
        if isinstance(operation, str) and operation not in operations:
            yield Violation(
                json_pointer("attributes", "config", "operation"),
                f"binding {name!r} is of kind {kind!r}, whose operations are "
                f"{', '.join(sorted(operations))}, not {operation!r}",
            )


def _unknown(
    targets: NamedTargets, setting: str, name: str, what: str, configured: Mapping[str, Any]
) -> str:
    problem = targets.problem(setting, name)
    if problem is not None:
        return f"the {what} {name!r} cannot be used: {problem}"
    names = ", ".join(sorted(configured)) or "none"
    return (
        f"the {what} {name!r} is not configured: add it to VNEXT[{setting!r}] "
        f"(configured: {names}); a definition names its target, settings hold its address "
        "and credentials"
    )
