"""Functions a workflow or a domain declares (`sys-functions`, API.md section 3): an instance's
custom functions, the domain functions, and their catalogs. Each parses, calls one service of
`instances.functions` and renders; errors are `VNextError`s rendered by the project's exception
handler."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from instances.api.function_views import MAX_VERSION_LENGTH
from instances.api.openapi import INSTANCE_PATH, WORKFLOW_PATH
from instances.api.request_data import (
    PAYLOAD_PARSERS,
    check_readable,
    request_caller,
    request_headers,
    request_query,
)
from instances.api.serializers import FunctionCatalogSerializer
from instances.engine.errors import Codes, Violation, VNextError
from instances.functions import (
    FunctionAnswer,
    FunctionVerbRefused,
    domain_function_catalog,
    domain_function_run,
    instance_function_catalog,
    instance_function_run,
)
from instances.services import instance_snapshot, workflow_definition
from vnext.openapi import PROBLEM_MEDIA_TYPE, problem, responses, with_form
from vnext.views import ApiView
from workflows.access import Right

FUNCTION_PATH = OpenApiParameter(
    "function",
    {"type": "string", "maxLength": 100},
    OpenApiParameter.PATH,
    description="the custom function's key (lower-case letters, digits, '-')",
)
FUNCTION_ANSWER = OpenApiResponse(
    OpenApiTypes.ANY,
    description="`{<functionKey in camelCase>: <output>}`: the output of the function's "
    "task (its mapping's output handler's object, else the task's response data) or of its "
    "output script. With `rawResponse: true` the output itself, with the status (and headers) "
    "its output script or task gave",
)
# A function's request body: a JSON object (its inputSchema, if any, says more), or a form with
# bracket paths spelling one.
FUNCTION_BODY = with_form(OpenApiTypes.OBJECT)
# GET reads; a verb that may change something through the function's tasks needs the drive grant.
FUNCTION_RIGHTS = {
    "GET": Right.READ_INSTANCES,
    "HEAD": Right.READ_INSTANCES,
    "OPTIONS": Right.READ_INSTANCES,
    "*": Right.DRIVE,
}
VERB_TEXT = {
    "get": "",
    "post": " with a body (POST)",
    "patch": " with a body (PATCH)",
    "delete": " (DELETE)",
}


def _function_responses(body: bool = False) -> dict[Any, Any]:
    answers = responses({200: FUNCTION_ANSWER}, body=body)
    answers[(405, PROBLEM_MEDIA_TYPE)] = problem(
        405,
        "`Function:VerbNotAllowed`: the function does not answer this verb (`Allow` lists "
        "the ones it does)",
    )
    answers[(502, PROBLEM_MEDIA_TYPE)] = problem(
        502,
        "`Function:ExecutionFailed`: a task or script of the function failed; "
        "`Function:OutputInvalid`: its output breaks its outputSchema",
    )
    answers[(503, PROBLEM_MEDIA_TYPE)] = problem(
        503, "`Function:CacheFailed`: its cache failed and bypassOnCacheError is false"
    )
    return answers


def _function_response(answer: FunctionAnswer) -> Response:
    response = Response(answer.body, status=answer.status)
    for name, value in answer.headers.items():
        response[name] = value
    return response


def _function_body(request: Request) -> Any:
    """The body a POST, PATCH or DELETE sent (JSON or a bracket-path form), None without one."""
    data = request.data
    return None if request.stream is None else data


def _functions_called(view: ApiView, run: Callable[[], FunctionAnswer]) -> Response:
    """Run a function call; a verb the function does not answer is 405 with its `Allow`."""
    try:
        return _function_response(run())
    except FunctionVerbRefused as refused:
        # DRF writes the view's headers over the response's: the function's verbs, not the
        # route's.
        view.headers["Allow"] = ", ".join(refused.allowed)
        raise


def _custom_function_schema(verb: str) -> Callable[[Any], Any]:
    return extend_schema(
        operation_id="instance_function_custom" + ("" if verb == "get" else f"_{verb}"),
        tags=["functions"],
        parameters=[*INSTANCE_PATH, FUNCTION_PATH],
        request=FUNCTION_BODY if verb in ("post", "patch") else None,
        responses=_function_responses(body=verb != "get"),
        summary=f"Custom function: run a function the workflow declares{VERB_TEXT[verb]}",
        description="Runs the function's task(s) with this instance as the scripts' context "
        "(`context.headers`: the request's headers without credentials; `context.query`: its "
        "query parameters, all passed on; `context.body`: the body of a POST, PATCH or DELETE, "
        "a JSON object or a bracket-path form). The built-in state, data, view, schema and "
        "authorize functions have their own routes and always win. GET needs the "
        "read-instances grant, the other verbs the drive grant. 403 when the state's query "
        "roles or the function's `roles` refuse the caller; 404 `Function:NotFound` when the "
        "workflow declares no such function; 405 `Function:VerbNotAllowed` when the function's "
        "`verbs` do not include this one (`Allow` lists them); 400 `App:900002` when the body "
        "breaks the function's `inputSchema` (one pointer per problem); 502 "
        "`Function:ExecutionFailed` when a task or script fails, `Function:OutputInvalid` when "
        "the output breaks its `outputSchema`. A function with `cache` answers from it while "
        "the instance is unchanged, for its `ttlInSeconds`.",
    )


class InstanceCustomFunctionView(ApiView):
    """A custom function (`sys-functions`) the instance's workflow declares."""

    parser_classes = PAYLOAD_PARSERS
    required_right = FUNCTION_RIGHTS

    def _call(
        self, request: Request, domain: str, workflow: str, instance: str, function: str
    ) -> Response:
        snapshot = instance_snapshot(domain=domain, workflow=workflow, ref=instance)
        definition = workflow_definition(domain, snapshot.workflow_key, snapshot.workflow_version)
        roles = check_readable(request, definition, snapshot)
        return _functions_called(
            self,
            lambda: instance_function_run(
                definition=definition,
                instance=snapshot,
                name=function,
                roles=roles,
                headers=request_headers(request),
                query=request_query(request),
                verb=request.method or "GET",
                body=lambda: _function_body(request),
            ),
        )

    @_custom_function_schema("get")
    def get(
        self, request: Request, domain: str, workflow: str, instance: str, function: str
    ) -> Response:
        """Run the declared function `function` on the instance (see the OpenAPI text)."""
        return self._call(request, domain, workflow, instance, function)

    @_custom_function_schema("post")
    def post(
        self, request: Request, domain: str, workflow: str, instance: str, function: str
    ) -> Response:
        """The same with a body (POST)."""
        return self._call(request, domain, workflow, instance, function)

    @_custom_function_schema("patch")
    def patch(
        self, request: Request, domain: str, workflow: str, instance: str, function: str
    ) -> Response:
        """The same with a body (PATCH)."""
        return self._call(request, domain, workflow, instance, function)

    @_custom_function_schema("delete")
    def delete(
        self, request: Request, domain: str, workflow: str, instance: str, function: str
    ) -> Response:
        """The same (DELETE; a body, if sent, is read like a POST's)."""
        return self._call(request, domain, workflow, instance, function)


DOMAIN_FUNCTION_VERSION = OpenApiParameter(
    "version",
    {"type": "string", "maxLength": MAX_VERSION_LENGTH},
    description="the function's version (default: the newest)",
)


def _domain_function_schema(verb: str) -> Callable[[Any], Any]:
    return extend_schema(
        operation_id="domain_function" + ("" if verb == "get" else f"_{verb}"),
        tags=["functions"],
        parameters=[WORKFLOW_PATH[0], FUNCTION_PATH, DOMAIN_FUNCTION_VERSION],
        request=FUNCTION_BODY if verb in ("post", "patch") else None,
        responses=_function_responses(body=verb != "get"),
        summary=f"Domain function: run a domain-scoped function{VERB_TEXT[verb]}",
        description="Runs a function of scope `D` of the domain (its newest version unless "
        "`version` is given) without an instance: `context.instance` is empty, "
        "`context.headers` and `context.query` are the request's, `context.body` the body of a "
        "POST, PATCH or DELETE (a JSON object or a bracket-path form). Needs a domain-wide "
        "read-instances grant for GET, a domain-wide drive grant for the other verbs. 403 when "
        "the function's `roles` refuse the caller; 404 `Function:NotFound` for no such "
        "function or one of another scope; 405 `Function:VerbNotAllowed` when its `verbs` do "
        "not include this one (`Allow` lists them); 400 `App:900002` when the body breaks its "
        "`inputSchema`; 502 `Function:ExecutionFailed` when a task or script fails, "
        "`Function:OutputInvalid` when the output breaks its `outputSchema`.",
    )


class DomainFunctionView(ApiView):
    """A domain function (`sys-functions`, scope `D`), run without an instance."""

    parser_classes = PAYLOAD_PARSERS
    # A domain-wide grant: the URL names no workflow.
    required_right = FUNCTION_RIGHTS

    def _call(self, request: Request, domain: str, function: str) -> Response:
        version = request.query_params.get("version")
        if version is not None and len(version) > MAX_VERSION_LENGTH:
            raise VNextError(
                Codes.APP_INVALID_QUERY,
                f"version is at most {MAX_VERSION_LENGTH} characters",
                [Violation("/version", f"a version of at most {MAX_VERSION_LENGTH} characters")],
            )
        query = {k: v for k, v in request.query_params.items() if k != "version"}
        return _functions_called(
            self,
            lambda: domain_function_run(
                domain=domain,
                name=function,
                version=version,
                roles=request_caller(request).roles,
                headers=request_headers(request),
                query=query,
                verb=request.method or "GET",
                body=lambda: _function_body(request),
            ),
        )

    @_domain_function_schema("get")
    def get(self, request: Request, domain: str, function: str) -> Response:
        """Run the domain function (see the OpenAPI text)."""
        return self._call(request, domain, function)

    @_domain_function_schema("post")
    def post(self, request: Request, domain: str, function: str) -> Response:
        """The same with a body (POST)."""
        return self._call(request, domain, function)

    @_domain_function_schema("patch")
    def patch(self, request: Request, domain: str, function: str) -> Response:
        """The same with a body (PATCH)."""
        return self._call(request, domain, function)

    @_domain_function_schema("delete")
    def delete(self, request: Request, domain: str, function: str) -> Response:
        """The same (DELETE; a body, if sent, is read like a POST's)."""
        return self._call(request, domain, function)


CATALOG_TEXT = (
    " Each item: key, domain, version, scope, the verbs it answers, rawResponse, cacheable, "
    "labels, href (where to call it) and its contracts: inputSchema / outputSchema "
    "`{key, version, type, schema}` and inputView / outputView `{key, version, content, type, "
    "display, label, loadData}`, each the entry its rules choose for this caller (null: none "
    "declared or none holds). Functions whose `roles` refuse the caller are left out."
)


class InstanceFunctionCatalogView(ApiView):
    """The custom functions of an instance's workflow, with their contracts."""

    required_right = Right.READ_INSTANCES

    @extend_schema(
        operation_id="instance_function_catalog",
        tags=["functions"],
        parameters=INSTANCE_PATH,
        responses=responses({200: FunctionCatalogSerializer}),
        summary="Function catalog: the custom functions of this instance",
        description="The functions the instance's workflow declares (attributes.functions), in "
        "declaration order; the contracts' rules see the instance's data as `context.body`. "
        "403 when the state's query roles refuse the caller." + CATALOG_TEXT,
    )
    def get(self, request: Request, domain: str, workflow: str, instance: str) -> Response:
        """The catalog (see the OpenAPI text)."""
        snapshot = instance_snapshot(domain=domain, workflow=workflow, ref=instance)
        definition = workflow_definition(domain, snapshot.workflow_key, snapshot.workflow_version)
        roles = check_readable(request, definition, snapshot)
        items = instance_function_catalog(
            definition=definition,
            instance=snapshot,
            roles=roles,
            headers=request_headers(request),
            query=request_query(request),
        )
        return Response({"items": items})


class DomainFunctionCatalogView(ApiView):
    """The domain functions of a domain, with their contracts."""

    # A domain-wide grant: the URL names no workflow.
    required_right = Right.READ_INSTANCES

    @extend_schema(
        operation_id="domain_function_catalog",
        tags=["functions"],
        parameters=[WORKFLOW_PATH[0]],
        responses=responses({200: FunctionCatalogSerializer}),
        summary="Function catalog: the domain functions",
        description="The domain's functions of scope `D` (the newest version of each), by key; "
        "needs a domain-wide read-instances grant." + CATALOG_TEXT,
    )
    def get(self, request: Request, domain: str) -> Response:
        """The catalog (see the OpenAPI text)."""
        items = domain_function_catalog(
            domain=domain,
            roles=request_caller(request).roles,
            headers=request_headers(request),
            query=request_query(request),
        )
        return Response({"items": items})
