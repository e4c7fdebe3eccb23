"""Role grants of a definition (seed 001 "Query Roles", "State Alias", transition `roles`, master
schema `x-roles`), decided for one caller. Plain data in, a yes/no out: the adapters say who the
caller is, the engine says what the definition lets them do.

A grant list is `[{"role": name, "grant": "allow" | "deny"}, ...]`. Deny beats allow. A list with
allow entries admits only the roles it names; a list of denies only admits every caller holding
some role none of them names (a caller without any role cannot clear a role-bound deny). An
empty or absent list is no rule at all.

Two roles are decided per instance rather than held: `$InstanceStarter` (the caller started
the instance) and `$PreviousUser` (the caller made its latest transition).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

INSTANCE_STARTER = "$InstanceStarter"
PREVIOUS_USER = "$PreviousUser"
ALLOW, DENY = "allow", "deny"


@dataclass(frozen=True)
class Caller:
    """Who asks: the actor's name and the roles they hold (groups and token roles)."""

    actor: str
    roles: frozenset[str]

    def on(self, created_by: str, modified_by: str) -> frozenset[str]:
        """The caller's roles on an instance: theirs plus the instance-relative ones."""
        extra = set()
        if self.actor and self.actor == created_by:
            extra.add(INSTANCE_STARTER)
        if self.actor and self.actor == modified_by:
            extra.add(PREVIOUS_USER)
        return self.roles | extra if extra else self.roles


def grants_of(value: Any) -> list[tuple[str, str]]:
    """The `(role, grant)` pairs of a grant list; anything malformed is no grant."""
    if not isinstance(value, list):
        return []
    pairs = []
    for entry in value:
        if isinstance(entry, dict) and isinstance(entry.get("role"), str):
            grant = str(entry.get("grant", ALLOW)).lower()
            pairs.append((entry["role"], DENY if grant == DENY else ALLOW))
    return pairs


def decide(grants: Any, roles: Iterable[str]) -> bool | None:
    """True (allowed), False (refused) or None when `grants` holds no rule."""
    pairs = grants_of(grants)
    if not pairs:
        return None
    held = set(roles)
    if any(grant == DENY and role in held for role, grant in pairs):
        return False
    allows = {role for role, grant in pairs if grant == ALLOW}
    if allows:
        return bool(allows & held)
    return bool(held)


def allowed(grants: Any, roles: Iterable[str]) -> bool:
    """`decide`, with no rule meaning allowed."""
    return decide(grants, roles) is not False


def all_allowed(grant_lists: Iterable[Any], roles: Iterable[str]) -> bool:
    """Every list allows (a transition's roles AND its `availableIn` entry's roles)."""
    held = frozenset(roles)
    return all(allowed(grants, held) for grants in grant_lists)
