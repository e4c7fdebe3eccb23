"""The inspector's operator buttons and the Batches admin in a real browser (headless Chromium):
an operator retries a faulted instance with corrected data typed into the JSON editor (invalid
JSON is refused in the page first), migrates an instance to a newer version after its dry run,
and reads a half-done batch's progress. Screenshots in `var/test-artifacts/operator-*.png`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as EC

from instances.batches import batch_create, batch_request, batch_work
from instances.models import Instance, OperatorAction
from instances.repair import Actor
from instances.services import RequestInfo, instance_start
from tests.instances.operator_fixtures import faulted_instance, fixable, publish_workflows
from tests.instances.workflows import publish
from tests.site.test_admin__browser_retry import (  # noqa: F401  (fixtures)
    PASSWORD,
    browser,
    click_and_load,
    operator_account,
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
    driver.save_screenshot(str(ARTIFACTS / f"operator-{name}.png"))
    driver.set_window_size(1400, 1000)


def log_in(driver: WebDriver, live_server: Any, user: Any) -> None:
    driver.get(live_server.url + reverse("admin:login"))
    driver.find_element(By.ID, "id_username").send_keys(user.username)
    driver.find_element(By.ID, "id_password").send_keys(PASSWORD)
    click_and_load(driver, driver.find_element(By.CSS_SELECTOR, "#login-form [type=submit]"))


def success(driver: WebDriver) -> str:
    until(driver).until(EC.presence_of_element_located((By.CSS_SELECTOR, ".messagelist .success")))
    return str(driver.find_element(By.CSS_SELECTOR, ".messagelist").text)


def started(workflow: str = "fixable") -> Instance:
    outcome = instance_start(domain="core", workflow=workflow, body={}, info=RequestInfo())
    return Instance.objects.get(pk=outcome.instance.id)


def test_operator_retries_a_faulted_instance_with_corrected_data(
    live_server: Any,
    operator_account: Any,  # noqa: F811
    browser: WebDriver,  # noqa: F811
) -> None:
    publish_workflows()
    broken = faulted_instance()
    driver = browser
    log_in(driver, live_server, operator_account)
    driver.get(live_server.url + reverse("admin:instances_instance_change", args=[broken.pk]))

    # The faulted state carries the incident's marker: drawn red, its code in the tooltip.
    marked = driver.find_element(By.CSS_SELECTOR, ".vnext-diagram g.vnext-incident")
    tooltip = marked.find_element(By.TAG_NAME, "title").get_property("textContent")
    assert "open incident Task:400008" in str(tooltip)
    outline = marked.find_element(By.CSS_SELECTOR, "path, polygon")
    assert outline.value_of_css_property("stroke") == "rgb(198, 40, 40)"
    assert "Task:400008" in driver.find_element(By.CSS_SELECTOR, ".vnext-incident-badge").text

    editor = driver.find_element(By.ID, "id_correction")
    assert editor.get_property("value") == "{}"
    editor.clear()
    editor.send_keys('{"divisor": 4')
    driver.find_element(By.ID, "vnext-retry-submit").click()
    note = driver.find_element(By.ID, "vnext-correction-error")
    until(driver).until(lambda d: note.is_displayed())
    assert "Not valid" in note.text
    assert Instance.objects.get(pk=broken.pk).status == "F"  # nothing was sent
    shot(driver, "1-retry-invalid-json")

    editor.send_keys("}")
    assert not note.is_displayed()
    click_and_load(driver, driver.find_element(By.ID, "vnext-retry-submit"))

    assert "retried (status A)" in success(driver)
    row = Instance.objects.get(pk=broken.pk)
    assert (row.status, row.current_state, row.data["divisor"]) == ("A", "working", 4)
    audit = OperatorAction.objects.get(instance=broken, action="retry")
    assert (audit.channel, audit.actor) == ("admin", operator_account.username)
    trail = driver.find_element(By.CSS_SELECTOR, "td.field-channel").text
    assert trail == "Admin"
    assert not driver.find_elements(By.CSS_SELECTOR, ".vnext-diagram g.vnext-incident")
    shot(driver, "2-retried")


def test_operator_migrates_an_instance_after_its_dry_run(
    live_server: Any,
    operator_account: Any,  # noqa: F811
    browser: WebDriver,  # noqa: F811
) -> None:
    publish_workflows()
    running = started()
    newer = fixable()
    newer["version"] = "1.0.1"
    publish(newer)
    driver = browser
    log_in(driver, live_server, operator_account)
    driver.get(live_server.url + reverse("admin:instances_instance_change", args=[running.pk]))

    click_and_load(driver, driver.find_element(By.ID, "vnext-migrate"))
    assert driver.find_element(By.ID, "id_target_version").get_property("value") == "1.0.1"
    click_and_load(driver, driver.find_element(By.CSS_SELECTOR, "input[name=dry_run]"))

    report = driver.find_element(By.CSS_SELECTOR, ".vnext-migration-report")
    assert "1.0.0 → 1.0.1" in report.text
    assert report.find_element(By.CSS_SELECTOR, ".vnext-to-state").text == "ready"
    assert not report.find_elements(By.CSS_SELECTOR, ".vnext-refused")
    assert Instance.objects.get(pk=running.pk).workflow_version == "1.0.0"
    shot(driver, "3-migrate-dry-run")

    click_and_load(driver, driver.find_element(By.CSS_SELECTOR, "input[name=apply]"))

    assert "1.0.0 -> 1.0.1" in success(driver)
    row = Instance.objects.get(pk=running.pk)
    assert (row.workflow_version, row.current_state) == ("1.0.1", "ready")
    assert OperatorAction.objects.get(instance=running, action="migrate").channel == "admin"
    shot(driver, "4-migrated")


def test_operator_reads_a_batchs_progress(
    live_server: Any,
    operator_account: Any,  # noqa: F811
    browser: WebDriver,  # noqa: F811
) -> None:
    publish_workflows()
    for _ in range(5):
        started()
    batch = batch_create(
        domain="core",
        workflow="fixable",
        request=batch_request({"operation": "suspend", "filter": [], "reason": "maintenance"}),
        actor=Actor("ops"),
        visible=None,
        roles=frozenset(),
    )
    batch_work(batch.pk, chunk=2)
    driver = browser
    log_in(driver, live_server, operator_account)

    driver.get(live_server.url + reverse("admin:instances_batch_changelist"))
    listed = driver.find_element(By.CSS_SELECTOR, "#result_list progress.vnext-batch-progress")
    assert (listed.get_attribute("value"), listed.get_attribute("max")) == ("2", "5")
    shot(driver, "5-batches")

    click_and_load(driver, driver.find_element(By.CSS_SELECTOR, "#result_list th.field-id a"))
    bar = driver.find_element(By.CSS_SELECTOR, "#vnext-batch progress.vnext-batch-progress")
    assert (bar.get_attribute("value"), bar.get_attribute("max")) == ("2", "5")
    counters = driver.find_element(By.ID, "vnext-batch-counters").text
    assert "Total 5" in counters
    assert "done 2" in counters
    assert "pending 3" in counters
    outcomes = [
        row.find_elements(By.TAG_NAME, "td")[2].text
        for row in driver.find_elements(By.CSS_SELECTOR, "#vnext-batch-items tbody tr")
    ]
    assert outcomes == ["done", "done", "pending", "pending", "pending"]
    assert driver.find_element(By.ID, "vnext-batch-cancel").is_displayed()
    shot(driver, "6-batch-progress")
