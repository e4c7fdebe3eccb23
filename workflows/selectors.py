"""Reads of the component registry."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from instances.engine.errors import Codes, VNextError
from workflows.documents import ComponentRef
from workflows.models import Component

_NEWEST_FIRST = ("-version_major", "-version_minor", "-version_patch", "-version_is_release")


def component_get(*, kind: str, domain: str, key: str, version: str | None = None) -> Component:
    """One component version; the newest release when `version` is None. 404 when missing."""
    queryset = Component.objects.filter(kind=kind, domain=domain, key=key)
    if version:
        component = queryset.filter(version=version).first()
    else:
        component = queryset.order_by(*_NEWEST_FIRST, "-version_prerelease").first()
    if component is None:
        wanted = f"{kind} {domain}/{key}" + (f"@{version}" if version else "")
        raise VNextError(Codes.COMPONENT_NOT_FOUND, f"{wanted} is not published")
    return component


def component_list(*, kind: str, domain: str) -> QuerySet[Component]:
    """Every version of every component of `kind` in `domain`, key by key, newest first."""
    return Component.objects.filter(kind=kind, domain=domain).order_by(
        "key", *_NEWEST_FIRST, "-version_prerelease"
    )


def component_document(ref: ComponentRef) -> dict[str, Any] | None:
    """The document of exactly `ref`, or None."""
    return (
        Component.objects.filter(kind=ref.kind, domain=ref.domain, key=ref.key, version=ref.version)
        .values_list("document", flat=True)
        .first()
    )
