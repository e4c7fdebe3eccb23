"""The API's permission check: every view names the grant it needs (`required_right`), and a
view that names none is refused. A new endpoint cannot forget access control: it either
declares a right or its own `permission_classes`."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from workflows.access import has_right


def required_right(view: Any, method: str) -> str | None:
    """The right `view` declares for `method` (a name, or a dict of method -> name)."""
    declared = getattr(view, "required_right", None)
    if isinstance(declared, dict):
        return declared.get(method) or declared.get("*")
    return declared


class HasWorkflowRight(BasePermission):
    """The caller holds the view's `required_right` on the URL's `domain` and `workflow` (a
    `WorkflowGrant` of one of its groups; superusers hold all). A view may narrow the workflow
    with `right_workflow(kwargs)` (a definition's key) or declare the right domain-wide."""

    message = "you have no grant for this on this workflow"

    def has_permission(self, request: Request, view: Any) -> bool:
        """Refuse anonymous callers (401) and callers without the grant (403)."""
        if not (request.user and request.user.is_authenticated):
            return False
        right = required_right(view, request.method or "GET")
        if right is None:
            return False
        kwargs = getattr(view, "kwargs", {}) or {}
        workflow_of = getattr(view, "right_workflow", None)
        workflow = workflow_of(kwargs) if workflow_of else kwargs.get("workflow", "")
        return has_right(request.user, right, str(kwargs.get("domain", "")), workflow or "")
