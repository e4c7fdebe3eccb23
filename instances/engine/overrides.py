"""What a parent's SubFlow state overrides for the child it starts (seed 001 SubFlow state,
vnext-schema `subFlowOverrides`): the child's views (`subFlow.viewOverrides` and
`overrides.views`, by the original view key), the roles of its transitions
(`overrides.transitions.{key}.roles`) and the query roles of its states
(`overrides.states.{key}.queryRoles`). Every override replaces what the child's definition says
(replace mode); the child's definition itself is unchanged.

The overrides are pinned when the child starts: `child_start` copies them from the parent's
pinned definition into the child's `extra` (`OVERRIDES_KEY`), beside the timeout override, so a
later publish of the parent changes no running child. `source` names the parent's SubFlow state
in its version: every child it started carries the same overrides (listings group by it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

OVERRIDES_KEY = "subflowOverrides"


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class SubflowOverrides:
    """The overrides an instance runs under (none for an instance no SubFlow state started)."""

    source: str = ""
    views: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    transitions: Mapping[str, list[Any]] = field(default_factory=dict)
    states: Mapping[str, list[Any]] = field(default_factory=dict)

    @classmethod
    def of_subflow(cls, config: Mapping[str, Any], source: str) -> SubflowOverrides:
        """The overrides a SubFlow state's `subFlow` gives its child. The legacy `viewOverrides`
        and `overrides.views` merge; `overrides.views` wins on a key named in both."""
        overrides = _object(config.get("overrides"))
        views = {
            str(key): value
            for key, value in {
                **_object(config.get("viewOverrides")),
                **_object(overrides.get("views")),
            }.items()
            if isinstance(value, dict)
        }
        transitions = {
            str(key): value["roles"]
            for key, value in _object(overrides.get("transitions")).items()
            if isinstance(value, dict) and isinstance(value.get("roles"), list)
        }
        states = {
            str(key): value["queryRoles"]
            for key, value in _object(overrides.get("states")).items()
            if isinstance(value, dict) and isinstance(value.get("queryRoles"), list)
        }
        return cls(source, views, transitions, states)

    @classmethod
    def of_extra(cls, extra: Any) -> SubflowOverrides:
        """The overrides kept in an instance's `extra` (none when it has none)."""
        stored = _object(_object(extra).get(OVERRIDES_KEY))
        return cls(
            str(stored.get("source") or ""),
            _object(stored.get("views")),
            _object(stored.get("transitions")),
            _object(stored.get("states")),
        )

    def __bool__(self) -> bool:
        return bool(self.views or self.transitions or self.states)

    def as_extra(self) -> dict[str, Any]:
        """The JSON kept in the child's `extra` under `OVERRIDES_KEY` (only what is given)."""
        stored: dict[str, Any] = {"source": self.source}
        for name in ("views", "transitions", "states"):
            value = getattr(self, name)
            if value:
                stored[name] = dict(value)
        return stored

    def view(self, reference: Any) -> Any:
        """The view reference to serve for `reference`: its override by the original view's
        key, else `reference` itself."""
        if isinstance(reference, dict):
            replaced = self.views.get(str(reference.get("key", "")))
            if replaced is not None:
                return replaced
        return reference

    def transition_roles(self, key: str) -> list[Any] | None:
        """The roles replacing transition `key`'s, or None when it is not overridden."""
        roles = self.transitions.get(key)
        return roles if isinstance(roles, list) else None

    def query_roles(self, state: str) -> list[Any] | None:
        """The query roles replacing state `state`'s, or None when it is not overridden."""
        roles = self.states.get(state)
        return roles if isinstance(roles, list) else None


NO_OVERRIDES = SubflowOverrides()
