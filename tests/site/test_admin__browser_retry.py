"""The operator's retry in a real browser: headless Chromium, driven through chromedriver by
selenium, logs into the admin of a live server, filters the Faulted instances from the sidebar,
retries one through the action and its confirmation page, and sees it Completed.

Chromium and chromedriver are Debian's (`make browser`, which `make test` runs first); a
missing one fails the test, saying how to install it, rather than skipping the coverage."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.urls import reverse
from django.utils.text import capfirst
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.wait import WebDriverWait

from instances.models import Incident, Instance, OperatorAction
from instances.services import RequestInfo, instance_start
from tests.engine.builders import state, transition, workflow
from tests.instances.operator_fixtures import (
    DIVIDE,
    faulted_instance,
    repair_outside,
    staff_operator,
)
from tests.instances.workflows import publish

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.slow,
    # The live server answers from its own threads and connections: they see committed rows only.
    pytest.mark.django_db(transaction=True),
]

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# Generous: the first page of a fresh Chromium and the retry (a script in a worker) take a while
# on a loaded CI machine; every wait ends as soon as its condition holds.
WAIT_SECONDS = 30
WORKFLOW = "settle"
PASSWORD = "pw-12345678"  # staff_operator's


def settle() -> dict[str, Any]:
    """`ready --compute--> done` (final): `compute` faults until the data holds a divisor."""
    return workflow(
        [
            state("ready", 1, [transition("compute", "done", onExecutionTasks=[DIVIDE])]),
            state("done", 3, subType=1),
        ],
        key=WORKFLOW,
    )


@pytest.fixture
def operator_account() -> Any:
    """Staff in the `operators` group (not superuser), the group as its data migration makes it.

    A transactional test empties every table when it ends, the migrated group with them: after
    an earlier one (the whole suite) the group is rebuilt from the migration's own list.
    `serialized_rollback` would restore it, but collides with the content types that the flush
    re-created under new ids."""
    migration = importlib.import_module("instances.migrations.0007_operators_group")
    group, _ = Group.objects.get_or_create(name=migration.GROUP)
    group.permissions.add(
        *(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
            for app_label, codename in migration.PERMISSIONS
        )
    )
    return staff_operator()


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    """Headless Chromium at a fixed size, quit when the test ends."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    if missing:
        pytest.fail(
            f"{' and '.join(missing)} missing: the browser tests need Debian's chromium and "
            "chromium-driver. `make browser` installs them (`make test` does it first), or: "
            "apt-get install -y --no-install-recommends chromium chromium-driver",
            pytrace=False,
        )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start;
    # --disable-dev-shm-usage: containers have a small /dev/shm, which crashes tabs.
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    # One layout every run, wide enough that the filter sidebar sits beside the list.
    options.add_argument("--window-size=1400,1000")
    # With chromedriver's path given, Selenium Manager stays out (it would look for, or
    # download, a driver of its own); binary_location makes that driver start Debian's chromium.
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    yield driver
    driver.quit()


def until(driver: WebDriver) -> WebDriverWait[WebDriver]:
    """A wait on a condition of the page (polled; it ends as soon as the condition holds)."""
    return WebDriverWait(driver, WAIT_SECONDS)


def click_and_load(driver: WebDriver, element: WebElement) -> None:
    """Click what leads to another page, and wait until that page has loaded: the old page's
    root is gone and the new one is complete (its scripts ran)."""
    old_page = driver.find_element(By.TAG_NAME, "html")
    element.click()
    until(driver).until(EC.staleness_of(old_page))
    until(driver).until(lambda d: d.execute_script("return document.readyState") == "complete")


def listed(driver: WebDriver) -> dict[str, str]:
    """The changelist's rows as the operator sees them: instance id -> status shown."""
    rows = driver.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    return {
        str(row.find_element(By.CSS_SELECTOR, "input.action-select").get_attribute("value")): (
            row.find_element(By.CSS_SELECTOR, "td.field-status").text
        )
        for row in rows
    }


def status_filter(driver: WebDriver, label: str) -> WebElement:
    """The sidebar's link to the instances of one status ("Faulted", "Completed", ...)."""
    return driver.find_element(
        By.XPATH,
        "//nav[@id='changelist-filter']//details[@data-filter-title='status']"
        f"//a[normalize-space()='{label}']",
    )


def test_operator_filters_faulted_instances_retries_one_and_sees_it_completed(
    live_server: Any, operator_account: Any, browser: WebDriver
) -> None:
    """An operator (staff in the `operators` group, not superuser) finds the Faulted instances
    with the sidebar filter (the Active one drops out), ticks the one whose cause was repaired,
    runs Retry, is shown what re-runs (the transition and step) and which incident it resolves,
    confirms, and reads the success message; the instance then lists as Completed, in the
    browser and in the database, and the instance left unticked is still Faulted."""
    publish(settle())
    repaired, still_broken = faulted_instance(WORKFLOW), faulted_instance(WORKFLOW)
    started = instance_start(
        domain="core", workflow=WORKFLOW, body={}, info=RequestInfo(actor="client")
    )
    active = Instance.objects.get(pk=started.instance.id)
    assert active.status == "A"
    repair_outside(repaired)  # the divisor is there now: compute can succeed
    incident = Incident.objects.get(instance=repaired, resolved=False)
    operator, driver = operator_account, browser

    driver.get(live_server.url + reverse("admin:login"))
    driver.find_element(By.ID, "id_username").send_keys(operator.username)
    driver.find_element(By.ID, "id_password").send_keys(PASSWORD)
    click_and_load(driver, driver.find_element(By.CSS_SELECTOR, "#login-form [type=submit]"))
    # Logged in: the header greets the operator (its CSS shows the name in capitals).
    welcome = driver.find_element(By.CSS_SELECTOR, "#user-tools strong")
    assert welcome.get_property("textContent") == operator.username

    changelist = reverse("admin:instances_instance_changelist")
    click_and_load(driver, driver.find_element(By.CSS_SELECTOR, f"#content a[href='{changelist}']"))
    assert listed(driver) == {
        str(repaired.pk): "Faulted",
        str(still_broken.pk): "Faulted",
        str(active.pk): "Active",
    }

    click_and_load(driver, status_filter(driver, "Faulted"))
    assert "status__exact=F" in driver.current_url
    assert listed(driver) == {str(repaired.pk): "Faulted", str(still_broken.pk): "Faulted"}

    driver.find_element(By.CSS_SELECTOR, f"input.action-select[value='{repaired.pk}']").click()
    # The admin's own script counts the selection: the tick registered, the page's JS runs.
    until(driver).until(
        EC.text_to_be_present_in_element((By.CSS_SELECTOR, ".action-counter"), "1 of 2 selected")
    )
    Select(driver.find_element(By.NAME, "action")).select_by_value("retry")
    click_and_load(driver, driver.find_element(By.CSS_SELECTOR, "button[name=index]"))

    assert driver.find_element(By.CSS_SELECTOR, "#content h1").text == "Retry: are you sure?"
    plan = driver.find_elements(By.CSS_SELECTOR, "#operator-action-plan tbody tr")
    assert len(plan) == 1
    cells = [cell.text for cell in plan[0].find_elements(By.TAG_NAME, "td")]
    assert cells[:5] == [
        str(repaired.pk),
        WORKFLOW,
        "Faulted",
        "ready",
        "compute from state ready at step ON_EXECUTE",
    ]
    assert incident.error_code == "Task:400008"  # ZeroDivisionError in compute's task
    assert cells[5].startswith(f"{incident.error_code} at {incident.step}: ")
    click_and_load(driver, driver.find_element(By.CSS_SELECTOR, "#content form [type=submit]"))

    # The admin capitalises the first letter of a message; an instance id may start with one.
    shown = driver.find_elements(By.CSS_SELECTOR, ".messagelist li")
    assert [(item.get_attribute("class"), item.text) for item in shown] == [
        ("success", capfirst(f"{repaired.pk}: retried (status C)"))
    ]
    # Back on the Faulted list, which the retried instance has left.
    assert listed(driver) == {str(still_broken.pk): "Faulted"}
    click_and_load(driver, status_filter(driver, "Completed"))
    assert listed(driver) == {str(repaired.pk): "Completed"}
    assert driver.find_element(By.CSS_SELECTOR, "#result_list td.field-current_state").text == (
        "done"
    )

    row = Instance.objects.get(pk=repaired.pk)
    assert (row.status, row.current_state, row.data["quotient"]) == ("C", "done", 2.5)
    incident.refresh_from_db()
    assert (incident.resolved, incident.resolution, incident.resolved_by) == (
        True,
        "retried",
        operator.username,
    )
    audit = OperatorAction.objects.get(instance=repaired)
    assert (audit.actor, audit.action, audit.outcome) == (
        operator.username,
        "retry",
        "retried (status C)",
    )
    assert Instance.objects.get(pk=still_broken.pk).status == "F"
    assert Instance.objects.get(pk=active.pk).status == "A"
