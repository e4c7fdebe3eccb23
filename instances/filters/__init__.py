"""The listing language of instances, as the vNext runtime documents it
(`doc/en/flow/instance-filtering.md`): the `filter` parameter (GraphQL-style JSON, the legacy
`field=operator:value`, and this runtime's text form), `groupBy` with aggregations, `sort` /
`orderBy`, and `page` / `pageSize`. Bad input raises `VNextError` with the `invalid_filter`,
`unsupported_operator` or `invalid_column` code; `language` parses into the `tree`, `sql` builds
the queries.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from django.db.models.expressions import OrderBy

from instances.filters.language import parse_query, parse_sort_keys
from instances.filters.paging import DEFAULT_PAGE_SIZE, MAX_PAGE, MAX_PAGE_SIZE, parse_page
from instances.filters.sql import Sealed, check_sealed, filter_q, grouped, sort_terms
from instances.filters.tree import (
    ATTRIBUTES_PREFIX,
    MAX_FILTER_LENGTH,
    MAX_OPERAND_LENGTH,
    OPERATORS,
    GroupSpec,
    Query,
    SortKey,
    data_paths,
    invalid,
)

__all__ = [
    "ATTRIBUTES_PREFIX",
    "DEFAULT_PAGE_SIZE",
    "MAX_FILTER_LENGTH",
    "MAX_OPERAND_LENGTH",
    "MAX_PAGE",
    "MAX_PAGE_SIZE",
    "OPERATORS",
    "GroupSpec",
    "Query",
    "Sealed",
    "SortKey",
    "check_sealed",
    "data_paths",
    "filter_q",
    "grouped",
    "parse_filter",
    "parse_page",
    "parse_query",
    "parse_sort",
    "parse_sort_keys",
    "sort_keys_of",
    "sort_terms",
]


def parse_filter(raw: str | dict[str, Any] | None, *, sealed: Sealed = frozenset()) -> Q:
    """One filter (any form; a decoded JSON object too) as a `Q`; empty or missing means
    every instance. A `groupBy` is refused: only the instance list answers groups. A data
    field at or below a `sealed` path is refused (`invalid_column`)."""
    query = parse_query(raw)
    if query.group is not None:
        raise invalid("groupBy is answered by the instance list only.")
    check_sealed(query.targets(), sealed)
    return filter_q(query.filter)


def sort_keys_of(sort: str | None, order_by: str | None) -> list[SortKey]:
    """The keys of the `sort` or `orderBy` parameter (the same thing; not both)."""
    if sort is not None and order_by is not None:
        raise invalid("Give sort or orderBy, not both.")
    return parse_sort_keys(sort if sort is not None else order_by)


def parse_sort(raw: str | None, *, sealed: Sealed = frozenset()) -> list[str | OrderBy]:
    """The `sort` parameter as `order_by()` terms (see `sort_terms`)."""
    keys = parse_sort_keys(raw)
    check_sealed((key.target for key in keys), sealed)
    return sort_terms(keys)
