"""The `page` and `pageSize` parameters of a listing."""

from __future__ import annotations

import re

from instances.filters.tree import invalid

MAX_PAGE = 1000
MAX_PAGE_SIZE = 100
DEFAULT_PAGE_SIZE = 10


def parse_page(page: str | None, page_size: str | None) -> tuple[int, int]:
    """`(page, page_size)` from the `page` (1..1000, default 1) and `pageSize` (1..100, default
    10) parameters; a missing parameter takes its default (an empty one is refused)."""
    return (
        _bounded_int("page", page, default=1, maximum=MAX_PAGE),
        _bounded_int("pageSize", page_size, default=DEFAULT_PAGE_SIZE, maximum=MAX_PAGE_SIZE),
    )


def _bounded_int(name: str, raw: str | None, *, default: int, maximum: int) -> int:
    if raw is None:
        return default
    text = raw.strip()
    if not re.fullmatch(r"[0-9]{1,9}", text) or not 1 <= int(text) <= maximum:
        shown = raw if len(raw) <= 40 else f"{raw[:40]}..."
        raise invalid(f"{name} must be an integer from 1 to {maximum}, got {shown!r}.")
    return int(text)
