"""Definitions API (API.md section 4): publish components and read them back."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from drf_spectacular.utils import OpenApiParameter, PolymorphicProxySerializer, extend_schema
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from instances.engine.errors import Codes, Violation, VNextError
from vnext.openapi import responses
from vnext.throttling import PublishPerCallerThrottle
from vnext.views import ApiView
from workflows.access import Right, granted_workflows
from workflows.api.serializers import (
    ComponentDocumentSerializer,
    ComponentListOutputSerializer,
    ComponentVersionOutputSerializer,
    PublishBatchOutputSerializer,
    PublishResultOutputSerializer,
)
from workflows.documents import ComponentKind, ComponentRef
from workflows.selectors import component_get, component_list
from workflows.services import PublishResult, RegistryResolver, component_publish


class CanPublishComponents(BasePermission):
    """Publishing needs the `workflows.add_component` permission (operators, CI users)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return bool(request.user and request.user.has_perm("workflows.add_component"))


KIND = OpenApiParameter(
    "kind", str, OpenApiParameter.PATH, enum=list(ComponentKind.values), description="kind"
)
DOMAIN = OpenApiParameter("domain", str, OpenApiParameter.PATH, description="e.g. core")


def _checked_kind(kind: str) -> str:
    if kind not in ComponentKind.values:
        raise VNextError(
            Codes.COMPONENT_NOT_FOUND,
            f"unknown component kind {kind!r}; one of: {', '.join(ComponentKind.values)}",
        )
    return kind


def _result(result: PublishResult) -> dict[str, Any]:
    ref = result.ref
    return {
        "kind": ref.kind,
        "domain": ref.domain,
        "key": ref.key,
        "version": ref.version,
        "status": result.status,
        "contentHash": result.component.content_hash,
    }


class DefinitionPublishView(ApiView):
    """Publish one component document, or a JSON array of them (all or nothing)."""

    permission_classes = [CanPublishComponents]
    throttle_classes = [PublishPerCallerThrottle]

    @extend_schema(
        operation_id="definition_publish",
        tags=["definitions"],
        request=PolymorphicProxySerializer(
            component_name="PublishRequest",
            serializers=[ComponentDocumentSerializer(), ComponentDocumentSerializer(many=True)],
            resource_type_field_name=None,
            many=False,
        ),
        responses=responses(
            {
                200: PolymorphicProxySerializer(
                    component_name="PublishAnswer",
                    serializers=[PublishResultOutputSerializer, PublishBatchOutputSerializer],
                    resource_type_field_name=None,
                )
            },
            409,
            body=True,
        ),
        summary="Publish a component definition (or a JSON array of them)",
        description=(
            "Validates the document (JSON Schema, semantic rules, scripts) and stores it. "
            "Publishing the same content again is a no-op (status `unchanged`); other content "
            "under a published key+version answers 409 `Instance:100002`. Invalid documents get "
            "400 `App:900006` with every violation as a JSON pointer."
        ),
    )
    def post(self, request: Request) -> Response:
        """Publish and answer with what was stored."""
        user = request.user.get_username()
        if not isinstance(request.data, list):
            return Response(_result(component_publish(document=request.data, published_by=user)))
        documents = request.data
        results: list[dict[str, Any]] = []
        violations: list[Violation] = []
        # All or nothing: a rejected document rolls back the ones before it.
        with transaction.atomic():
            batch: dict[ComponentRef, Any] = {}
            for document in documents:
                resolver = RegistryResolver(batch=batch)
                try:
                    result = component_publish(
                        document=document, published_by=user, resolver=resolver
                    )
                except VNextError as exc:
                    index = len(results) + len(violations)
                    violations.extend(
                        Violation(f"/{index}{v.pointer}", v.message)
                        for v in exc.violations or [Violation("", exc.detail)]
                    )
                    if exc.error == Codes.PUBLISH_CONFLICT:
                        raise
                    continue
                batch[result.ref] = document
                results.append(_result(result))
            if violations:
                transaction.set_rollback(True)
        if violations:
            raise VNextError(
                Codes.APP_INVALID_DEFINITION,
                "nothing was published: some documents are invalid",
                violations=violations,
            )
        return Response({"items": results})


class DefinitionDetailView(ApiView):
    """One component document."""

    # A workflow's definition needs a grant on that workflow; a task, schema, view... is the
    # domain's, so it needs a domain-wide grant.
    required_right = Right.READ_DEFINITIONS

    @staticmethod
    def right_workflow(kwargs: dict[str, Any]) -> str:
        """The workflow the grant must cover: the key of a workflow definition, else none."""
        return str(kwargs.get("key", "")) if kwargs.get("kind") == ComponentKind.WORKFLOW else ""

    @extend_schema(
        operation_id="definition_get",
        tags=["definitions"],
        parameters=[
            KIND,
            DOMAIN,
            OpenApiParameter("key", str, OpenApiParameter.PATH, description="component key"),
            OpenApiParameter("version", str, description="exact version; default newest"),
        ],
        responses=responses({200: ComponentDocumentSerializer}),
        summary="Read a component definition",
    )
    def get(self, request: Request, kind: str, domain: str, key: str) -> Response:
        """The stored document of `kind` `domain/key` at `?version=` (default: newest)."""
        component = component_get(
            kind=_checked_kind(kind),
            domain=domain,
            key=key,
            version=request.query_params.get("version") or None,
        )
        response = Response(component.document)
        response["ETag"] = f'"{component.content_hash}"'
        return response


class DefinitionListView(ApiView):
    """Every component of a kind in a domain, with its versions: workflows filtered to those
    the caller may read; other kinds need a domain-wide grant."""

    permission_classes = [IsAuthenticated]

    @extend_schema(
        operation_id="definition_list",
        tags=["definitions"],
        parameters=[KIND, DOMAIN],
        responses=responses({200: ComponentListOutputSerializer}),
        summary="List component definitions",
    )
    def get(self, request: Request, kind: str, domain: str) -> Response:
        """`{"items": [{"key", "latest", "versions": [...]}]}`, keys sorted, newest first."""
        _checked_kind(kind)
        components = component_list(kind=kind, domain=domain)
        user = request.user
        visible = granted_workflows(user, Right.READ_DEFINITIONS, domain)
        if kind == ComponentKind.WORKFLOW and visible is not None and visible.children:
            components = components.filter(visible)
        elif visible is not None:
            raise VNextError(
                Codes.AUTHORIZATION_DENIED,
                f"reading {kind} definitions of {domain!r} needs a grant"
                + ("" if kind == ComponentKind.WORKFLOW else " on the whole domain"),
            )
        grouped: dict[str, list[Any]] = {}
        for component in components:
            grouped.setdefault(component.key, []).append(component)
        items = [
            {
                "key": key,
                "latest": versions[0].version,
                "versions": ComponentVersionOutputSerializer(versions, many=True).data,
            }
            for key, versions in grouped.items()
        ]
        return Response({"kind": kind, "domain": domain, "items": items})
