"""A workflow version's state diagram, rendered server-side to SVG by Graphviz (`dot`), for the
admin: states by type (initial, intermediate, final, subflow, wizard), transitions by trigger
(manual solid, automatic dashed, scheduled dotted, event bold), shared transitions from each state
they are available in, and cancel / exit / timeout from "any state".

The SVG of a version is rendered once and kept with its (immutable) definition. An instance's
view of it — the current state, the path taken — is a `<style>` block over the same SVG: every
state is the node `s<n>` and every transition the edge `t<n>`, so highlighting costs no render.
Without Graphviz installed (`apt-get install graphviz`) `render` answers None and the admin says so.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from instances.engine.definition import TransitionDef, TransitionKind, WorkflowDefinition
from instances.status import StateType, Trigger

logger = logging.getLogger(__name__)

_SHAPES: dict[int, tuple[str, str]] = {
    StateType.INITIAL: ('shape=box style="rounded,filled,bold"', "initial"),
    StateType.INTERMEDIATE: ('shape=box style="rounded,filled"', "intermediate"),
    StateType.FINAL: ('shape=box style="rounded,filled" peripheries=2', "final"),
    StateType.SUBFLOW: ('shape=box3d style="filled"', "subflow"),
    StateType.WIZARD: ('shape=note style="filled"', "wizard"),
}
_EDGE_STYLES: dict[int, str] = {
    Trigger.MANUAL: "solid",
    Trigger.AUTOMATIC: "dashed",
    Trigger.SCHEDULED: "dotted",
    Trigger.EVENT: "bold",
}
_FILLS = {
    "initial": "#e3f2fd",
    "intermediate": "#ffffff",
    "final": "#e8f5e9",
    "subflow": "#f3e5f5",
    "wizard": "#fff8e1",
}
ANY_STATE = "any"


@dataclass
class Diagram:
    """A version's diagram: its SVG and the ids it gave states and transitions."""

    svg: str
    # state key -> node id (`s0`, ...)
    states: dict[str, str] = field(default_factory=dict)
    # (from state or None for "any", transition key) -> edge ids
    transitions: dict[tuple[str | None, str], list[str]] = field(default_factory=dict)

    def highlight(
        self, scope: str, current: str | None, path: Iterable[tuple[str, str]] = ()
    ) -> str:
        """A `<style>` for the diagram inside the element `#scope`: the current state filled,
        the transitions of `path` (from state, transition key) drawn heavy, in order of use."""
        rules = []
        taken = set()
        for source, key in path:
            taken.update(self.transitions.get((source, key), []))
            taken.update(self.transitions.get((None, key), []))
        for edge in sorted(taken):
            rules.append(
                f"#{scope} g#{edge} path, #{scope} g#{edge} polygon "
                "{stroke:#1565c0;stroke-width:2.5px}"
            )
            rules.append(f"#{scope} g#{edge} text {{fill:#1565c0;font-weight:bold}}")
        node = self.states.get(current or "")
        if node:
            rules.append(
                f"#{scope} g#{node} path, #{scope} g#{node} polygon "
                "{fill:#ffd54f;stroke:#e65100;stroke-width:3px}"
            )
        return "<style>" + "".join(rules) + "</style>"


def graphviz_available() -> bool:
    """True when Graphviz's `dot` is installed."""
    return shutil.which("dot") is not None


def render(
    definition: WorkflowDefinition, state_link: Callable[[str], str] | None = None
) -> Diagram | None:
    """The definition's diagram (rendered once per version and kept with it); each state links
    to `state_link(state key)` when given. None without Graphviz."""
    memo_key = "admin-diagram"
    cached = definition.memo.get(memo_key)
    if cached is not None:
        return cached if isinstance(cached, Diagram) else None
    if not graphviz_available():
        return None
    source, diagram = dot_source(definition, state_link)
    try:
        import graphviz

        svg = graphviz.Source(source).pipe(format="svg", encoding="utf-8")
    except Exception:  # a renderer failure must not break the admin page
        logger.exception("the diagram of %s %s did not render", definition.key, definition.version)
        return None
    # Inline in HTML: no XML prologue or doctype, and a size that follows the page's width.
    svg = svg[svg.find("<svg") :]
    diagram.svg = re.sub(r'^<svg width="[^"]*" height="[^"]*"', "<svg", svg, count=1)
    definition.memo[memo_key] = diagram
    return diagram


def dot_source(
    definition: WorkflowDefinition, state_link: Callable[[str], str] | None = None
) -> tuple[str, Diagram]:
    """The DOT text of the diagram and the ids it gives states and transitions."""
    diagram = Diagram(svg="")
    lines = [
        "digraph workflow {",
        'graph [rankdir=LR bgcolor="transparent" fontname="Helvetica" nodesep=0.35 ranksep=0.6]',
        'node [fontname="Helvetica" fontsize=11 color="#455a64"]',
        'edge [fontname="Helvetica" fontsize=9 color="#607d8b" fontcolor="#37474f"]',
        'start [shape=circle width=0.18 label="" style=filled fillcolor="#263238" id="start"]',
    ]
    for index, state in enumerate(definition.states.values()):
        node = f"s{index}"
        diagram.states[state.key] = node
        shape, kind = _SHAPES.get(state.state_type, _SHAPES[StateType.INTERMEDIATE])
        link = f" URL={_quote(state_link(state.key))} target=_top" if state_link else ""
        lines.append(
            f"{node} [label={_quote(state.key)} {shape} fillcolor={_quote(_FILLS[kind])} "
            f'id="{node}" class="state state-{kind}" tooltip={_quote(_label(state.raw))}{link}]'
        )
    edges: list[tuple[str, str, TransitionDef, str | None]] = []
    initial = diagram.states.get(definition.start.target) if definition.start.raw else None
    if initial:
        edges.append(("start", initial, definition.start, None))
    for state in definition.states.values():
        for transition in state.transitions:
            edges.append(_edge(diagram, state.key, transition))
    specials = [*definition.specials()]
    if definition.timeout is not None:
        specials.append(definition.timeout)
    shared = [t for t in definition.shared if t.raw.get("availableIn")]
    anywhere = [t for t in definition.shared if not t.raw.get("availableIn")]
    for transition in shared:
        for state_key in definition.states:
            if transition.available_in(state_key):
                edges.append(_edge(diagram, state_key, transition))
    floating = [t for t in [*anywhere, *specials] if t.kind != TransitionKind.UPDATE_DATA]
    if floating:
        lines.append(
            f'{ANY_STATE} [label="any state" shape=plaintext fontcolor="#78909c" id="{ANY_STATE}"]'
        )
        for transition in floating:
            target = diagram.states.get(transition.target)
            if target:
                edges.append((ANY_STATE, target, transition, None))
    for index, (source, target, transition, from_state) in enumerate(edges):
        edge = f"t{index}"
        diagram.transitions.setdefault((from_state, transition.key), []).append(edge)
        style = _EDGE_STYLES.get(transition.trigger_type, "solid")
        lines.append(
            f"{source} -> {target} [label={_quote(transition.key)} style={style} "
            f'id="{edge}" class="transition" tooltip={_quote(_label(transition.raw))}]'
        )
    lines.append("}")
    return "\n".join(lines), diagram


def _edge(
    diagram: Diagram, state: str, transition: TransitionDef
) -> tuple[str, str, TransitionDef, str | None]:
    source = diagram.states[state]
    target = source if transition.target == "$self" else diagram.states.get(transition.target)
    return source, target or source, transition, state


def _label(raw: dict) -> str:
    labels = raw.get("labels") if isinstance(raw, dict) else None
    for entry in labels or []:
        if isinstance(entry, dict) and entry.get("label"):
            return str(entry["label"])
    return str(raw.get("key", "")) if isinstance(raw, dict) else ""


def _quote(text: str) -> str:
    # A DOT string: backslashes and quotes escaped, no raw newlines.
    escaped = str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")
    return f'"{escaped}"'
