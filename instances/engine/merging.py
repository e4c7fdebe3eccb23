"""How a data patch merges into instance data, with nothing but the standard library: the
engine's merge, and the script worker's for chained calls (it imports no more than it needs)."""

from __future__ import annotations

import copy
from typing import Any


def deep_merge(target: Any, patch: Any) -> Any:
    """Objects merge key by key, recursively; anything else in `patch` replaces the target.

    The same semantics as the database's `vnext_jsonb_merge`.
    """
    if not isinstance(target, dict) or not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = dict(target)
    for key, value in patch.items():
        merged[key] = deep_merge(target.get(key), value) if key in target else copy.deepcopy(value)
    return merged
