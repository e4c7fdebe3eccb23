"""Who may do what with a workflow: the operators' grants (`WorkflowGrant`) and the roles a
caller holds for the definition's own role rules.

A caller's roles are the names of the user's groups plus the roles its token carries (a JWT's
`roles` claim). Superusers hold every grant but no role: the definition's `queryRoles` and
transition `roles` are business rules (maker-checker) that an administrator account does not
bypass through the API.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from instances.engine.roles import Caller
from vnext.conf import vnext_setting
from workflows.models import WorkflowGrant


class Right:
    """The four grants a group can hold on a workflow."""

    READ_DEFINITIONS = "read_definitions"
    READ_INSTANCES = "read_instances"
    START = "start_instances"
    DRIVE = "drive_instances"

    ALL = (READ_DEFINITIONS, READ_INSTANCES, START, DRIVE)


_GRANTS_ATTRIBUTE = "_vnext_workflow_grants"
_ROLES_ATTRIBUTE = "_vnext_group_names"


def _grants(user: Any) -> list[dict[str, Any]]:
    # One query per request: the user's grants, kept on the user object the request holds.
    cached = getattr(user, _GRANTS_ATTRIBUTE, None)
    if cached is None:
        cached = list(
            WorkflowGrant.objects.filter(group__user=user).values("domain", "workflow", *Right.ALL)
        )
        setattr(user, _GRANTS_ATTRIBUTE, cached)
    return cached


def has_right(user: Any, right: str, domain: str, workflow: str = "") -> bool:
    """`user` holds `right` on `domain/workflow`; with `workflow` empty, a domain-wide grant is
    needed (definitions of tasks, schemas and views belong to the domain, not to a workflow)."""
    if user is None or not user.is_authenticated or not user.is_active:
        return False
    if user.is_superuser:
        return True
    return any(
        grant[right]
        and grant["domain"] == domain
        and (grant["workflow"] == "" or (workflow and grant["workflow"] == workflow))
        for grant in _grants(user)
    )


def granted_workflows(user: Any, right: str, domain: str) -> Q | None:
    """A filter on a `key` field keeping the workflows of `domain` `user` holds `right` on;
    None when every workflow of the domain is allowed; an empty `Q()` when none is."""
    if user.is_superuser:
        return None
    keys = set()
    for grant in _grants(user):
        if grant[right] and grant["domain"] == domain:
            if grant["workflow"] == "":
                return None
            keys.add(grant["workflow"])
    return Q(key__in=sorted(keys)) if keys else Q()


def token_roles(auth: Any) -> frozenset[str]:
    """Roles a token carries: a JWT's `roles` claim (`VNEXT["JWT_ROLES_CLAIM"]`; a list of
    names, or one name)."""
    payload = getattr(auth, "payload", None)
    if not isinstance(payload, dict):
        return frozenset()
    value = payload.get(vnext_setting("JWT_ROLES_CLAIM"))
    if isinstance(value, str):
        return frozenset({value})
    if isinstance(value, list | tuple):
        return frozenset(str(role) for role in value if isinstance(role, str))
    return frozenset()


def caller_of(user: Any, auth: Any = None) -> Caller:
    """The caller the definition's role rules see: the actor name and its roles."""
    if user is None or not user.is_authenticated:
        return Caller("", frozenset())
    names = getattr(user, _ROLES_ATTRIBUTE, None)
    if names is None:
        names = frozenset(user.groups.values_list("name", flat=True))
        setattr(user, _ROLES_ATTRIBUTE, names)
    return Caller(user.get_username(), names | token_roles(auth))
