"""Who may do what with a workflow: the operators' grants (`WorkflowGrant`) and the roles a
caller holds for the definition's own role rules.

A caller's roles are the names of the user's groups plus the roles its token carries (a JWT's
`roles` claim). Superusers hold every grant but no role: the definition's `queryRoles` and
transition `roles` are business rules (maker-checker) that an administrator account does not
bypass through the API.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.cache import cache
from django.db.models import Q
from django.db.models.signals import m2m_changed, post_delete, post_save

from instances.engine.roles import Caller
from vnext.conf import vnext_setting
from vnext.credential_cache import (
    credential_cache_key,
    credential_cache_seconds,
    credentials_changed,
)
from workflows.models import WorkflowGrant


class Right:
    """The five grants a group can hold on a workflow."""

    READ_DEFINITIONS = "read_definitions"
    READ_INSTANCES = "read_instances"
    START = "start_instances"
    DRIVE = "drive_instances"
    # Migrations and batch operations: what one request does to many instances, or to a
    # running instance's definition.
    OPERATE = "operate_instances"

    ALL = (READ_DEFINITIONS, READ_INSTANCES, START, DRIVE, OPERATE)


_ACCESS_ATTRIBUTE = "_vnext_access"


@dataclass(frozen=True)
class _Access:
    grants: tuple[dict[str, Any], ...]
    groups: frozenset[str]


def _access(user: Any) -> _Access:
    """The user's grants and group names: kept on the request's user object, and in Django's
    cache (two queries saved on every request) for as long as `vnext/credential_cache.py`
    allows. A change of grants, groups or memberships moves the cache generation on: every
    entry is stale at once (in other processes too when the cache is shared; else within
    `TOKEN_CACHE_LOCAL_SECONDS`)."""
    found = getattr(user, _ACCESS_ATTRIBUTE, None)
    if found is not None:
        return found
    seconds = credential_cache_seconds()
    # Keyed before the queries run (see vnext/credential_cache.py on concurrent revocations).
    key = credential_cache_key("access", str(user.pk))
    found = cache.get(key) if seconds > 0 else None
    if found is None:
        grants = WorkflowGrant.objects.filter(group__user=user).values(
            "domain", "workflow", *Right.ALL
        )
        groups = user.groups.values_list("name", flat=True)
        found = _Access(tuple(grants), frozenset(groups))
        if seconds > 0:
            cache.set(key, found, timeout=seconds)
    setattr(user, _ACCESS_ATTRIBUTE, found)
    return found


def _grants(user: Any) -> tuple[dict[str, Any], ...]:
    return _access(user).grants


def access_changed(*args: Any, **kwargs: Any) -> None:
    """Receiver: grants, groups or memberships changed; every cached access is stale."""
    credentials_changed()


for _model in (WorkflowGrant, Group):
    post_save.connect(access_changed, sender=_model, dispatch_uid=f"vnext-access-{_model}")
    post_delete.connect(access_changed, sender=_model, dispatch_uid=f"vnext-access-del-{_model}")
m2m_changed.connect(
    access_changed, sender=get_user_model().groups.through, dispatch_uid="vnext-access-members"
)


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
    return Caller(user.get_username(), _access(user).groups | token_roles(auth))
