"""The query language's vocabulary and syntax tree: its operators and limits, the instance
columns it names, the nodes a parsed filter is made of (conditions, and / or / not), `groupBy`
and sort keys, and the errors bad input raises (`invalid_filter`, `unsupported_operator`,
`invalid_column`). Parsing the parameters into this tree is `instances.filters.language`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from instances.engine.errors import Codes, VNextError
from instances.status import STATE_SUBTYPE_NAMES, STATE_TYPE_NAMES, InstanceStatus

# The operators of the documentation, in its order (`supportedOperators` of the error body).
OPERATORS = (
    "eq",
    "ne",
    "gt",
    "ge",
    "lt",
    "le",
    "between",
    "like",
    "startswith",
    "endswith",
    "in",
    "nin",
    "isnull",
)
# Other spellings clients send: `isNull` (any case is accepted) and `match`, an alias of `like`.
_OPERATOR_ALIASES = {"match": "like"}
_TEXT_OPERATORS = frozenset({"eq", "ne", "like", "startswith", "endswith", "in", "nin"})
_DATE_OPERATORS = frozenset({"eq", "ne", "gt", "ge", "lt", "le", "between"})
LIST_OPERATORS = frozenset({"in", "nin", "between"})
TEXT_MATCH_OPERATORS = frozenset({"like", "startswith", "endswith"})

MAX_FILTER_LENGTH = 5000  # characters of the whole filter (all `filter` values together)
MAX_OPERAND_LENGTH = 1000  # characters of one string operand (each element of a list too)
MAX_NESTING = 16  # levels of and / or / not and of nested attribute objects
MAX_PATH_SEGMENTS = 32
MAX_GROUPS = 1000

ATTRIBUTES = "attributes"
ATTRIBUTES_PREFIX = "attributes."


class ColumnKind(Enum):
    """What a column holds, which decides the operands it takes and how they convert."""

    TEXT = "text"
    STATUS = "status"  # a letter; operands by name (`Active`) or letter (`A`)
    STATE_TYPE = "state-type"  # a name; operands by vNext's code (`1`) or name
    STATE_SUBTYPE = "state-subtype"
    DATETIME = "datetime"
    BOOLEAN = "boolean"  # `isTransient`: no instance here is transient
    UUID = "uuid"


@dataclass(frozen=True)
class Column:
    """An instance column: its public name, model field, and the operators it takes."""

    name: str
    kind: ColumnKind
    field: str
    operators: frozenset[str]
    nullable: bool = False


def _column(name: str, kind: ColumnKind, model_field: str, operators: frozenset[str]) -> Column:
    nullable = model_field in ("key", "completed_at")
    # `isnull` on the columns that can be empty: this runtime's extension (vNext lists none).
    return Column(
        name, kind, model_field, operators | {"isnull"} if nullable else operators, nullable
    )


_STATE_CODE_OPERATORS = frozenset({"eq", "ne", "gt", "ge", "lt", "le", "in", "nin"})
COLUMNS: dict[str, Column] = {
    column.name: column
    for column in [
        _column("key", ColumnKind.TEXT, "key", _TEXT_OPERATORS),
        _column("flow", ColumnKind.TEXT, "workflow_key", _TEXT_OPERATORS),
        _column("status", ColumnKind.STATUS, "status", frozenset({"eq", "ne", "in", "nin"})),
        _column("currentState", ColumnKind.TEXT, "current_state", _TEXT_OPERATORS),
        _column("state", ColumnKind.TEXT, "current_state", _TEXT_OPERATORS),
        _column("effectiveState", ColumnKind.TEXT, "effective_state", _TEXT_OPERATORS),
        _column(
            "effectiveStateType",
            ColumnKind.STATE_TYPE,
            "effective_state_type",
            _STATE_CODE_OPERATORS,
        ),
        _column(
            "effectiveStateSubType",
            ColumnKind.STATE_SUBTYPE,
            "effective_state_subtype",
            _STATE_CODE_OPERATORS,
        ),
        _column("createdAt", ColumnKind.DATETIME, "created_at", _DATE_OPERATORS),
        _column("modifiedAt", ColumnKind.DATETIME, "updated_at", _DATE_OPERATORS),
        _column("completedAt", ColumnKind.DATETIME, "completed_at", _DATE_OPERATORS),
        _column("isTransient", ColumnKind.BOOLEAN, "", frozenset({"eq", "ne"})),
        # The instance id: this runtime's extension.
        _column("id", ColumnKind.UUID, "id", frozenset({"eq", "ne", "in", "nin"})),
    ]
}
# Names are matched in any case (`CreatedAt`, as GetInstances tasks write sort keys);
# `updatedAt` is what those tasks call `modifiedAt`.
_COLUMN_NAMES = {name.lower(): column for name, column in COLUMNS.items()} | {
    "updatedat": COLUMNS["modifiedAt"]
}
VALID_COLUMNS = list(COLUMNS)

STATUS_BY_NAME = {
    **{member.label.lower(): member.value for member in InstanceStatus},
    **{member.value.lower(): member.value for member in InstanceStatus},
}
TYPE_CODES = {
    ColumnKind.STATE_TYPE: {name: code for code, name in STATE_TYPE_NAMES.items()},
    ColumnKind.STATE_SUBTYPE: {name: code for code, name in STATE_SUBTYPE_NAMES.items()},
}


@dataclass(frozen=True)
class DataPath:
    """A path into the instance data (`attributes.customer.id` is `("customer", "id")`)."""

    path: tuple[str, ...]

    @property
    def name(self) -> str:
        """The public spelling, `attributes.a.b`."""
        return ATTRIBUTES_PREFIX + ".".join(self.path)


Target = Column | DataPath


@dataclass(frozen=True)
class Condition:
    """`target op operand`. Column operands are converted already (status letters, state-type
    names, aware datetimes, UUIDs); data operands are the JSON values as given."""

    target: Target
    op: str
    operand: Any


@dataclass(frozen=True)
class AllOf:
    parts: tuple[Node, ...]


@dataclass(frozen=True)
class AnyOf:
    parts: tuple[Node, ...]


@dataclass(frozen=True)
class Negation:
    part: Node


Node = Condition | AllOf | AnyOf | Negation

AGGREGATIONS = ("count", "sum", "avg", "min", "max")


@dataclass(frozen=True)
class GroupSpec:
    """`groupBy`: the fields grouped on (`several`: given as `fields`, so each group's name
    is the list of their values) and the aggregations asked for."""

    fields: tuple[Target, ...]
    several: bool
    count: bool
    aggregates: tuple[tuple[str, Target], ...] = ()


@dataclass(frozen=True)
class Query:
    """A parsed `filter` (None: every instance) with its `groupBy`, if any."""

    filter: Node | None = None
    group: GroupSpec | None = None

    def targets(self) -> Iterator[Target]:
        """Every column and data path the query names."""
        if self.filter is not None:
            yield from _targets(self.filter)
        if self.group is not None:
            yield from self.group.fields
            yield from (target for _, target in self.group.aggregates)


def _targets(node: Node) -> Iterator[Target]:
    if isinstance(node, Condition):
        yield node.target
    elif isinstance(node, Negation):
        yield from _targets(node.part)
    else:
        for part in node.parts:
            yield from _targets(part)


def data_paths(targets: Iterator[Target] | Sequence[Target]) -> set[tuple[str, ...]]:
    """The data paths among `targets`."""
    return {target.path for target in targets if isinstance(target, DataPath)}


# --- errors ----------------------------------------------------------------------------------


def invalid(message: str) -> VNextError:
    """400 `invalid_filter`."""
    return VNextError(Codes.FILTER_INVALID, message)


def unsupported(
    op: str, supported: Sequence[str] = OPERATORS, *, on: str | None = None
) -> VNextError:
    """400 `unsupported_operator` naming the operators that would do (`supportedOperators`)."""
    where = f" on {on!r}" if on else ""
    return VNextError(
        Codes.FILTER_UNSUPPORTED_OPERATOR,
        f"{op!r} operator is not supported{where}",
        extra={"supportedOperators": list(supported)},
    )


def invalid_column(name: str, why: str | None = None) -> VNextError:
    """400 `invalid_column` listing the instance columns (`validColumns`)."""
    message = why or (
        f"{name!r} is not a valid Instance column. Use 'attributes.fieldName' for JSON fields."
    )
    return VNextError(Codes.FILTER_INVALID_COLUMN, message, extra={"validColumns": VALID_COLUMNS})


# --- names -----------------------------------------------------------------------------------


def column_named(name: str) -> Column | None:
    """The instance column a name stands for, in any case; None when it names none."""
    return _COLUMN_NAMES.get(name.lower())


def data_path(text: str, *, shown: str | None = None) -> DataPath:
    """`customer.id` (dots separate keys) as a data path; every key non-empty."""
    segments = tuple(text.split("."))
    shown = shown or text
    if not text or any(not segment for segment in segments):
        raise invalid_column(shown, f"{shown!r}: a data path is keys separated by single dots.")
    if len(segments) > MAX_PATH_SEGMENTS:
        raise invalid(f"{shown!r} is deeper than {MAX_PATH_SEGMENTS} keys.")
    if any(ord(char) < 32 for char in text):
        raise invalid_column(shown, f"{shown!r}: a data key holds no control characters.")
    return DataPath(segments)


def target_named(name: str) -> Target:
    """A column, or `attributes.<path>` (filters, sort, groupBy and aggregations)."""
    column = column_named(name)
    if column is not None:
        return column
    if name.lower().startswith(ATTRIBUTES_PREFIX):
        return data_path(name[len(ATTRIBUTES_PREFIX) :], shown=name)
    raise invalid_column(name)


def operator_named(name: str) -> str | None:
    lowered = name.lower()
    lowered = _OPERATOR_ALIASES.get(lowered, lowered)
    return lowered if lowered in OPERATORS else None


@dataclass(frozen=True)
class SortKey:
    target: Target
    descending: bool


__all__ = [
    "AGGREGATIONS",
    "ATTRIBUTES_PREFIX",
    "COLUMNS",
    "MAX_FILTER_LENGTH",
    "MAX_GROUPS",
    "MAX_OPERAND_LENGTH",
    "OPERATORS",
    "AllOf",
    "AnyOf",
    "Column",
    "ColumnKind",
    "Condition",
    "DataPath",
    "GroupSpec",
    "Negation",
    "Node",
    "Query",
    "SortKey",
    "Target",
]
