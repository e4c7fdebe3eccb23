"""OpenAPI parameters and answers shared by the instances views (their own ones stay with them)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse

NOT_MODIFIED = OpenApiResponse(description="Nothing changed since the eTag sent")
WORKFLOW_PATH = [
    OpenApiParameter("domain", str, OpenApiParameter.PATH, description="e.g. core"),
    OpenApiParameter(
        "workflow", str, OpenApiParameter.PATH, description="e.g. instance-management-test-workflow"
    ),
]
INSTANCE_PATH = [
    *WORKFLOW_PATH,
    OpenApiParameter(
        "instance", str, OpenApiParameter.PATH, description="the instance's UUID or business key"
    ),
]
EXTENSIONS = OpenApiParameter(
    "extensions",
    {
        "type": "array",
        "maxItems": 20,
        "items": {"type": "string", "pattern": r"^[a-z0-9-]+(,[a-z0-9-]+)*$", "maxLength": 2000},
    },
    explode=True,
    description="extensions to run on request (types 2 and 4), comma separated and/or "
    "repeated: `?extensions=a,b&extensions=c`. A name that is no extension of the workflow "
    "for this read gets an error object under its key in `extensions`",
)
