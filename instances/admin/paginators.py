"""Admin lists that never count a big table: Django's paginator runs `COUNT(*)` over the whole
filtered queryset on every page load, a sequential scan of a table of millions of rows."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.contrib import admin
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest

from instances.counts import estimated_rows

# Up to this many rows a list is counted exactly (through a LIMIT); above, estimated.
EXACT_COUNT_BOUND = 10_000


class BoundedCountPaginator(Paginator):
    """Counts through a `LIMIT` of `EXACT_COUNT_BOUND`, or, when the planner expects more, takes
    its estimate (`estimated` is then true)."""

    def __init__(self, queryset: QuerySet[Any], *args: Any, **kwargs: Any) -> None:
        super().__init__(queryset, *args, **kwargs)
        self.queryset = queryset
        self.estimated = False

    @cached_property
    def count(self) -> int:
        """The number of rows, exact or (`estimated`) the planner's."""
        estimate = estimated_rows(self.queryset)
        if estimate is not None and estimate > EXACT_COUNT_BOUND:
            self.estimated = True
            return estimate
        return self.queryset.order_by()[: EXACT_COUNT_BOUND + 1].count()


class BoundedCountAdmin(admin.ModelAdmin):
    """A model admin whose list pages are counted by `BoundedCountPaginator`."""

    show_full_result_count = False

    def get_paginator(
        self,
        request: HttpRequest,
        queryset: QuerySet[Any],
        per_page: int,
        orphans: int = 0,
        allow_empty_first_page: bool = True,
    ) -> BoundedCountPaginator:
        """A paginator that never counts the whole table."""
        return BoundedCountPaginator(queryset, per_page, orphans, allow_empty_first_page)
