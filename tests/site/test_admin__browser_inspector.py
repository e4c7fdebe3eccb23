"""The operator's minute, in a real browser (headless Chromium through chromedriver): log in,
see the instances counted by status, find the faulted one by its error code, open the inspector,
see the diagram (current state marked) and the timeline, retry it from the list and see it
completed in the inspector. Screenshots of each page are kept in `var/test-artifacts/`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.select import Select

from instances.models import Incident, Instance
from instances.services import RequestInfo, instance_start
from tests.instances.operator_fixtures import faulted_instance, repair_outside
from tests.instances.workflows import publish
from tests.site.test_admin__browser_retry import (  # noqa: F401  (fixtures)
    PASSWORD,
    WORKFLOW,
    browser,
    click_and_load,
    operator_account,
    settle,
    until,
)

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "var" / "test-artifacts"


def shot(driver: WebDriver, name: str) -> None:
    """Keep a full-page screenshot of what the operator sees."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1400, min(max(int(height), 1000), 6000))
    driver.save_screenshot(str(ARTIFACTS / f"inspector-{name}.png"))
    driver.set_window_size(1400, 1000)


def sidebar_link(driver: WebDriver, title: str, label: str) -> Any:
    return driver.find_element(
        By.XPATH,
        f"//nav[@id='changelist-filter']//details[@data-filter-title='{title}']"
        f"//a[normalize-space()='{label}']",
    )


def test_operator_finds_a_fault_by_code_inspects_it_retries_it_and_sees_it_complete(
    live_server: Any,
    operator_account: Any,  # noqa: F811
    browser: WebDriver,  # noqa: F811
) -> None:
    publish(settle())
    broken = faulted_instance(WORKFLOW)
    instance_start(domain="core", workflow=WORKFLOW, body={}, info=RequestInfo(actor="client"))
    code = Incident.objects.get(instance=broken, resolved=False).error_code
    driver = browser

    driver.get(live_server.url + reverse("admin:login"))
    driver.find_element(By.ID, "id_username").send_keys(operator_account.username)
    driver.find_element(By.ID, "id_password").send_keys(PASSWORD)
    click_and_load(driver, driver.find_element(By.CSS_SELECTOR, "#login-form [type=submit]"))
    dashboard = driver.find_element(By.ID, "vnext-dashboard").text
    assert "Faulted: 1" in dashboard
    assert f"{code}: 1" in dashboard
    # Compact: the cards side by side, each figure one line with its label; the last hour drawn.
    cards = driver.find_elements(By.CSS_SELECTOR, "#vnext-dashboard .vnext-cards > .vnext-card")
    assert cards[0].location["y"] == cards[1].location["y"]
    faulted = driver.find_element(
        By.XPATH, "//a[@class='vnext-figure'][starts-with(normalize-space(.), 'Faulted')]/.."
    )
    assert faulted.size["height"] <= 24
    assert driver.find_elements(By.CSS_SELECTOR, "#vnext-dashboard svg.vnext-spark")
    shot(driver, "0-dashboard")
    driver.get(live_server.url + reverse("admin:instances_instance_changelist"))
    counts = driver.find_element(By.ID, "vnext-status-counts").text
    assert "Active: 1" in counts
    assert "Faulted: 1" in counts
    shot(driver, "1-list")

    click_and_load(driver, sidebar_link(driver, "error code (open incident)", code))
    rows = driver.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert len(rows) == 1
    assert rows[0].find_element(By.CSS_SELECTOR, "td.field-open_incident").text == code
    assert "ago)" in rows[0].find_element(By.CSS_SELECTOR, "td.field-modified").text

    click_and_load(driver, rows[0].find_element(By.CSS_SELECTOR, "th.field-id a"))
    diagram = driver.find_element(By.CSS_SELECTOR, ".vnext-diagram svg")
    states = diagram.find_elements(By.CSS_SELECTOR, "g.node.state")
    assert {s.find_element(By.TAG_NAME, "title").get_property("textContent") for s in states}
    current = driver.find_element(By.CSS_SELECTOR, ".vnext-diagram g#s0 path")
    assert current.value_of_css_property("fill") == "rgb(255, 213, 79)"  # ready: the current state
    timeline = driver.find_elements(By.CSS_SELECTOR, "table.vnext-timeline tr.faulted")
    assert [row.find_elements(By.TAG_NAME, "td")[4].text for row in timeline] == ["compute"]
    assert code in timeline[0].text
    shot(driver, "2-faulted")

    repair_outside(broken)
    driver.get(
        live_server.url + reverse("admin:instances_instance_changelist") + "?status__exact=F"
    )
    driver.find_element(By.CSS_SELECTOR, f"input.action-select[value='{broken.pk}']").click()
    Select(driver.find_element(By.NAME, "action")).select_by_value("retry")
    click_and_load(driver, driver.find_element(By.CSS_SELECTOR, "button[name=index]"))
    click_and_load(driver, driver.find_element(By.CSS_SELECTOR, "#content form [type=submit]"))
    until(driver).until(EC.presence_of_element_located((By.CSS_SELECTOR, ".messagelist .success")))

    driver.get(live_server.url + reverse("admin:instances_instance_change", args=[broken.pk]))
    done = driver.find_element(By.CSS_SELECTOR, ".vnext-diagram g#s1 path")
    assert done.value_of_css_property("fill") == "rgb(255, 213, 79)"  # done: the current state
    outcomes = [
        row.find_elements(By.TAG_NAME, "td")[6].text
        for row in driver.find_elements(By.CSS_SELECTOR, "table.vnext-timeline tr")[1:]
    ]
    assert outcomes[-1] == "completed"
    assert Instance.objects.get(pk=broken.pk).status == "C"
    shot(driver, "3-completed")
