"""A workflow version's state diagram, rendered server-side to SVG, for the admin: states by type
(initial, intermediate, final, subflow, wizard), transitions by trigger (manual solid, automatic
dashed, scheduled dotted, event bold), shared transitions from each state they are available in,
and cancel / exit / timeout from "any state".

Drawn by Graphviz (`dot`) when it is installed, else by the built-in layered layout
(`workflows.diagram_layout`, plain Python); `VNEXT["DIAGRAM_RENDERER"]` can force either. Both
are given the same graph and draw the same markup. The SVG of a version is rendered once and kept
with its (immutable) definition. An instance's view of it — the current state, the path taken —
is a `<style>` block over the same SVG: every state is the node `s<n>` and every transition the
edge `t<n>`, so highlighting costs no render.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from instances.engine.definition import TransitionDef, TransitionKind, WorkflowDefinition
from instances.status import StateType, Trigger
from vnext.conf import vnext_setting
from workflows.diagram_layout import FILLS, Edge, Node, draw

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
ANY_STATE = "any"
RENDERERS = ("auto", "graphviz", "builtin")


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


def renderer() -> str | None:
    """What draws diagrams now: "graphviz" or "builtin" (`DIAGRAM_RENDERER`; "auto", or any
    other value, is Graphviz when `dot` is installed, else the built-in layout); None when
    Graphviz is asked for and not installed."""
    choice = vnext_setting("DIAGRAM_RENDERER")
    if choice == "builtin":
        return "builtin"
    if graphviz_available():
        return "graphviz"
    return None if choice == "graphviz" else "builtin"


def unavailable_reason() -> str:
    """Why `render` answered None, for the admin page."""
    if renderer() is None:
        return (
            "Graphviz is not installed (apt-get install graphviz) and "
            'VNEXT_DIAGRAM_RENDERER is "graphviz"'
        )
    return "the diagram could not be drawn (see the server log)"


def render(
    definition: WorkflowDefinition, state_link: Callable[[str], str] | None = None
) -> Diagram | None:
    """The definition's diagram (rendered once per version and renderer, and kept with it);
    each state links to `state_link(state key)` when given. None when the renderer asked for is
    missing or fails."""
    chosen = renderer()
    if chosen is None:
        return None
    memo_key = f"admin-diagram:{chosen}"
    cached = definition.memo.get(memo_key)
    if isinstance(cached, Diagram):
        return cached
    nodes, edges, diagram = graph(definition, state_link)
    svg = _graphviz_svg(definition, nodes, edges) if chosen == "graphviz" else None
    if svg is None and vnext_setting("DIAGRAM_RENDERER") != "graphviz":
        # Also when Graphviz failed on this definition: the built-in layout draws anything.
        try:
            svg = draw(nodes, edges)
        except Exception:  # a renderer failure must not break the admin page
            logger.exception(
                "the diagram of %s %s did not lay out", definition.key, definition.version
            )
    if svg is None:
        return None
    diagram.svg = svg
    definition.memo[memo_key] = diagram
    return diagram


def _graphviz_svg(
    definition: WorkflowDefinition, nodes: list[Node], edges: list[Edge]
) -> str | None:
    try:
        import graphviz

        svg = graphviz.Source(dot_text(nodes, edges)).pipe(format="svg", encoding="utf-8")
    except Exception:  # a renderer failure must not break the admin page
        logger.exception("the diagram of %s %s did not render", definition.key, definition.version)
        return None
    # Inline in HTML: no XML prologue or doctype, and a size that follows the page's width.
    svg = svg[svg.find("<svg") :]
    return re.sub(r'^<svg width="[^"]*" height="[^"]*"', "<svg", svg, count=1)


def graph(
    definition: WorkflowDefinition, state_link: Callable[[str], str] | None = None
) -> tuple[list[Node], list[Edge], Diagram]:
    """The nodes and edges of the diagram, and the ids it gives states and transitions (its SVG
    still empty): what either renderer draws."""
    diagram = Diagram(svg="")
    nodes = [Node("start", "", "start")]
    for index, state in enumerate(definition.states.values()):
        node = f"s{index}"
        diagram.states[state.key] = node
        kind = _SHAPES.get(state.state_type, _SHAPES[StateType.INTERMEDIATE])[1]
        link = state_link(state.key) if state_link else None
        nodes.append(Node(node, state.key, kind, _label(state.raw), link))
    ends: list[tuple[str, str, TransitionDef, str | None]] = []
    initial = diagram.states.get(definition.start.target) if definition.start.raw else None
    if initial:
        ends.append(("start", initial, definition.start, None))
    for state in definition.states.values():
        for transition in state.transitions:
            ends.append(_edge(diagram, state.key, transition))
    specials = [*definition.specials()]
    if definition.timeout is not None:
        specials.append(definition.timeout)
    shared = [t for t in definition.shared if t.raw.get("availableIn")]
    anywhere = [t for t in definition.shared if not t.raw.get("availableIn")]
    for transition in shared:
        for state_key in definition.states:
            if transition.available_in(state_key):
                ends.append(_edge(diagram, state_key, transition))
    floating = [t for t in [*anywhere, *specials] if t.kind != TransitionKind.UPDATE_DATA]
    if floating:
        nodes.append(Node(ANY_STATE, "any state", "any"))
        for transition in floating:
            target = diagram.states.get(transition.target)
            if target:
                ends.append((ANY_STATE, target, transition, None))
    edges = []
    for index, (source, target, transition, from_state) in enumerate(ends):
        edge = f"t{index}"
        diagram.transitions.setdefault((from_state, transition.key), []).append(edge)
        style = _EDGE_STYLES.get(transition.trigger_type, "solid")
        edges.append(Edge(edge, source, target, transition.key, style, _label(transition.raw)))
    return nodes, edges, diagram


def dot_source(
    definition: WorkflowDefinition, state_link: Callable[[str], str] | None = None
) -> tuple[str, Diagram]:
    """The DOT text of the diagram and the ids it gives states and transitions."""
    nodes, edges, diagram = graph(definition, state_link)
    return dot_text(nodes, edges), diagram


def dot_text(nodes: list[Node], edges: list[Edge]) -> str:
    """The graph in Graphviz's DOT language."""
    lines = [
        "digraph workflow {",
        'graph [rankdir=LR bgcolor="transparent" fontname="Helvetica" nodesep=0.35 ranksep=0.6]',
        'node [fontname="Helvetica" fontsize=11 color="#455a64"]',
        'edge [fontname="Helvetica" fontsize=9 color="#607d8b" fontcolor="#37474f"]',
    ]
    shapes = {kind: shape for shape, kind in _SHAPES.values()}
    for node in nodes:
        if node.kind == "start":
            lines.append(
                'start [shape=circle width=0.18 label="" style=filled fillcolor="#263238" '
                'id="start"]'
            )
        elif node.kind == "any":
            lines.append(
                f'{node.id} [label={_quote(node.label)} shape=plaintext fontcolor="#78909c" '
                f'id="{node.id}"]'
            )
        else:
            link = f" URL={_quote(node.link)} target=_top" if node.link else ""
            lines.append(
                f"{node.id} [label={_quote(node.label)} {shapes[node.kind]} "
                f'fillcolor={_quote(FILLS[node.kind])} id="{node.id}" '
                f'class="state state-{node.kind}" tooltip={_quote(node.tooltip)}{link}]'
            )
    for edge in edges:
        lines.append(
            f"{edge.source} -> {edge.target} [label={_quote(edge.label)} style={edge.style} "
            f'id="{edge.id}" class="transition" tooltip={_quote(edge.tooltip)}]'
        )
    lines.append("}")
    return "\n".join(lines)


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
