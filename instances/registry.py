"""The component registry as the engine reads it (the `Components` port): published workflow
versions and the documents they reference, cached in-process (published versions are immutable).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

from instances.engine.definition import WorkflowDefinition
from workflows.documents import ComponentKind, ComponentRef
from workflows.models import Component

# How long a process trusts the newest version it looked up of a workflow (a publish in this
# process forgets it at once). A start checks its version is still the newest in its own INSERT
# (`Guard.newest`), so only reads that name no version may see an older one, for this long.
NEWEST_TTL_SECONDS = 1.0


class RegistryComponents:
    """`Components` over the registry. Published versions are immutable, so exact versions
    are cached in-process for good; which version is the newest is cached for
    `NEWEST_TTL_SECONDS`."""

    _SIZE = 1024

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._documents: OrderedDict[ComponentRef, dict[str, Any] | None] = OrderedDict()
        self._workflows: OrderedDict[ComponentRef, WorkflowDefinition] = OrderedDict()
        self._newest: dict[tuple[str, str], tuple[str, float]] = {}

    def clear(self) -> None:
        """Forget every cached document (tests reset the registry between cases)."""
        with self._lock:
            self._documents.clear()
            self._workflows.clear()
            self._newest.clear()

    def forget_newest(self, domain: str, key: str) -> None:
        """Ask the database again which version of a workflow is the newest (one was published,
        or a start found its cached version superseded)."""
        with self._lock:
            self._newest.pop((domain, key), None)

    def workflow(self, domain: str, key: str, version: str | None) -> WorkflowDefinition | None:
        """The workflow at `version` (newest when None), or None."""
        if version is None:
            newest = self._newest_version(domain, key)
            if newest is None:
                return None
            version = newest
        ref = ComponentRef(ComponentKind.WORKFLOW, domain, key, version)
        with self._lock:
            cached = self._workflows.get(ref)
        if cached is not None:
            return cached
        document = self._document(ref)
        if document is None:
            return None
        definition = WorkflowDefinition(document)
        with self._lock:
            self._workflows[ref] = definition
            if len(self._workflows) > self._SIZE:
                self._workflows.popitem(last=False)
        return definition

    def _newest_version(self, domain: str, key: str) -> str | None:
        now = time.monotonic()
        with self._lock:
            cached = self._newest.get((domain, key))
        if cached is not None and now - cached[1] < NEWEST_TTL_SECONDS:
            return cached[0]
        newest = (
            Component.objects.filter(kind=ComponentKind.WORKFLOW, domain=domain, key=key)
            .order_by("-version_major", "-version_minor", "-version_patch", "-version_is_release")
            .values_list("version", flat=True)
            .first()
        )
        if newest is not None:  # an unpublished workflow may be published any moment
            with self._lock:
                self._newest[(domain, key)] = (newest, now)
        return newest

    def component(self, kind: str, reference: dict[str, Any]) -> dict[str, Any] | None:
        """The document a `{key, domain, flow, version}` reference names, or None."""
        ref = ComponentRef.from_reference(reference)
        if ref is None or ref.kind != kind:
            return None
        return self._document(ref)

    def _document(self, ref: ComponentRef) -> dict[str, Any] | None:
        with self._lock:
            if ref in self._documents:
                return self._documents[ref]
        document = (
            Component.objects.filter(
                kind=ref.kind, domain=ref.domain, key=ref.key, version=ref.version
            )
            .values_list("document", flat=True)
            .first()
        )
        if document is not None:  # a missing component may be published later: not cached
            with self._lock:
                self._documents[ref] = document
                if len(self._documents) > self._SIZE:
                    self._documents.popitem(last=False)
        return document


# The process's registry: the engine's (instances/wiring.py), and the one the store finds each
# workflow's sealed fields in.
COMPONENTS = RegistryComponents()


def newest_forget_on_write(sender: type[Component], instance: Component, **kwargs: Any) -> None:
    """A Component row written or deleted (by the publish service or directly): this process
    asks again which version of that workflow is the newest (`post_save`/`post_delete`
    receiver, connected by `InstancesConfig.ready`)."""
    if instance.kind == ComponentKind.WORKFLOW:
        COMPONENTS.forget_newest(instance.domain, instance.key)
