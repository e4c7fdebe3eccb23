"""The admin's state diagrams without Graphviz, in a real browser (headless Chromium): with `dot`
missing the built-in layout draws a workflow version's diagram (each state a node linking to its
instances) and an instance's inspector (the current state filled, the path taken drawn heavy).
Screenshots are kept in `var/test-artifacts/`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from instances.models import Instance
from instances.services import RequestInfo, instance_start, instance_transition
from tests.engine.builders import state, transition, workflow
from tests.instances.workflows import publish
from tests.site.test_admin__browser_retry import browser, click_and_load  # noqa: F401  (fixtures)
from workflows import diagram
from workflows.models import Component

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.slow,
    # The live server answers from its own threads and connections: they see committed rows only.
    pytest.mark.django_db(transaction=True),
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "var" / "test-artifacts"
WORKFLOW = "review-diagram"
PASSWORD = "pw-12345678"
HIGHLIGHT = "rgb(255, 213, 79)"  # the current state's fill (workflows.diagram.Diagram.highlight)


def review() -> dict[str, Any]:
    """draft -submit-> check -approve-> approved; check -back-> draft (a cycle), check -poll->
    check (a self-loop), cancel from any state to rejected."""
    return workflow(
        [
            state("draft", 1, [transition("submit", "check")]),
            state(
                "check",
                2,
                [
                    transition("approve", "approved"),
                    transition("back", "draft"),
                    transition("poll", "$self"),
                ],
            ),
            state("approved", 3, subType=1),
            state("rejected", 3, subType=2),
        ],
        key=WORKFLOW,
        cancel=transition("cancel", "rejected"),
    )


def shot(driver: WebDriver, name: str) -> None:
    """Keep a full-page screenshot of what the operator sees."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1400, min(max(int(height), 1000), 6000))
    driver.save_screenshot(str(ARTIFACTS / f"diagram-{name}.png"))
    driver.set_window_size(1400, 1000)


def test_without_graphviz_the_builtin_layout_draws_the_version_and_the_inspector(
    live_server: Any,
    browser: WebDriver,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Graphviz "not installed": the renderer's lookup of `dot` finds nothing (the live server
    # runs in this process, so its threads see the patch).
    monkeypatch.setattr(diagram, "graphviz_available", lambda: False)
    assert diagram.renderer() == "builtin"
    publish(review())
    info = RequestInfo(actor="client")
    started = instance_start(domain="core", workflow=WORKFLOW, body={}, info=info)
    instance = Instance.objects.get(pk=started.instance.id)
    for key in ("submit", "back", "submit"):
        instance_transition(
            domain="core",
            workflow=WORKFLOW,
            ref=str(instance.pk),
            transition_key=key,
            body={},
            info=info,
        )
    instance.refresh_from_db()
    assert instance.current_state == "check"
    version = Component.objects.get(key=WORKFLOW, kind="workflow")
    get_user_model().objects.create_superuser("root", "root@example.com", PASSWORD)
    driver = browser

    driver.get(live_server.url + reverse("admin:login"))
    driver.find_element(By.ID, "id_username").send_keys("root")
    driver.find_element(By.ID, "id_password").send_keys(PASSWORD)
    click_and_load(driver, driver.find_element(By.CSS_SELECTOR, "#login-form [type=submit]"))

    driver.get(live_server.url + reverse("admin:workflows_component_change", args=[version.pk]))
    assert "No diagram" not in driver.find_element(By.ID, "content").text
    drawn = driver.find_element(By.CSS_SELECTOR, ".vnext-diagram svg")
    states = drawn.find_elements(By.CSS_SELECTOR, "g.node.state")
    assert [s.get_attribute("id") for s in states] == ["s0", "s1", "s2", "s3"]
    labels = [s.find_element(By.TAG_NAME, "text").get_property("textContent") for s in states]
    assert labels == ["draft", "check", "approved", "rejected"]
    assert len(drawn.find_elements(By.CSS_SELECTOR, "g.edge.transition")) == 6
    assert drawn.size["height"] > 40  # laid out, not collapsed (the page sets its width)
    anchor = states[1].find_element(By.TAG_NAME, "a")
    link = driver.execute_script("return arguments[0].getAttribute('xlink:href')", anchor)
    assert "state=check" in link
    assert "<!-- s0 -->" not in driver.page_source  # Graphviz's comments: not its drawing
    shot(driver, "0-version")

    driver.get(live_server.url + reverse("admin:instances_instance_change", args=[instance.pk]))
    drawn = driver.find_element(By.CSS_SELECTOR, ".vnext-diagram svg")
    assert len(drawn.find_elements(By.CSS_SELECTOR, "g.node.state")) == 4
    current = drawn.find_element(By.CSS_SELECTOR, "g#s1 path")
    assert current.value_of_css_property("fill") == HIGHLIGHT  # check: the current state
    assert drawn.find_element(By.CSS_SELECTOR, "g#s0 path").value_of_css_property("fill") != (
        HIGHLIGHT
    )
    submit = drawn.find_element(By.CSS_SELECTOR, "g#t1 path")  # draft -submit-> check: taken
    assert submit.value_of_css_property("stroke-width") == "2.5px"
    approve = drawn.find_element(By.CSS_SELECTOR, "g#t2 path")  # not taken
    assert approve.value_of_css_property("stroke-width") != "2.5px"
    shot(driver, "1-inspector")
