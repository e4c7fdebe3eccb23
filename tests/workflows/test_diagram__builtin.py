"""The built-in diagram renderer (`workflows.diagram_layout`), which needs nothing installed:
every state a node `s<n>` and every transition an edge `t<n>` with the markup Graphviz gives,
so the admin's state links and an instance's highlighting work on it; cycles, self-loops and
"any state" transitions drawn; a 60-state definition in well under a second. And the choice of
renderer: Graphviz when `dot` is installed, the built-in layout without it or when forced."""

from __future__ import annotations

import re
import shutil
import time
import xml.etree.ElementTree as ET
from typing import Any

import graphviz
import pytest

from instances.engine.definition import WorkflowDefinition
from tests.engine.builders import state, transition, workflow
from workflows import diagram as diagrams
from workflows.diagram import Diagram, render, renderer, unavailable_reason
from workflows.diagram_layout import Edge, Node, draw

SVG = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}"
CANCEL = {"key": "cancel", "target": "rejected", "triggerType": 0, "versionStrategy": "Minor"}
EXIT = {"key": "exit", "target": "rejected", "triggerType": 0, "versionStrategy": "Minor"}


@pytest.fixture
def builtin(settings: Any) -> None:
    settings.VNEXT = {**settings.VNEXT, "DIAGRAM_RENDERER": "builtin"}


def review() -> WorkflowDefinition:
    """draft -> check -> approved, check -back-> draft (a cycle), check -poll-> check (a
    self-loop), `nudge` shared in draft and check, cancel and exit from any state."""
    return WorkflowDefinition(
        workflow(
            [
                state("draft", 1, [transition("submit", "check")]),
                state(
                    "check",
                    2,
                    [
                        transition("approve", "approved"),
                        transition("back", "draft", 1),
                        transition("poll", "$self", 2),
                        transition("reject", "rejected", 3),
                    ],
                ),
                state("approved", 3, subType=1),
                state("rejected", 3, subType=2),
            ],
            key="review",
            cancel=CANCEL,
            exit=EXIT,
            sharedTransitions=[
                {
                    "key": "nudge",
                    "target": "$self",
                    "triggerType": 0,
                    "versionStrategy": "Minor",
                    "availableIn": ["draft", "check"],
                }
            ],
        )
    )


def groups(svg: str, kind: str) -> dict[str, ET.Element]:
    """The SVG's `g.node` or `g.edge` groups by id (the SVG must parse as XML)."""
    root = ET.fromstring(svg)
    return {
        g.get("id", ""): g for g in root.iter(f"{SVG}g") if kind in (g.get("class") or "").split()
    }


def test_every_state_is_a_node_and_every_transition_an_edge(builtin: None) -> None:
    definition = review()
    drawn = render(definition, lambda key: f"/admin/instances/?state={key}")

    assert drawn is not None
    nodes, edges = groups(drawn.svg, "node"), groups(drawn.svg, "edge")
    assert drawn.states == {"draft": "s0", "check": "s1", "approved": "s2", "rejected": "s3"}
    for key, node in drawn.states.items():
        group = nodes[node]
        assert "state" in group.get("class", "").split()
        assert group.findtext(f"{SVG}title") == node
        assert [t.text for t in group.iter(f"{SVG}text")] == [key]
        link = next(group.iter(f"{SVG}a"))
        assert link.get(f"{XLINK}href") == f"/admin/instances/?state={key}"
        assert list(group.iter(f"{SVG}path")) or list(group.iter(f"{SVG}polygon"))
    assert {"start", "any"} <= set(nodes)
    ids = sorted(e for ids in drawn.transitions.values() for e in ids)
    assert sorted(edges) == ids == sorted(f"t{n}" for n in range(len(ids)))
    for group in edges.values():
        assert "transition" in group.get("class", "").split()
        assert len(list(group.iter(f"{SVG}path"))) == 1  # the line
        assert len(list(group.iter(f"{SVG}polygon"))) == 1  # its arrowhead
    labels = {e: [t.text for t in edges[e].iter(f"{SVG}text")] for e in edges}
    for (_, key), edge_ids in drawn.transitions.items():
        for edge_id in edge_ids:
            assert labels[edge_id] == [key]


def test_cycles_self_loops_shared_and_any_state_transitions_are_all_drawn(
    builtin: None,
) -> None:
    drawn = render(review())

    assert drawn is not None
    edges = groups(drawn.svg, "edge")
    titles = {e: g.findtext(f"{SVG}title") for e, g in edges.items()}
    ends = {
        key: sorted(titles[edge] or "" for edge in ids) for key, ids in drawn.transitions.items()
    }
    assert ends[(None, "start")] == ["start->s0"]
    assert ends[("check", "back")] == ["s1->s0"]  # the cycle, drawn backwards
    assert ends[("check", "poll")] == ["s1->s1"]  # $self
    assert ends[("draft", "nudge")] == ["s0->s0"]  # shared, available in draft and check
    assert ends[("check", "nudge")] == ["s1->s1"]
    assert ends[(None, "cancel")] == ["any->s3"]
    assert ends[(None, "exit")] == ["any->s3"]
    lines = {key: edges[ids[0]].find(f".//{SVG}path") for key, ids in drawn.transitions.items()}
    styles = {key: line.attrib if line is not None else {} for key, line in lines.items()}
    assert styles[("check", "back")].get("stroke-dasharray") == "5,2"  # automatic: dashed
    assert styles[("check", "poll")].get("stroke-dasharray") == "1,4"  # scheduled: dotted
    assert styles[("check", "reject")].get("stroke-width") == "2"  # event: bold


def test_everything_is_drawn_inside_the_view_box_and_states_do_not_overlap(
    builtin: None,
) -> None:
    drawn = render(review())

    assert drawn is not None
    root = ET.fromstring(drawn.svg)
    _, _, width, height = (float(v) for v in root.get("viewBox", "").split())
    numbers = re.findall(r'(?:d|points)="([^"]*)"|[xy]="([-\d.]+)"', drawn.svg)
    values = [float(v) for d, xy in numbers for v in re.findall(r"-?\d+\.?\d*", d or xy)]
    assert values
    assert all(-0.5 <= v <= max(width, height) + 0.5 for v in values)
    boxes = []
    for group in groups(drawn.svg, "state").values():
        label = next(group.iter(f"{SVG}text"))
        boxes.append((float(label.get("x", 0)), float(label.get("y", 0))))
    # The layout keeps 14 px between rows and 22 px between layers: centres stay apart.
    for at, (x1, y1) in enumerate(boxes):
        for x2, y2 in boxes[at + 1 :]:
            assert abs(x1 - x2) > 40 or abs(y1 - y2) > 30


def test_the_highlight_styles_the_current_state_and_the_path_taken(builtin: None) -> None:
    drawn = render(review())

    assert drawn is not None
    style = drawn.highlight(
        "diagram-1", "check", [("draft", "submit"), ("check", "back"), ("draft", "submit")]
    )

    nodes, edges = groups(drawn.svg, "node"), groups(drawn.svg, "edge")
    submit = drawn.transitions[("draft", "submit")][0]
    back = drawn.transitions[("check", "back")][0]
    assert f"#diagram-1 g#{submit} path" in style
    assert f"#diagram-1 g#{back} path" in style
    assert "#diagram-1 g#s1 path, #diagram-1 g#s1 polygon {fill:#ffd54f" in style
    assert style.count("stroke-width:2.5px") == 2
    # What the rules select exists in the drawing: the state's shape, the edges' lines.
    assert list(nodes["s1"].iter(f"{SVG}path"))
    assert list(edges[submit].iter(f"{SVG}path"))
    assert list(edges[back].iter(f"{SVG}path"))


def test_text_is_escaped() -> None:
    svg = draw(
        [
            Node("start", "", "start"),
            Node("s0", 'a<b & "c"', "initial", tooltip="<x>", link="?a&b"),
        ],
        [Edge("t0", "start", "s0", "<go>"), Edge("t1", "s0", "s0", "&again")],
    )

    root = ET.fromstring(svg)
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert sorted(texts) == sorted(['a<b & "c"', "<go>", "&again"])
    link = root.find(f".//{SVG}g[@id='a_s0']/{SVG}a")
    assert link is not None
    assert link.get(f"{XLINK}href") == "?a&b"
    assert link.get(f"{XLINK}title") == "<x>"


def test_a_60_state_definition_renders_in_well_under_a_second(builtin: None) -> None:
    count = 60
    states = []
    for n in range(count):
        moves = [transition(f"next{n}", f"st{n + 1}")] if n < count - 1 else []
        if n % 4 == 0 and n + 3 < count:
            moves.append(transition(f"skip{n}", f"st{n + 3}", 1))
        if n % 7 == 0 and n >= 5:
            moves.append(transition(f"back{n}", f"st{n - 5}", 2))
        if n % 10 == 3:
            moves.append(transition(f"retry{n}", "$self", 1))
        kind, extra = (1, {}) if n == 0 else (3, {"subType": 1}) if n == count - 1 else (2, {})
        states.append(state(f"st{n}", kind, moves, **extra))
    cancel = {**CANCEL, "target": f"st{count - 1}"}
    definition = WorkflowDefinition(workflow(states, key="big", cancel=cancel))

    started = time.perf_counter()
    drawn = render(definition)
    elapsed = time.perf_counter() - started

    assert drawn is not None
    assert elapsed < 1.0, f"{elapsed:.2f} s"
    assert len(groups(drawn.svg, "state")) == count
    assert len(groups(drawn.svg, "edge")) == sum(len(v) for v in drawn.transitions.values())


def test_without_graphviz_auto_draws_with_the_builtin_layout(monkeypatch, settings) -> None:
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    assert settings.VNEXT.get("DIAGRAM_RENDERER", "auto") == "auto"

    assert renderer() == "builtin"
    drawn = render(review())

    assert isinstance(drawn, Diagram)
    assert '<g id="s0" class="node state state-initial">' in drawn.svg
    assert render(review()) is not None


def test_graphviz_forced_and_missing_draws_nothing_and_says_why(monkeypatch, settings) -> None:
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    settings.VNEXT = {**settings.VNEXT, "DIAGRAM_RENDERER": "graphviz"}

    assert render(review()) is None
    assert "Graphviz is not installed" in unavailable_reason()


def test_a_diagram_is_drawn_once_per_version_and_renderer(builtin: None, settings) -> None:
    definition = review()
    first = render(definition)

    assert render(definition) is first
    assert set(definition.memo) == {"admin-diagram:builtin"}


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed")
def test_graphviz_when_installed_with_the_same_ids(settings) -> None:
    graphviz_drawn = render(review())
    settings.VNEXT = {**settings.VNEXT, "DIAGRAM_RENDERER": "builtin"}
    builtin_drawn = render(review())

    assert renderer() == "builtin"
    assert graphviz_drawn is not None
    assert builtin_drawn is not None
    assert graphviz_drawn.svg != builtin_drawn.svg
    assert "<!--" in graphviz_drawn.svg  # Graphviz's comments: its own drawing
    for kind in ("node", "edge"):
        assert set(groups(graphviz_drawn.svg, kind)) == set(groups(builtin_drawn.svg, kind))
    assert graphviz_drawn.transitions == builtin_drawn.transitions


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed")
def test_when_graphviz_fails_the_builtin_layout_draws(monkeypatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise graphviz.ExecutableNotFound(("dot",))

    monkeypatch.setattr(graphviz, "Source", broken)

    drawn = render(review())

    assert drawn is not None
    assert diagrams.renderer() == "graphviz"
    assert "<!--" not in drawn.svg
    assert "s0" in groups(drawn.svg, "state")
