"""The built-in diagram renderer: a layered (Sugiyama) layout in plain Python, drawn as SVG with
the markup Graphviz gives (`g.node` / `g.edge` groups under their ids, shapes as `path` or
`polygon`), so the admin's links and highlighting work whichever renderer drew the diagram.

Left to right: cycles broken by reversing the edges that close them, longest-path layers from the
sources, every edge given at least one bend point that carries its label (a virtual layer between
two ranks of states), barycentric ordering, then rows placed as near their neighbours as the
order allows (isotonic regression). Needs nothing installed; Graphviz draws better when present.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from html import escape

NODE_FONT = 11.0
EDGE_FONT = 9.0
NODE_HEIGHT = 36.0
NODE_PADDING = 12.0
MIN_NODE_WIDTH = 54.0
LAYER_GAP = 22.0  # horizontal space between two layers (states, labels, bend points)
ROW_GAP = 14.0  # vertical space between two neighbours of a layer
MARGIN = 8.0
ARROW = 8.0
LOOP_RISE = 16.0  # how far above its state a self-loop reaches, per loop
PORT_SPACING = 7.0
SWEEPS = 12
PLACEMENT_ROUNDS = 6
FILLS = {
    "initial": "#e3f2fd",
    "intermediate": "#ffffff",
    "final": "#e8f5e9",
    "subflow": "#f3e5f5",
    "wizard": "#fff8e1",
}
_DASHES = {"dashed": ' stroke-dasharray="5,2"', "dotted": ' stroke-dasharray="1,4"'}
# Helvetica's advance widths (per em) for the narrow and wide letters; the rest are ~0.56 em.
_NARROW = {c: 0.28 for c in "ijlIftr.,:;'|!()[] -"}
_WIDE = {c: 0.83 for c in "mwMW@%"}
_CAPITAL = 0.67


@dataclass
class Node:
    """A node to draw: `kind` is a state's type (`initial`, ..., `wizard`), `start` (the dot the
    start transition leaves) or `any` (the "any state" label cancel and exit leave)."""

    id: str
    label: str
    kind: str
    tooltip: str = ""
    link: str | None = None


@dataclass
class Edge:
    """An edge to draw from node `source` to node `target` (the same for a self-loop);
    `style` is `solid`, `dashed`, `dotted` or `bold`."""

    id: str
    source: str
    target: str
    label: str
    style: str = "solid"
    tooltip: str = ""


def text_width(text: str, size: float) -> float:
    """An estimate of the width of `text` in Helvetica at `size` (no fonts are read)."""
    em = 0.0
    for char in text:
        em += _NARROW.get(char) or _WIDE.get(char) or (_CAPITAL if char.isupper() else 0.56)
    return em * size


@dataclass
class _Box:
    """One member of a layer: a node, or a bend point of a long edge (`edge` set)."""

    key: str
    width: float
    above: float  # extent above the anchor (the row edges attach at)
    below: float
    node: Node | None = None
    edge: int | None = None
    label: bool = False  # the bend point that carries its edge's label
    layer: int = 0
    y: float = 0.0
    x: float = 0.0


@dataclass
class _Route:
    """An edge of the drawing through its bend points, in layer order (left to right)."""

    edge: Edge
    index: int
    boxes: list[str] = field(default_factory=list)
    reversed: bool = False


def draw(nodes: Sequence[Node], edges: Sequence[Edge]) -> str:
    """The SVG of the graph, laid out left to right."""
    return _Layout(nodes, edges).svg()


class _Layout:
    def __init__(self, nodes: Sequence[Node], edges: Sequence[Edge]) -> None:
        self.nodes = {node.id: node for node in nodes}
        self.edges = [e for e in edges if e.source in self.nodes and e.target in self.nodes]
        self.loops: dict[str, list[int]] = {}
        for index, edge in enumerate(self.edges):
            if edge.source == edge.target:
                self.loops.setdefault(edge.source, []).append(index)
        self.boxes: dict[str, _Box] = {}
        self.routes: list[_Route] = []
        self.layers: list[list[str]] = []
        self.succs: dict[str, list[str]] = {}
        self.preds: dict[str, list[str]] = {}
        self._rank()
        self._order()
        self._place()

    # --- ranks ------------------------------------------------------------------------------

    def _rank(self) -> None:
        order = list(self.nodes)
        out: dict[str, list[int]] = {key: [] for key in order}
        for index, edge in enumerate(self.edges):
            if edge.source != edge.target:
                out[edge.source].append(index)
        # Depth-first from the sources (the start first): an edge back to a node still on the
        # path closes a cycle and is drawn reversed.
        incoming = {e.target for e in self.edges if e.source != e.target}
        roots = [k for k in order if k not in incoming] + order
        reversed_edges: set[int] = set()
        state: dict[str, int] = {}  # 1 on the path, 2 done
        for root in roots:
            if root in state:
                continue
            stack: list[tuple[str, int]] = [(root, 0)]
            state[root] = 1
            while stack:
                key, at = stack[-1]
                if at == len(out[key]):
                    state[key] = 2
                    stack.pop()
                    continue
                stack[-1] = (key, at + 1)
                index = out[key][at]
                target = self.edges[index].target
                if state.get(target) == 1:
                    reversed_edges.add(index)
                elif target not in state:
                    state[target] = 1
                    stack.append((target, 0))
        dag: list[tuple[str, str, int]] = []
        for index, edge in enumerate(self.edges):
            if edge.source == edge.target:
                continue
            if index in reversed_edges:
                dag.append((edge.target, edge.source, index))
            else:
                dag.append((edge.source, edge.target, index))
        # Longest path, two layers per step: the odd layers between ranks hold the labels.
        layer = dict.fromkeys(order, 0)
        preds: dict[str, list[str]] = {k: [] for k in order}
        succs: dict[str, list[str]] = {k: [] for k in order}
        for tail, head, _ in dag:
            preds[head].append(tail)
            succs[tail].append(head)
        for key in _topological(order, preds, succs):
            for tail in preds[key]:
                layer[key] = max(layer[key], layer[tail] + 2)
        # A source other than the start (the "any state" label) sits just before its nearest
        # successor rather than in the first column.
        for key in order:
            if not preds[key] and succs[key] and self.nodes[key].kind != "start":
                layer[key] = max(layer[key], min(layer[s] for s in succs[key]) - 2)
        for key, node in self.nodes.items():
            self.boxes[key] = self._node_box(node, layer[key])
        for tail, head, index in sorted(dag, key=lambda d: d[2]):
            edge = self.edges[index]
            route = _Route(edge, index, [tail], reversed=index in reversed_edges)
            span = range(layer[tail] + 1, layer[head])
            # The label rides on the bend point next to where the transition leaves.
            label_layer = span[-1] if route.reversed else span[0]
            for at in span:
                key = f"{edge.id}:{at}"
                labelled = at == label_layer and bool(edge.label)
                width = text_width(edge.label, EDGE_FONT) + 6 if labelled else 0.0
                above = EDGE_FONT + 6 if labelled else 2.0
                self.boxes[key] = _Box(key, width, above, 4.0, edge=index, label=labelled, layer=at)
                route.boxes.append(key)
            route.boxes.append(head)
            self.routes.append(route)
        for route in self.routes:
            for tail, head in itertools.pairwise(route.boxes):
                self.succs.setdefault(tail, []).append(head)
                self.preds.setdefault(head, []).append(tail)
        count = max((box.layer for box in self.boxes.values()), default=0) + 1
        self.layers = [[] for _ in range(count)]
        for key in self._initial_order():
            self.layers[self.boxes[key].layer].append(key)

    def _node_box(self, node: Node, layer: int) -> _Box:
        loops = self.loops.get(node.id, [])
        if node.kind == "start":
            width, height = 13.0, 13.0
        elif node.kind == "any":
            width, height = text_width(node.label, NODE_FONT) + 8, 20.0
        else:
            width = max(MIN_NODE_WIDTH, text_width(node.label, NODE_FONT) + 2 * NODE_PADDING)
            height = NODE_HEIGHT
            if node.kind == "final":  # the second outline, 4 outside the first
                width, height = width + 8, height + 8
        rise = LOOP_RISE * len(loops) + (EDGE_FONT + 4 if loops else 0)
        labels = [text_width(self.edges[i].label, EDGE_FONT) for i in loops]
        return _Box(
            node.id, max([width, *labels]), height / 2 + rise, height / 2, node, layer=layer
        )

    def _initial_order(self) -> list[str]:
        # Depth first from the start along the edges in definition order: a readable first
        # order for the sweeps to improve on.
        seen: dict[str, None] = {}
        roots = [k for k in self.boxes if not self.preds.get(k)] + list(self.boxes)
        for root in roots:
            stack = [root]
            while stack:
                key = stack.pop()
                if key in seen:
                    continue
                seen[key] = None
                stack.extend(reversed(self.succs.get(key, [])))
        return list(seen)

    # --- order within layers --------------------------------------------------------------

    def _order(self) -> None:
        best = [list(layer) for layer in self.layers]
        fewest = self._crossings(best)
        for sweep in range(SWEEPS):
            if fewest == 0:
                break
            down = sweep % 2 == 0
            indices = range(1, len(self.layers)) if down else range(len(self.layers) - 2, -1, -1)
            neighbours = self.preds if down else self.succs
            for i in indices:
                position = {k: p for p, k in enumerate(self.layers[i - 1 if down else i + 1])}
                ranked = []
                for at, key in enumerate(self.layers[i]):
                    near = [position[n] for n in neighbours.get(key, []) if n in position]
                    ranked.append((sum(near) / len(near) if near else float(at), at, key))
                self.layers[i] = [key for _, _, key in sorted(ranked)]
            crossings = self._crossings(self.layers)
            if crossings < fewest:
                fewest, best = crossings, [list(layer) for layer in self.layers]
        self.layers = best

    def _crossings(self, layers: list[list[str]]) -> int:
        total = 0
        for upper, lower in itertools.pairwise(layers):
            position = {k: p for p, k in enumerate(lower)}
            pairs = sorted(
                (p, position[s])
                for p, k in enumerate(upper)
                for s in self.succs.get(k, [])
                if s in position
            )
            total += _inversions([b for _, b in pairs], len(lower))
        return total

    # --- coordinates ----------------------------------------------------------------------

    def _place(self) -> None:
        x = MARGIN
        for layer in self.layers:
            width = max((self.boxes[k].width for k in layer), default=0.0)
            for key in layer:
                self.boxes[key].x = x + width / 2
            x += width + LAYER_GAP
        self.width = x - LAYER_GAP + MARGIN
        for layer in self.layers:
            self._pack(layer, [0.0] * len(layer))
        for round_ in range(PLACEMENT_ROUNDS):
            down = round_ % 2 == 0
            indices = range(1, len(self.layers)) if down else range(len(self.layers) - 2, -1, -1)
            for i in indices:
                neighbours = self.preds if down else self.succs
                wanted = []
                for key in self.layers[i]:
                    near = [self.boxes[n].y for n in neighbours.get(key, [])]
                    wanted.append(sum(near) / len(near) if near else self.boxes[key].y)
                self._pack(self.layers[i], wanted)
        top = min((b.y - b.above for b in self.boxes.values()), default=0.0)
        for box in self.boxes.values():
            box.y += MARGIN - top
        bottom = max((b.y + b.below for b in self.boxes.values()), default=0.0)
        self.height = bottom + MARGIN

    def _pack(self, layer: list[str], wanted: list[float]) -> None:
        """Rows for `layer` in its order, each as near its wanted row as the gaps allow: the
        least-squares fit under the order (pool-adjacent-violators on the shifted targets)."""
        offsets = []
        offset = 0.0
        for at, key in enumerate(layer):
            if at:
                offset += self.boxes[layer[at - 1]].below + ROW_GAP + self.boxes[key].above
            offsets.append(offset)
        blocks: list[list[float]] = []  # [sum, count]
        for want, offset in zip(wanted, offsets, strict=True):
            blocks.append([want - offset, 1])
            while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
                total, count = blocks.pop()
                blocks[-1][0] += total
                blocks[-1][1] += count
        at = 0
        for total, count in blocks:
            for _ in range(int(count)):
                self.boxes[layer[at]].y = total / count + offsets[at]
                at += 1

    # --- drawing --------------------------------------------------------------------------

    def svg(self) -> str:
        ports = self._ports()
        parts = [
            f'<svg viewBox="0 0 {self.width:.0f} {self.height:.0f}" '
            'xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">',
            '<g id="graph0" class="graph">',
            "<title>workflow</title>",
        ]
        for number, route in enumerate(self.routes):
            parts.append(self._edge(number, route, ports))
        for key, indices in self.loops.items():
            for rank, index in enumerate(indices):
                parts.append(self._loop(self.boxes[key], self.edges[index], rank))
        for key in self.nodes:
            parts.append(self._node(self.boxes[key]))
        parts.append("</g></svg>")
        return "\n".join(parts)

    def _ports(self) -> dict[tuple[int, str], tuple[float, float]]:
        """Where each edge meets its end nodes: the edges on one side of a node spread over
        its height in the order of where they come from, so they neither cross nor overlap."""
        sides: dict[tuple[str, str], list[tuple[float, int, str]]] = {}
        for number, route in enumerate(self.routes):
            first, second = self.boxes[route.boxes[0]], self.boxes[route.boxes[1]]
            last, before = self.boxes[route.boxes[-1]], self.boxes[route.boxes[-2]]
            sides.setdefault((first.key, "right"), []).append((second.y, number, "tail"))
            sides.setdefault((last.key, "left"), []).append((before.y, number, "head"))
        ports: dict[tuple[int, str], tuple[float, float]] = {}
        for (key, side), ends in sides.items():
            box = self.boxes[key]
            assert box.node is not None
            half = self._half_width(box) + (4 if box.node.kind == "final" else 0)
            x = box.x + half if side == "right" else box.x - half
            ends.sort()
            room = 0.0 if box.node.kind == "start" else box.below - 6
            step = min(PORT_SPACING, 2 * room / (len(ends) - 1)) if len(ends) > 1 else 0.0
            start = box.y - step * (len(ends) - 1) / 2
            for at, (_, number, end) in enumerate(ends):
                ports[(number, end)] = (x, start + at * step)
        return ports

    def _half_width(self, box: _Box) -> float:
        node = box.node
        assert node is not None
        if node.kind == "start":
            return 6.5
        if node.kind == "any":
            return text_width(node.label, NODE_FONT) / 2 + 4
        return max(MIN_NODE_WIDTH, text_width(node.label, NODE_FONT) + 2 * NODE_PADDING) / 2

    def _edge(
        self, number: int, route: _Route, ports: dict[tuple[int, str], tuple[float, float]]
    ) -> str:
        points = [ports[(number, "tail")]]
        label: tuple[float, float] | None = None
        for key in route.boxes[1:-1]:
            box = self.boxes[key]
            points.append((box.x - box.width / 2, box.y))
            if box.width:
                points.append((box.x + box.width / 2, box.y))
            if box.label:
                label = (box.x, box.y - 4)
        points.append(ports[(number, "head")])
        if route.reversed:
            points.reverse()
        edge = route.edge
        # The arrow's tip touches the target; the line ends at its base.
        tip = points[-1]
        direction = -1.0 if route.reversed else 1.0
        base = (tip[0] - direction * ARROW, tip[1])
        points[-1] = base
        d = f"M{points[0][0]:.1f},{points[0][1]:.1f}"
        for (x1, y1), (x2, y2) in itertools.pairwise(points):
            mid = (x1 + x2) / 2
            d += f" C{mid:.1f},{y1:.1f} {mid:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"
        head = _arrow(tip, (direction, 0.0))
        text = ""
        if label and edge.label:
            text = _text(label[0], label[1], edge.label, EDGE_FONT, ' fill="#37474f"')
        source = self.edges[route.index].source
        return _edge_group(edge, f"{source}->{edge.target}", d, head, text)

    def _loop(self, box: _Box, edge: Edge, rank: int) -> str:
        top = box.y - box.below
        half = min(self._half_width(box) - 6, 14.0)
        rise = LOOP_RISE * (rank + 1)
        x0, x1 = box.x - half, box.x + half
        d = (
            f"M{x0:.1f},{top:.1f} C{x0 - 6:.1f},{top - rise:.1f} {x1 + 6:.1f},{top - rise:.1f} "
            f"{x1:.1f},{top - ARROW * 0.8:.1f}"
        )
        head = _arrow((x1, top), (0.0, 1.0))
        text = _text(box.x, top - rise * 0.75 - 3, edge.label, EDGE_FONT, ' fill="#37474f"')
        return _edge_group(edge, f"{edge.source}->{edge.target}", d, head, text)

    def _node(self, box: _Box) -> str:
        node = box.node
        assert node is not None
        cx, cy = box.x, box.y
        title = f"<title>{escape(node.id)}</title>"
        if node.kind == "start":
            shape = (
                f'<ellipse fill="#263238" stroke="#455a64" cx="{cx:.1f}" cy="{cy:.1f}" '
                'rx="6.5" ry="6.5"/>'
            )
            return f'<g id="{escape(node.id)}" class="node">{title}{shape}</g>'
        if node.kind == "any":
            text = _text(cx, cy + 4, node.label, NODE_FONT, ' fill="#78909c"')
            return f'<g id="{escape(node.id)}" class="node">{title}{text}</g>'
        half = self._half_width(box)
        h = NODE_HEIGHT / 2
        fill = FILLS.get(node.kind, FILLS["intermediate"])
        x0, y0, x1, y1 = cx - half, cy - h, cx + half, cy + h
        shapes = []
        if node.kind == "final":
            outer = _rounded(x0 - 4, y0 - 4, 2 * half + 8, NODE_HEIGHT + 8, 8)
            shapes.append(f'<path fill="none" stroke="#455a64" d="{outer}"/>')
        # Decorations are polylines: the highlight fills a state's paths and polygons.
        if node.kind == "subflow":
            outline = [(x0, y0 + 4), (x0 + 4, y0), (x1, y0), (x1, y1 - 4), (x1 - 4, y1), (x0, y1)]
            shapes.append(_shape("polygon", fill, outline))
            shapes.append(_shape("polyline", "none", [(x0, y0 + 4), (x1 - 4, y0 + 4), (x1, y0)]))
            shapes.append(_shape("polyline", "none", [(x1 - 4, y0 + 4), (x1 - 4, y1)]))
        elif node.kind == "wizard":
            outline = [(x0, y0), (x1 - 8, y0), (x1, y0 + 8), (x1, y1), (x0, y1)]
            shapes.append(_shape("polygon", fill, outline))
            shapes.append(
                _shape("polyline", "none", [(x1 - 8, y0), (x1 - 8, y0 + 8), (x1, y0 + 8)])
            )
        else:
            bold = ' stroke-width="2"' if node.kind == "initial" else ""
            path = _rounded(x0, y0, 2 * half, NODE_HEIGHT, 6)
            shapes.append(f'<path fill="{fill}" stroke="#455a64"{bold} d="{path}"/>')
        shapes.append(_text(cx, cy + 4, node.label, NODE_FONT, ""))
        tip = f' xlink:title="{escape(node.tooltip)}"' if node.tooltip else ""
        href = f' xlink:href="{escape(node.link)}" target="_top"' if node.link else ""
        kind = escape(node.kind)
        return (
            f'<g id="{escape(node.id)}" class="node state state-{kind}">{title}'
            f'<g id="a_{escape(node.id)}"><a{href}{tip}>{"".join(shapes)}</a></g></g>'
        )


def _edge_group(edge: Edge, title: str, d: str, head: str, text: str) -> str:
    dash = _DASHES.get(edge.style, "")
    width = ' stroke-width="2"' if edge.style == "bold" else ""
    tip = f' xlink:title="{escape(edge.tooltip)}"' if edge.tooltip else ""
    return (
        f'<g id="{escape(edge.id)}" class="edge transition"><title>{escape(title)}</title>'
        f'<g id="a_{escape(edge.id)}"><a{tip}>'
        f'<path fill="none" stroke="#607d8b"{dash}{width} d="{d}"/>{head}</a></g>{text}</g>'
    )


def _shape(tag: str, fill: str, points: list[tuple[float, float]]) -> str:
    coordinates = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    return f'<{tag} fill="{fill}" stroke="#455a64" points="{coordinates}"/>'


def _arrow(tip: tuple[float, float], direction: tuple[float, float]) -> str:
    (x, y), (dx, dy) = tip, direction
    bx, by = x - dx * ARROW, y - dy * ARROW
    px, py = -dy * 3.5, dx * 3.5
    points = f"{bx + px:.1f},{by + py:.1f} {x:.1f},{y:.1f} {bx - px:.1f},{by - py:.1f}"
    return (
        f'<polygon fill="#607d8b" stroke="#607d8b" points="{points} {bx + px:.1f},{by + py:.1f}"/>'
    )


def _text(x: float, y: float, text: str, size: float, extra: str) -> str:
    return (
        f'<text text-anchor="middle" x="{x:.1f}" y="{y:.1f}" font-family="Helvetica,sans-Serif" '
        f'font-size="{size:.2f}"{extra}>{escape(text)}</text>'
    )


def _rounded(x: float, y: float, w: float, h: float, r: float) -> str:
    return (
        f"M{x + r:.1f},{y:.1f} H{x + w - r:.1f} Q{x + w:.1f},{y:.1f} {x + w:.1f},{y + r:.1f} "
        f"V{y + h - r:.1f} Q{x + w:.1f},{y + h:.1f} {x + w - r:.1f},{y + h:.1f} H{x + r:.1f} "
        f"Q{x:.1f},{y + h:.1f} {x:.1f},{y + h - r:.1f} V{y + r:.1f} Q{x:.1f},{y:.1f} "
        f"{x + r:.1f},{y:.1f} Z"
    )


def _topological(
    order: Iterable[str], preds: dict[str, list[str]], succs: dict[str, list[str]]
) -> list[str]:
    waiting = {key: len(preds[key]) for key in order}
    ready = [key for key, count in waiting.items() if count == 0]
    result = []
    while ready:
        key = ready.pop(0)
        result.append(key)
        for head in succs[key]:
            waiting[head] -= 1
            if waiting[head] == 0:
                ready.append(head)
    return result


def _inversions(values: list[int], size: int) -> int:
    """Pairs out of order in `values` (each below `size`): the crossings between two layers."""
    tree = [0] * (size + 1)
    count = 0
    for seen, value in enumerate(values):
        at = value + 1
        above = seen
        while at > 0:
            above -= tree[at]
            at -= at & -at
        count += above
        at = value + 1
        while at <= size:
            tree[at] += 1
            at += at & -at
    return count
